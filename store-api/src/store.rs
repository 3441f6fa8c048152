//! The key-value store trait and its contract.

use std::fmt::Debug;
use std::ops::{Bound, ControlFlow};

use crate::bounds::{as_ref_bound, prefix_bounds};
use crate::bulk::BulkLoader;
use crate::{BatchOp, Capabilities, Result, WriteBatch};

/// A key and its value.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// The visitor of [`KeyValueStore::get_with`]: called once with the value, `None` when absent.
pub type ValueVisitor<'a> = dyn FnMut(Option<&[u8]>) + 'a;

/// The visitor of [`KeyValueStore::scan`]: called with each pair in order; `Break` stops the
/// scan.
pub type PairVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

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

    /// Hands the value at `key` to `f` as a borrowed slice, or `None` when the key is absent:
    /// the same answer as [`get`](KeyValueStore::get), without copying the value out of the
    /// engine where the engine can lend it.
    ///
    /// `f` is called exactly once when this returns `Ok`, and not at all when it returns an
    /// error. The slice is valid only during the call. `f` runs on the caller's thread with
    /// no lock of the store held, so it may call this store's other methods.
    ///
    /// The default implementation calls `get` and lends its copy; backends override it.
    ///
    /// # Errors
    /// As [`get`](KeyValueStore::get).
    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        let value = self.get(key)?;
        f(value.as_deref());
        Ok(())
    }

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

    /// As [`write`](KeyValueStore::write), for operations the caller keeps: applies `ops`, in
    /// order, atomically, with the same checks and guarantees. Every engine copies a batch
    /// into its own format anyway, so a caller that must keep its operations (a changelog
    /// commit keeps them readable until the store holds them) need not clone them into a
    /// [`WriteBatch`] first.
    ///
    /// The default implementation clones `ops` into a `WriteBatch` for `write`; backends
    /// override it.
    ///
    /// # Errors
    /// As [`write`](KeyValueStore::write).
    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        self.write(ops.iter().cloned().collect())
    }

    /// As [`write_ops`](KeyValueStore::write_ops), without the atomicity: applies `ops` in
    /// order (of two operations on one key the later wins), but a concurrent reader may see
    /// some of them applied and not others, and an engine failure or a crash may leave any of
    /// them applied. For a caller that hides a partial write and repairs it: a changelog
    /// commit keeps its operations readable in its own buffer until this returns, and after a
    /// crash replays them from its log.
    ///
    /// The default implementation is [`write_ops`](KeyValueStore::write_ops); an engine whose
    /// atomic batch costs more than its single writes overrides it (sled pins its log and its
    /// epoch-based reclamation for a whole batch).
    ///
    /// # Errors
    /// `InvalidArgument` if any key or value is oversized (then nothing is written), `Closed`,
    /// or an engine failure (then any of `ops` may be applied).
    fn write_ops_non_atomic(&self, ops: &[BatchOp]) -> Result<()> {
        self.write_ops(ops)
    }

    /// Removes every key between `from` and `to`: the keys [`range`](KeyValueStore::range)
    /// with the same bounds would yield. `from` after `to`, or an empty interval, removes
    /// nothing, as does a range holding no key.
    ///
    /// It is not one atomic write: keys are removed in one or more atomic steps, in
    /// ascending order, so a concurrent reader, or the store reopened after a crash, may see
    /// the lower keys removed and the higher ones not yet. A key written inside the range
    /// while it runs may or may not be removed. Memory stays bounded however many keys the
    /// range holds.
    ///
    /// The default implementation scans the range and deletes its keys in batches of
    /// [`DELETE_RANGE_BATCH_KEYS`] (see [`delete_keys_in_range`]); an engine with a native
    /// range deletion (RocksDB's `DeleteRange`) overrides it to write one range tombstone,
    /// whatever the number of keys.
    ///
    /// # Errors
    /// `Closed` or an engine failure; then some lower part of the range may be removed.
    fn delete_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<()> {
        delete_keys_in_range(self, from, to).map(drop)
    }

    /// A loader that fills this store from an ordered stream of writes faster than
    /// [`write`](KeyValueStore::write) (see [`BulkLoader`] for its contract), or `None` when
    /// the store has no such path. A restore into an empty store from the start of its
    /// changelog uses it when offered.
    ///
    /// The default implementation returns `None`, so a backend that does not override it is
    /// restored by replaying batches.
    ///
    /// # Errors
    /// `Closed`, or an I/O or engine failure preparing the loader.
    fn bulk_loader(&self) -> Result<Option<Box<dyn BulkLoader + '_>>> {
        Ok(None)
    }

    /// The store's checkpoints (a copy of its content as the engine's own files, see
    /// [`Checkpoints`](crate::Checkpoints)), or `None` when the engine has none. Snapshots of a
    /// store that offers them are its files, else an export of its pairs.
    ///
    /// The default implementation returns `None`.
    fn checkpoints(&self) -> Option<&dyn crate::Checkpoints> {
        None
    }

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

    /// Visits the pairs between `from` and `to` in ascending key order (descending if
    /// `reverse`), lending each key and value to `f` as slices valid only during the call.
    /// `f` returning [`ControlFlow::Break`] stops the scan at once: no further pair is read
    /// or visited.
    ///
    /// It selects and orders keys as [`range`](KeyValueStore::range) and
    /// [`reverse_range`](KeyValueStore::reverse_range) do, with the same consistency: every
    /// write that completed before the call is seen; a write made while it runs is never
    /// seen if [`Capabilities::snapshot_iterators`] is true, and may or may not be seen if it
    /// is false; each key is visited at most once. `from` after `to`, or an empty interval,
    /// visits nothing. `f` runs on the caller's thread with no lock of the store held, so it
    /// may call this store's other methods.
    ///
    /// The default implementation walks `range` or `reverse_range` and lends each owned
    /// pair; backends override it to lend pairs from the engine without copying them.
    ///
    /// # Errors
    /// `Closed` or an engine failure, before any pair is visited or after some were; the scan
    /// ends at the error.
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        f: &mut PairVisitor<'_>,
    ) -> Result<()> {
        let pairs = if reverse {
            self.reverse_range(from, to)?
        } else {
            self.range(from, to)?
        };
        for pair in pairs {
            let (key, value) = pair?;
            if f(&key, &value).is_break() {
                break;
            }
        }
        Ok(())
    }

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

