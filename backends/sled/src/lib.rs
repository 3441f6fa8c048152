//! [sled](https://docs.rs/sled/0.34.7) backend for statestore: a lock-free, log-structured
//! B-tree in pure Rust.
//!
//! A store is one sled database in the store directory, using sled's default tree: a store
//! directory holds exactly one keyspace, so a named tree would only add a lookup in sled's tree
//! registry to every open and a second place for data to hide. A [`WriteBatch`] becomes one
//! `sled::Batch` applied atomically, `put_if_absent` is sled's compare-and-swap, and iterators
//! are sled's own owned iterators. They are not snapshots: they see the tree as they walk it, so
//! [`Capabilities::snapshot_iterators`] is false. sled writes its buffers to disk every
//! [`Config::flush_every_ms`] and on [`flush`](KeyValueStore::flush).
//!
//! # Durability
//! [`flush`](KeyValueStore::flush) (and `close`) make every write that returned before it
//! durable against power loss, not only against a process crash: sled 0.34's own flush ends
//! in `sync_file_range`, which neither persists the log file's metadata nor flushes the
//! device's cache, and it never syncs the files of large values. So after sled's flush the
//! store `fdatasync`s the log file, syncs new blob files and the directories whose entries
//! changed, and checks that the store directory was not removed or replaced (a flush that
//! cannot be durable fails with `Io`). Writes between flushes are made durable by sled's
//! background flusher within [`Config::flush_every_ms`] (it `fsync`s the log, not the blobs),
//! and survive a process crash regardless.
//!
//! # How it meets the contract
//! - **Iterators** are weakly consistent: each sees every write that completed before it was
//!   made, and may see later ones; sled resumes each step after the last key returned, so keys
//!   strictly ascend (or descend) and appear once. A `WriteBatch` is applied under sled's
//!   global write lock, which every read and every iterator step takes shared, so a `get` or
//!   one step sees all of a batch or none of it; an iterator running while a batch lands
//!   returns the keys it passed before from the old state and the keys after from the new.
//! - **Locking**: sled `flock`s its `db` file. A second open is `Locked` at once, without
//!   waiting or panicking: the lock is probed before sled is asked to open. `close` (and drop)
//!   waits until sled's own threads have let go of the file, so the directory can be reopened
//!   at once (sled does not, spacejam/sled#1234). A live iterator keeps sled's database, and
//!   its lock, until the iterator ends, fails with `Closed` or is dropped.
//! - **Empty keys and values** are ordinary sled `IVec`s. **Large values** are written by
//!   sled as separate blob files; they work at any size up to the API's limit.
//! - **`approximate_len`** is exact but walks the whole tree (sled keeps no count).
//! - **Damaged files**: sled's recovery panics on some damage; the panic is caught and
//!   reported as `Corruption`. Segments that fail their checksums are treated as never
//!   written (sled's torn-write recovery), so damage at the tail may open as lost writes.
//!
//! ```
//! use statestore_sled::{Config, SledStore};
//! use store_api::{KeyValueStore, WriteBatch};
//!
//! let dir = tempfile::tempdir()?;
//! let store = SledStore::open(dir.path(), Config::default())?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"user/1", b"ada").put(b"user/2", b"grace");
//! store.write(batch)?;
//! assert_eq!(store.put_if_absent(b"user/1", b"bob")?, Some(b"ada".to_vec()));
//! let users: Vec<_> = store.reverse_prefix_scan(b"user/")?.collect::<Result<_, _>>()?;
//! assert_eq!(users[0].0, b"user/2".to_vec());
//! store.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod error;
mod iter;
mod lock;
mod sync;

use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use store_api::limits::{check_entry, check_key, check_ops};
use store_api::{
    BackendFactory, BackendOptions, BatchOp, Capabilities, Error, InvertedRangeWarning,
    KeyValueStore, KvIter, PairVisitor, Result, ValueVisitor, WriteBatch, create_store_dir,
    parse_options,
};

