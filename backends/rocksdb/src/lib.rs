//! The RocksDB backend of statestore: a [`KeyValueStore`] on one RocksDB database (the default
//! column family), registered as `"rocksdb"`.
//!
//! It is built on RocksDB's own mechanisms: batches are native `WriteBatch`es, ranges are native
//! iterate bounds, iterators read RocksDB's implicit snapshot, durability is the write-ahead log
//! (or memtable flushes when the log is off). Tuning lives in [`Config`].
//!
//! ```
//! use std::ops::Bound;
//! use statestore_rocksdb::{Config, RocksDbStore};
//! use store_api::{KeyValueStore, WriteBatch};
//!
//! let dir = tempfile::tempdir()?;
//! let store = RocksDbStore::open(dir.path(), Config::default())?;
//! store.put(b"user/1", b"ada")?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"user/2", b"grace").put(b"user/3", b"").delete(b"user/1");
//! store.write(batch)?;
//!
//! let users: Vec<_> = store.prefix_scan(b"user/")?.collect::<Result<_, _>>()?;
//! assert_eq!(users, vec![
//!     (b"user/2".to_vec(), b"grace".to_vec()),
//!     (b"user/3".to_vec(), Vec::new()),
//! ]);
//! let last = store.reverse_range(Bound::Unbounded, Bound::Included(b"user/2"))?.next();
//! assert_eq!(last.transpose()?, Some((b"user/2".to_vec(), b"grace".to_vec())));
//!
//! store.close()?; // flushes, then releases the directory
//! let reopened = RocksDbStore::open(dir.path(), Config::default())?;
//! assert_eq!(reopened.get(b"user/2")?, Some(b"grace".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Contract decisions
//! - **Iterators are snapshots.** A RocksDB iterator reads the sequence number current when it
//!   is created, so no later write is ever seen: [`Capabilities::snapshot_iterators`] is true.
//! - **Iterators are owned.** Each holds an `Arc` of the database and the native iterator
//!   borrowing it (see `iter.rs`). It therefore keeps the database open: after
//!   [`close`](KeyValueStore::close), the store answers [`Error::Closed`], but the files and
//!   the `LOCK` are released only when the last outstanding iterator is dropped.
//! - **`put_if_absent` is atomic** with respect to every write through this store: plain
//!   writes share a gate that `put_if_absent` takes exclusively for its read-then-write.
//! - **Empty keys and values** are stored as is; RocksDB supports both. **Large values**
//!   (tested at 8 MiB) are stored inline, up to [`MAX_VALUE_LEN`](store_api::limits::MAX_VALUE_LEN).
//! - **Bulk loading**: [`bulk_loader`](KeyValueStore::bulk_loader) writes sorted SST files and
//!   ingests them (see `bulk.rs`), so a restore from empty skips the write-ahead log, the
//!   memtable and most compaction work; [`Config::bulk_load_bytes`] bounds its memory, `0`
//!   turns it off. A loader, like an iterator, holds the database open until it is dropped.
//! - **Checkpoints**: [`checkpoints`](KeyValueStore::checkpoints) offers RocksDB's own
//!   checkpoints (hard links of its SST files), which snapshots upload as they are, and
//!   replaces the store's files with a downloaded one (see `checkpoint.rs`).
//! - **Range deletion**: [`delete_range`](KeyValueStore::delete_range) writes one RocksDB range
//!   tombstone (`DeleteRange`), atomically, whatever the number of keys it covers.
//! - **Locking**: a second open of an open directory, by this process or another, fails with
//!   [`Error::Locked`] (RocksDB's `LOCK` file).

mod budget;
mod bulk;
mod checkpoint;
mod config;
mod error;
mod iter;

