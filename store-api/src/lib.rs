//! The narrow, byte-oriented key-value API that every statestore backend implements.
//!
//! This crate depends on no storage engine. It defines:
//! - [`KeyValueStore`], the dyn-compatible store trait, whose docs are the contract every
//!   backend meets and the `statestore-conformance` suite checks;
//! - [`WriteBatch`], writes as data, applied atomically;
//! - [`Error`], the one error type, with an [`ErrorKind`] per failure class;
//! - [`Capabilities`], the optional behaviour a backend declares, and [`Checkpoints`], the
//!   optional copy of a store as its own files;
//! - [`BackendFactory`], which opens a backend by name with options from configuration.
//!
//! ```
//! use std::ops::Bound;
//! use store_api::{bounds, WriteBatch};
//!
//! let mut batch = WriteBatch::new();
//! batch.put(b"user/1".to_vec(), b"ada".to_vec()).delete(b"user/2".to_vec());
//! assert!(batch.validate().is_ok());
//! // A prefix scan is the range [prefix, successor(prefix)).
//! assert_eq!(bounds::prefix_upper_bound(b"user/"), Bound::Excluded(b"user0".to_vec()));
//! ```

mod batch;
pub mod bounds;
mod bulk;
mod capabilities;
mod checkpoint;
mod error;
mod factory;
mod inverted;
pub mod limits;
mod store;
mod store_dir;

pub use batch::{BatchOp, WriteBatch};
pub use bulk::BulkLoader;
pub use capabilities::Capabilities;
pub use checkpoint::Checkpoints;
pub use error::{BoxError, Error, ErrorKind, Result};
pub use factory::{BackendFactory, BackendOptions, create_store_dir, parse_options};
pub use inverted::InvertedRangeWarning;
pub use store::{
    DELETE_RANGE_BATCH_KEYS, KeyValueStore, KvIter, KvPair, PairVisitor, ValueVisitor,
    delete_keys_in_range,
};
pub use store_dir::StoreDirIdentity;