pub use config::{Config, Mode};
use error::{BACKEND, from_open, from_sled};
use iter::SledIter;
pub use lock::wait_released;
use sync::Syncer;

/// Opens sled stores: the `"sled"` entry of the backend registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct SledFactory;

impl BackendFactory for SledFactory {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
        let config: Config = parse_options(BACKEND, options)?;
        Ok(Box::new(SledStore::open(dir, config)?))
    }
}

/// A key-value store kept in one sled database directory.
pub struct SledStore {
    /// `None` once closed.
    db: RwLock<Option<sled::Db>>,
    dir: PathBuf,
    /// Set by `close`; shared with every live iterator (see [`SledIter`]).
    closed: Arc<AtomicBool>,
    syncer: Syncer,
    inverted: InvertedRangeWarning,
}

impl fmt::Debug for SledStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledStore")
            .field("dir", &self.dir)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl SledStore {
    /// Opens, creating if needed, the store kept in directory `dir`.
    ///
    /// # Errors
    /// `Locked` when a sled database in `dir` is already open (in this process or another),
    /// `Corruption` when sled finds its files damaged, `Io` when they cannot be created or
    /// read, `Backend` for anything else sled refuses (such as files of an older sled).
    pub fn open(dir: &Path, config: Config) -> Result<SledStore> {
        create_store_dir(dir)?;
        lock::check_free(dir)?;
        let db = open_guarded(&config.to_sled(dir), dir)?;
        Ok(SledStore {
            syncer: Syncer::open(dir)?,
            inverted: InvertedRangeWarning::new(format!("{BACKEND} {}", dir.display())),
            db: RwLock::new(Some(db)),
            dir: dir.to_path_buf(),
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn db(&self) -> Result<MappedRwLockReadGuard<'_, sled::Db>> {
        RwLockReadGuard::try_map(self.db.read(), Option::as_ref).map_err(|_| Error::Closed)
    }

    fn iter(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        let db = self.db()?;
        if self.inverted.range_is_empty(from, to) {
            return Ok(Box::new(std::iter::empty()));
        }
        let range = db.range::<&[u8], _>((from, to));
        let closed = Arc::clone(&self.closed);
        Ok(if reverse {
            Box::new(SledIter::new(range.rev(), closed))
        } else {
            Box::new(SledIter::new(range, closed))
        })
    }

    /// Drops the database and, unless a live iterator still holds it, waits until sled's
    /// threads have released the directory lock, so the directory can be reopened at once.
    /// Returns the database if it was still open.
    fn shut_down(&self) -> Option<Result<()>> {
        let db = self.db.write().take()?;
        self.closed.store(true, Ordering::Release);
        let flushed = db
            .flush()
            .map_err(from_sled)
            .and_then(|_| self.syncer.sync());
        drop(db);
        if Arc::strong_count(&self.closed) == 1 {
            lock::wait_released(&self.dir);
        }
        Some(flushed)
    }
}

/// Opens sled, turning a panic inside it into `Corruption`: sled 0.34 panics while recovering
/// some damaged files (such as a `db` file with overwritten pages) instead of returning its
/// `Corruption` error.
fn open_guarded(config: &sled::Config, dir: &Path) -> Result<sled::Db> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open())) {
        Ok(opened) => opened.map_err(|err| from_open(err, dir)),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(Error::Corruption(format!(
                "sled failed to recover {}: {message}",
                dir.display()
            )))
        }
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        // Drop cannot report a flush error; sled logs it.
        let _ = self.shut_down();
    }
}

impl KeyValueStore for SledStore {
    fn name(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_persistent(true)
            .with_snapshot_iterators(false)
            // A kill -9 at a bad moment can leave sled 0.34 reporting corrupt data on open.
            .with_crash_may_corrupt(true)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let value = self.db()?.get(key).map_err(from_sled)?;
        Ok(value.map(|value| value.to_vec()))
    }