use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rocksdb::{DB, ReadOptions, WriteOptions};
use store_api::bounds::prefix_upper_bound;
use store_api::limits::{check_entry, check_key, check_ops};
use store_api::{
    BackendFactory, BackendOptions, BatchOp, BulkLoader, Capabilities, Checkpoints, Error,
    InvertedRangeWarning, KeyValueStore, KvIter, PairVisitor, Result, StoreDirIdentity,
    ValueVisitor, WriteBatch, create_store_dir, parse_options,
};

pub use budget::{BudgetUsage, MemoryBudget};
pub use config::{Compression, Config};

use error::{BACKEND, from_open, from_rocksdb};
use iter::{RocksIter, bounded_read_options};

/// Opens [`RocksDbStore`]s by name (`"rocksdb"`), with options deserialized into [`Config`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RocksDbFactory;

impl BackendFactory for RocksDbFactory {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
        let config: Config = parse_options(BACKEND, options)?;
        Ok(Box::new(RocksDbStore::open(dir, config)?))
    }
}

/// A key-value store on a RocksDB database. See the [crate docs](crate) for its contract
/// decisions.
pub struct RocksDbStore {
    /// `None` once closed. Every operation holds the read lock for its duration, so `close`
    /// waits for operations in flight and none starts after it.
    db: RwLock<Option<Arc<DB>>>,
    /// Plain writes take it shared, `put_if_absent` exclusively: RocksDB has no native
    /// conditional put outside its transaction DBs, which would tax every write.
    write_gate: RwLock<()>,
    read_opts: ReadOptions,
    write_opts: WriteOptions,
    wal: bool,
    /// The options the database was opened with, to open it again on a restored checkpoint.
    db_opts: rocksdb::Options,
    /// The format of the SST files a bulk load writes.
    sst_opts: Arc<rocksdb::Options>,
    /// [`Config::bulk_load_bytes`]: 0 when bulk loading is off.
    bulk_load_bytes: usize,
    /// The memory budget shared with other stores, kept alive while this store uses it.
    memory: Option<Arc<budget::SharedMemory>>,
    path: PathBuf,
    /// Checked after every flush: RocksDB syncs its open files even when the directory was
    /// removed, so only this tells that the flush cannot be durable.
    dir: StoreDirIdentity,
    inverted: InvertedRangeWarning,
}

impl RocksDbStore {
    /// Opens, creating if `config.create_if_missing`, the database in directory `dir`.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad option or a missing store that may not be created,
    /// `Locked` when the directory is already open, `Corruption` for unreadable files, `Io`
    /// when the directory cannot be created, or a backend error.
    pub fn open(dir: &Path, config: Config) -> Result<RocksDbStore> {
        config.validate()?;
        if config.create_if_missing {
            create_store_dir(dir)?;
        }
        let memory = config
            .memory_budget
            .as_ref()
            .map(budget::shared)
            .transpose()?;
        let db_opts = config.db_options_sharing(memory.as_deref());
        let db = DB::open(&db_opts, dir).map_err(|err| from_open(dir, err))?;
        // The files of a bulk load or checkpoint that died with its process; opened, so the
        // store is ours.
        bulk::remove_bulk_dir(dir)?;
        checkpoint::remove_leftovers(dir)?;
        Ok(RocksDbStore {
            dir: StoreDirIdentity::capture(dir)?,
            inverted: InvertedRangeWarning::new(format!("{BACKEND} {}", dir.display())),
            db: RwLock::new(Some(Arc::new(db))),
            write_gate: RwLock::new(()),
            read_opts: ReadOptions::default(),
            write_opts: config.write_options(),
            wal: config.wal,
            db_opts,
            sst_opts: Arc::new(config.sst_options()),
            bulk_load_bytes: config.bulk_load_bytes,
            memory,
            path: dir.to_path_buf(),
        })
    }

