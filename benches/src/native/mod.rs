//! The engines driven through their own APIs, for the abstraction-overhead benches.
//!
//! Each disk adapter opens its engine with the options its backend builds from
//! `Config::default()` (RocksDB's `db_options` and `write_options`, sled's `to_sled`, redb's
//! `builder`), so both sides run the engine with the same
//! settings. Every
//! adapter issues each [`Target`] operation the way a user of that engine alone
//! would: the cheapest call, values read in place where the engine lends them. The gap between
//! an adapter and [`ApiTarget`](crate::ApiTarget) on the same engine is therefore the cost of
//! statestore's abstraction: bounds and limit checks, the closed-store lock, owned iterators
//! and values copied into `Vec`s.
//!
//! The disk adapters ([`DiskTarget`]) also lay out their files as the backend does (file
//! names, table, tree or column family), so the backend opens a directory an adapter wrote and
//! both sides of a comparison can read the very same data.

use std::path::Path;

use store_api::Result;

use crate::target::Target;

mod btree;
mod layout;
mod redb;
mod rocksdb;
mod sled;

pub use self::btree::BTreeTarget;
pub use self::layout::LayoutTarget;
pub use self::redb::RedbTarget;
pub use self::rocksdb::RocksDbTarget;
pub use self::sled::SledTarget;

/// A native adapter on an engine that keeps its data in a directory, in the layout of the
/// statestore backend named [`BACKEND`](DiskTarget::BACKEND).
pub trait DiskTarget: Target + Sized {
    /// The statestore backend that opens this adapter's directories.
    const BACKEND: &'static str;

    /// Opens, creating if needed, the engine in `dir` with the backend's default settings.
    ///
    /// # Errors
    /// An I/O error creating `dir`, or the engine's open error.
    fn open(dir: &Path) -> Result<Self>;

    /// Makes every write so far durable and returns once the engine has no background work
    /// left from them (flushes, compactions), so that what is measured next does not compete
    /// with it.
    ///
    /// # Errors
    /// Any engine failure.
    fn settle(&self) -> Result<()>;

    /// Makes every write durable and closes the engine; returns once `dir` can be opened again,
    /// by this adapter or by the backend.
    ///
    /// # Errors
    /// Any engine failure, or the engine not releasing `dir` in time.
    fn close(self) -> Result<()>;
}