    /// Lends sled's own `IVec`, which shares the page's bytes: no copy.
    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        check_key(key)?;
        let value = self.db()?.get(key).map_err(from_sled)?;
        f(value.as_deref());
        Ok(())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.db()?.insert(key, value).map(drop).map_err(from_sled)
    }

    /// sled's `compare_and_swap` from "absent" to `value`: atomic, and it returns the current
    /// value when the key is present.
    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_entry(key, value)?;
        let swapped = self.db()?.compare_and_swap(key, None::<&[u8]>, Some(value));
        match swapped.map_err(from_sled)? {
            Ok(()) => Ok(None),
            Err(sled::CompareAndSwapError {
                current: Some(current),
                ..
            }) => Ok(Some(current.to_vec())),
            // sled fails a swap from "absent" only when a value is present.
            Err(sled::CompareAndSwapError { current: None, .. }) => Err(Error::backend(
                BACKEND,
                "compare_and_swap from absent failed on an absent key",
            )),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.db()?.remove(key).map(drop).map_err(from_sled)
    }

    /// One `sled::Batch` applied with `apply_batch`, atomic for readers and crashes. A
    /// `sled::Batch` keeps the last operation per key, which is the contract's "later wins".
    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_ops(batch.ops())
    }

    /// sled copies every key and value into an `IVec` of its own, whether the batch owns them
    /// or not.
    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        check_ops(ops)?;
        let db = self.db()?;
        if ops.is_empty() {
            return Ok(());
        }
        let mut native = sled::Batch::default();
        for op in ops {
            match op {
                BatchOp::Put { key, value } => native.insert(key.as_slice(), value.as_slice()),
                BatchOp::Delete { key } => native.remove(key.as_slice()),
            }
        }
        db.apply_batch(native).map_err(from_sled)
    }

    /// sled's single `insert` and `remove`, each pinning sled's epoch only for itself: 1.45x
    /// the speed of `apply_batch` for 10 000 sorted writes into a million keys (see
    /// `docs/benchmarks.md`), which holds the epoch and the log for the whole batch.
    fn write_ops_non_atomic(&self, ops: &[BatchOp]) -> Result<()> {
        check_ops(ops)?;
        let db = self.db()?;
        for op in ops {
            match op {
                BatchOp::Put { key, value } => {
                    db.insert(key.as_slice(), value.as_slice()).map(drop)
                }
                BatchOp::Delete { key } => db.remove(key.as_slice()).map(drop),
            }
            .map_err(from_sled)?;
        }
        Ok(())
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, true)
    }

    /// sled's iterator, lending each pair's `IVec`s; like the owned iterators, it stops with
    /// `Closed` once the store is closed.
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        f: &mut PairVisitor<'_>,
    ) -> Result<()> {
        let range = {
            let db = self.db()?;
            if self.inverted.range_is_empty(from, to) {
                return Ok(());
            }
            db.range::<&[u8], _>((from, to))
        };
        if reverse {
            iter::scan(range.rev(), &self.closed, f)
        } else {
            iter::scan(range, &self.closed, f)
        }
    }

    /// Exact, but NOT cheap: sled 0.34 keeps no count, so this walks every key of the tree
    /// (sled's own `len()` does the same), O(n) in time and page-cache traffic: 0.16 to 0.32 s
    /// for 200k keys in a release build on a loaded 2-core machine, so seconds per million.
    /// Keys written during the walk may or may not be counted.
    fn approximate_len(&self) -> Result<u64> {
        let db = self.db()?;
        let mut len = 0;
        for key in db.iter().keys() {
            key.map_err(from_sled)?;
            len += 1;
        }
        Ok(len)
    }

    /// sled's flush, then an `fdatasync` of its files (see the crate docs): sled's own flush
    /// only starts writeback.
    fn flush(&self) -> Result<()> {
        let db = self.db()?;
        db.flush().map_err(from_sled)?;
        self.syncer.sync()
    }

    fn close(&self) -> Result<()> {
        self.shut_down().unwrap_or(Ok(()))
    }
}
