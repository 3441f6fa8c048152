//! Stores for stateful stream operators, layered over any
//! [`KeyValueStore`](store_api::KeyValueStore): every backend that passes the conformance
//! suite gets all of them, and a `LoggedStore` underneath makes them durable without knowing
//! their shape.
//!
//! - [`TypedStore`]: keys and values of Rust types, keys through the order-preserving
//!   [`OrderedKeys`] codec so typed ranges follow the key type's order, values through
//!   [`Postcard`] or [`Json`]; puts and deletes that return the old value.
//! - [`Evolving`]: a value codec with a schema version header, reading older versions through
//!   the value type's [`Schema`] migrations.
//! - [`TtlStore`]: entries that expire a time to live after their write, by stream time or the
//!   wall clock; expiries are deletes in the commit that expired them.
//! - [`TimestampedStore`]: a typed store whose values carry their record's timestamp.
//! - [`LruStore`]: a store bounded to a number of entries, evicting the least recently used;
//!   evictions are ordinary deletes, so a logged one logs them.
//! - [`MeteredStore`]: exact per-operation counts and sampled latencies through the `metrics`
//!   facade, nothing at all without a recorder.
//! - [`window`], [`session`], [`versioned`]: window, session and versioned stores, expiring by
//!   time: whole segments for the first two, a cleanup index of dead versions for the third.
//!
//! With the `conformance` feature, `conformance` holds the suites of each store type and
//! `operator_suite!` runs them on a backend, plain and logged.

mod codec;
#[cfg(feature = "conformance")]
pub mod conformance;
mod layout;
mod lru;
pub mod metered;
mod schema;
mod segmented;
pub mod session;
mod timestamped;
mod ttl;
mod typed;
pub mod versioned;
pub mod window;

pub use codec::{BigEndian, Json, KeyCodec, OrderedKeys, Postcard, Raw, Utf8, ValueCodec};
pub use layout::APP_KEY_TAG;
pub use lru::LruStore;
pub use metered::{MeteredRestoreListener, MeteredStore, RecordingLevel};
pub use schema::{Evolving, SCHEMA_MAGIC, Schema, stored_version};
pub use timestamped::{Timestamped, TimestampedStore, ValueAndTimestamp};
pub use ttl::{TtlClock, TtlConfig, TtlStore};
pub use typed::{TypedIter, TypedStore};