/// Keys per `WriteBatch` of [`delete_keys_in_range`]: 1000, as a restore's batches.
pub const DELETE_RANGE_BATCH_KEYS: usize = 1000;

/// Removes every key of `store` between `from` and `to` by scanning the range and deleting
/// its keys, [`DELETE_RANGE_BATCH_KEYS`] per batch; returns how many it deleted. This is the
/// default [`KeyValueStore::delete_range`], for an override that must keep per-key deletes
/// (a changelogged store logs one tombstone per key, which compaction needs).
///
/// # Errors
/// Any error of the store's `scan` or `write`; the batches written before it stay written.
pub fn delete_keys_in_range<S: KeyValueStore + ?Sized>(
    store: &S,
    from: Bound<&[u8]>,
    to: Bound<&[u8]>,
) -> Result<u64> {
    let mut deleted = 0u64;
    let mut after: Option<Vec<u8>> = None;
    loop {
        // Each pass starts after the last key deleted, so an engine that keeps tombstones
        // (an LSM) is not made to skip them all again.
        let start = after.as_deref().map_or(from, Bound::Excluded);
        let mut batch = WriteBatch::with_capacity(DELETE_RANGE_BATCH_KEYS);
        store.scan(start, to, false, &mut |key, _| {
            batch.push(BatchOp::Delete { key: key.to_vec() });
            if batch.len() < DELETE_RANGE_BATCH_KEYS {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        })?;
        let Some(last) = batch.ops().last().map(|op| op.key().to_vec()) else {
            return Ok(deleted);
        };
        deleted += batch.len() as u64;
        store.write(batch)?;
        after = Some(last);
    }
}