    /// What the memory budget this store shares holds now, `None` without one.
    pub fn memory_budget_usage(&self) -> Option<BudgetUsage> {
        self.memory.as_ref().map(|memory| memory.usage())
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `op` on the open database, or fails with `Closed`.
    fn with_db<T>(&self, op: impl FnOnce(&DB) -> Result<T, rocksdb::Error>) -> Result<T> {
        let guard = self.db.read();
        let db = guard.as_deref().ok_or(Error::Closed)?;
        op(db).map_err(from_rocksdb)
    }

    /// Runs a plain write, shared with other plain writes but never with `put_if_absent`.
    fn with_write(&self, op: impl FnOnce(&DB) -> Result<(), rocksdb::Error>) -> Result<()> {
        self.with_db(|db| {
            let _shared = self.write_gate.read();
            op(db)
        })
    }

    /// Makes every completed write durable: sync the log, or flush the memtables without it;
    /// then checks that the synced files are still the store's.
    fn persist(&self, db: &DB) -> Result<()> {
        let synced = if self.wal {
            db.flush_wal(true)
        } else {
            db.flush()
        };
        synced.map_err(from_rocksdb)?;
        self.dir.verify()
    }

    /// An owned iterator with `opts`, or `Closed`.
    fn iter(&self, opts: ReadOptions, reverse: bool) -> Result<KvIter> {
        let db = self.db.read().clone().ok_or(Error::Closed)?;
        Ok(Box::new(RocksIter::new(db, opts, reverse)))
    }

    fn bounded(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        if self.inverted.range_is_empty(from, to) {
            // Still report a closed store.
            return self.with_db(|_| Ok(Box::new(std::iter::empty()) as KvIter));
        }
        self.iter(bounded_read_options(from, to), reverse)
    }

    /// The prefix range, with the bounds moved into the options instead of copied again.
    fn prefix(&self, prefix: &[u8], reverse: bool) -> Result<KvIter> {
        let mut opts = ReadOptions::default();
        opts.set_iterate_lower_bound(prefix);
        if let Bound::Excluded(end) = prefix_upper_bound(prefix) {
            opts.set_iterate_upper_bound(end);
        }
        self.iter(opts, reverse)
    }
}

impl fmt::Debug for RocksDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbStore")
            .field("path", &self.path)
            .field("open", &self.db.read().is_some())
            .field("wal", &self.wal)
            .finish_non_exhaustive()
    }
}

impl KeyValueStore for RocksDbStore {
    fn name(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_persistent(true)
            .with_snapshot_iterators(true)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.with_db(|db| {
            let value = db.get_pinned_opt(key, &self.read_opts)?;
            Ok(value.map(|pinned| pinned.to_vec()))
        })
    }

