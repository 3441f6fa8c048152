//! The key-value store trait and its contract.

use std::fmt::Debug;
use std::ops::Bound;

use crate::bounds::{as_ref_bound, prefix_bounds};
use crate::{Capabilities, Result, WriteBatch};

/// A key and its value.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// An owned iterator over key-value pairs. It may outlive the borrow of the store that made it
/// and be sent to another thread. An `Err` item ends the iteration: the iterator yields nothing
/// after it.
pub type KvIter = Box<dyn Iterator<Item = Result<KvPair>> + Send + 'static>;

/// A byte-oriented key-value store.
///
/// # Contract
/// - Keys and values are byte strings of any content. Keys are ordered by unsigned
///   lexicographic byte order (`memcmp`, a proper prefix sorts first). The empty key and the
///   empty value are ordinary: an empty value is present, unlike a missing one.
/// - Keys up to [`MAX_KEY_LEN`](crate::limits::MAX_KEY_LEN) and values up to
///   [`MAX_VALUE_LEN`](crate::limits::MAX_VALUE_LEN) are accepted; longer ones fail with
///   [`Error::InvalidArgument`](crate::Error::InvalidArgument) and write nothing.
/// - Every method is safe to call from many threads at once (`Send + Sync`). A write is visible
///   to every read that starts after the write returned.
/// - After [`close`](KeyValueStore::close), every method fails with
///   [`Error::Closed`](crate::Error::Closed); `close` itself may be called again.
/// - Unless [`flush`](KeyValueStore::flush) returned since, a crash may lose recent writes,
///   but never part of a write or a batch, and never a write older than the last `flush`.
/// - Bad input is an error, never a panic.
pub trait KeyValueStore: Send + Sync + Debug + 'static {
    /// The registered name of the engine behind this store, such as `"rocksdb"`.
    fn name(&self) -> &str;

    /// The optional behaviour this store provides.
    fn capabilities(&self) -> Capabilities;

    /// The value at `key`, or `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key, `Closed`, or an engine failure.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Sets `key` to `value`, replacing any previous value.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or value, `Closed`, or an engine failure; on
    /// error the previous value is unchanged.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Sets `key` to `value` only if the key is absent, atomically with respect to every other
    /// write. Returns `None` when it wrote, or the existing value, unchanged, when it did not.
    ///
    /// # Errors
    /// As [`put`](KeyValueStore::put).
    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Removes `key`. Removing a missing key succeeds.
    ///
    /// # Errors
    /// As [`get`](KeyValueStore::get).
    fn delete(&self, key: &[u8]) -> Result<()>;

    /// Applies every operation of `batch`, in order, atomically: a concurrent reader and a
    /// crash see all of it or none of it, and when two operations touch one key the later wins.
    /// An empty batch succeeds and writes nothing.
    ///
    /// # Errors
    /// `InvalidArgument` if any key or value is oversized (then nothing is written), `Closed`,
    /// or an engine failure (then nothing is written).
    fn write(&self, batch: WriteBatch) -> Result<()>;

    /// Iterates, in ascending key order, over the keys between `from` and `to`.
    ///
    /// `from` after `to`, or an empty interval, yields nothing; it is not an error (`from`
    /// after `to` is logged as a warning once per store, see
    /// [`InvertedRangeWarning`](crate::InvertedRangeWarning)). The
    /// iterator sees every write that completed before this call. A write made while it runs
    /// is never seen if [`Capabilities::snapshot_iterators`] is true, and may or may not be
    /// seen if it is false; in either case each key appears at most once and keys strictly
    /// ascend.
    ///
    /// # Errors
    /// `Closed` or an engine failure, either now or as an `Err` item later.
    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter>;

    /// As [`range`](KeyValueStore::range), in descending key order.
    ///
    /// # Errors
    /// As [`range`](KeyValueStore::range).
    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter>;

    /// Iterates, in ascending order, over the keys that start with `prefix`. The empty prefix
    /// selects every key.
    ///
    /// # Errors
    /// As [`range`](KeyValueStore::range).
    fn prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        let (from, to) = prefix_bounds(prefix);
        self.range(as_ref_bound(&from), as_ref_bound(&to))
    }

    /// As [`prefix_scan`](KeyValueStore::prefix_scan), in descending order.
    ///
    /// # Errors
    /// As [`range`](KeyValueStore::range).
    fn reverse_prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        let (from, to) = prefix_bounds(prefix);
        self.reverse_range(as_ref_bound(&from), as_ref_bound(&to))
    }

    /// An estimate of the number of keys, cheap to compute. It is exact for some backends
    /// (see their docs) and may lag or overcount for others.
    ///
    /// # Errors
    /// `Closed` or an engine failure.
    fn approximate_len(&self) -> Result<u64>;

    /// Makes every write that returned before this call durable: it survives a crash of the
    /// process or the machine. A no-op for stores that are not
    /// [`persistent`](Capabilities::persistent).
    ///
    /// # Errors
    /// `Closed`, or an I/O or engine failure; then nothing is promised about durability. A
    /// persistent store whose files are gone (its directory removed under it) fails here,
    /// even when its engine could still sync the unlinked files.
    fn flush(&self) -> Result<()>;

    /// Flushes and releases the store's files and locks. Every later call fails with
    /// `Closed`; a second `close` succeeds and does nothing. Dropping the store closes it too,
    /// but drop cannot report an error.
    ///
    /// # Errors
    /// An I/O or engine failure while flushing.
    fn close(&self) -> Result<()>;
}
