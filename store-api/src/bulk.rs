//! Bulk loading: an optional fast path for filling a store from an ordered stream of writes,
//! such as a changelog restored from its start.

use crate::{BatchOp, Result};

/// Loads an ordered stream of writes into the store that handed it out (see
/// [`KeyValueStore::bulk_loader`](crate::KeyValueStore::bulk_loader)), faster than applying
/// them as batches, typically by building the engine's files directly (RocksDB's SST files,
/// ingested).
///
/// # Contract
/// - The operations of every [`load`](BulkLoader::load), call after call, take effect as if
///   written in that order after every write the store held when the loader was made: when
///   one key is written several times, the last write wins, deletes included.
/// - The caller is the only writer of the store while the loader lives; reads are allowed.
/// - Loaded operations become visible and durable in chunks, at the latest when
///   [`finish`](BulkLoader::finish) returns `Ok`. Until then a reader, or the store reopened
///   after a crash, may see any prefix of the chunks, never part of one: a caller that needs
///   all or nothing (a restore) must not vouch for the store's content until `finish`
///   returned, and must start over from an empty store after a failure or a crash.
/// - Memory stays bounded whatever the number of operations loaded: the loader spills a
///   chunk into the store when its own buffer fills.
/// - Dropping a loader without `finish` leaves the store holding some prefix of its chunks,
///   as a crash does; the loader's temporary files are removed.
pub trait BulkLoader: Send {
    /// Loads `ops`, in order, after every operation loaded before.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or value (then nothing of `ops` is loaded),
    /// `Closed`, or an I/O or engine failure; after an error the loader must be dropped.
    fn load(&mut self, ops: Vec<BatchOp>) -> Result<()>;

    /// Makes every loaded operation visible and durable, and releases the loader.
    ///
    /// # Errors
    /// `Closed`, or an I/O or engine failure; then only a prefix of the chunks may be in the
    /// store.
    fn finish(self: Box<Self>) -> Result<()>;
}