    /// Lends RocksDB's pinned slice: the value is read in place from the block cache or the
    /// memtable, never copied.
    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        check_key(key)?;
        // A handle of our own, so `f` runs with no lock of the store held.
        let db = self.db.read().clone().ok_or(Error::Closed)?;
        let value = db
            .get_pinned_opt(key, &self.read_opts)
            .map_err(from_rocksdb)?;
        f(value.as_deref());
        Ok(())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.with_write(|db| db.put_opt(key, value, &self.write_opts))
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_entry(key, value)?;
        self.with_db(|db| {
            let _exclusive = self.write_gate.write();
            if let Some(existing) = db.get_pinned_opt(key, &self.read_opts)? {
                return Ok(Some(existing.to_vec()));
            }
            db.put_opt(key, value, &self.write_opts)?;
            Ok(None)
        })
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.with_write(|db| db.delete_opt(key, &self.write_opts))
    }

    /// RocksDB copies the operations into its own batch either way.
    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_ops(batch.ops())
    }

    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        check_ops(ops)?;
        // RocksDB's batch format: a 12-byte header, then per operation a tag and two varint
        // lengths (at most 11 bytes) before the key and value.
        let payload: usize = ops
            .iter()
            .map(|op| op.key().len() + op.value().map_or(0, <[u8]>::len))
            .sum();
        let capacity = 12 + payload + 11 * ops.len();
        let mut native = rocksdb::WriteBatch::with_capacity_bytes(capacity);
        for op in ops {
            match op {
                BatchOp::Put { key, value } => native.put(key, value),
                BatchOp::Delete { key } => native.delete(key),
            }
        }
        self.with_write(|db| db.write_opt(native, &self.write_opts))
    }

    /// One `DeleteRange` in a native batch: a single range tombstone, written atomically
    /// (stronger than the contract asks), however many keys it covers. Bounds become RocksDB's
    /// `[begin, end)` through the successor of a key (the key followed by `0x00`); an
    /// unbounded end becomes the successor of the last key now stored.
    fn delete_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<()> {
        if self.inverted.range_is_empty(from, to) {
            return self.with_db(|_| Ok(()));
        }
        let begin = match from {
            Bound::Unbounded => Vec::new(),
            Bound::Included(key) => key.to_vec(),
            Bound::Excluded(key) => successor(key),
        };
        self.with_write(|db| {
            let end = match to {
                Bound::Excluded(key) => key.to_vec(),
                Bound::Included(key) => successor(key),
                Bound::Unbounded => {
                    let mut last = db.raw_iterator_opt(ReadOptions::default());
                    last.seek_to_last();
                    last.status()?;
                    match last.key() {
                        Some(key) => successor(key),
                        None => return Ok(()),
                    }
                }
            };
            if begin >= end {
                return Ok(());
            }
            let mut native = rocksdb::WriteBatch::default();
            native.delete_range(begin, end);
            db.write_opt(native, &self.write_opts)
        })
    }

    /// An SST-ingesting loader (see the crate docs), unless [`Config::bulk_load_bytes`] is 0.
    fn bulk_loader(&self) -> Result<Option<Box<dyn BulkLoader + '_>>> {
        let db = self.db.read().clone().ok_or(Error::Closed)?;
        if self.bulk_load_bytes == 0 {
            return Ok(None);
        }
        let opts = Arc::clone(&self.sst_opts);
        let loader = bulk::SstLoader::new(db, &self.path, opts, self.bulk_load_bytes)?;
        Ok(Some(Box::new(loader)))
    }

    /// RocksDB's own checkpoints (see `checkpoint.rs`).
    fn checkpoints(&self) -> Option<&dyn Checkpoints> {
        Some(self)
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.bounded(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.bounded(from, to, true)
    }

    /// A raw iterator lending each pair from RocksDB's buffers: the end is a native bound, as
    /// the owned iterators use; a forward scan seeks to its start (see `iter::scan`).
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        f: &mut PairVisitor<'_>,
    ) -> Result<()> {
        let db = self.db.read().clone().ok_or(Error::Closed)?;
        if self.inverted.range_is_empty(from, to) {
            return Ok(());
        }
        iter::scan(&db, from, to, reverse, f)
    }

    fn prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        self.prefix(prefix, false)
    }

    fn reverse_prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        self.prefix(prefix, true)
    }

    fn approximate_len(&self) -> Result<u64> {
        self.with_db(|db| {
            let keys = db.property_int_value(rocksdb::properties::ESTIMATE_NUM_KEYS)?;
            Ok(keys.unwrap_or(0))
        })
    }

    fn flush(&self) -> Result<()> {
        let guard = self.db.read();
        self.persist(guard.as_deref().ok_or(Error::Closed)?)
    }

    fn close(&self) -> Result<()> {
        let mut guard = self.db.write();
        let Some(db) = guard.take() else {
            return Ok(());
        };
        // Closed even when the flush fails: the caller asked to release the store, and a
        // failed sync leaves nothing this handle could retry safely.
        self.persist(&db)
    }
}

/// The least key after `key`: `key` followed by `0x00`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

impl Drop for RocksDbStore {
    fn drop(&mut self) {
        // Drop cannot report a failed flush; `close` is the way to see it.
        let _ = self.close();
    }
}
