//! Bring your own backend, the worked example: a statestore backend over
//! [fjall 3](https://docs.rs/fjall/3), a log-structured merge tree in pure Rust, written
//! outside the workspace's `backends/` folder the way a third party would.
//!
//! What it takes, each in one line:
//! - the store contract: `tests/conformance.rs` runs the whole conformance suite,
//!   `tests/operator_stores.rs` every operator-store suite;
//! - a name: `statestore::register(&FjallFactory)` (or [`register`]); from then on
//!   `statestore::open("fjall", ...)`, a task's store configured with `backend = "fjall"`,
//!   the CLI, `compare` and the bench harness all find it;
//! - `compare` beside the built-ins: `src/bin/compare.rs` (`cargo run --release -p byo-fjall
//!   --bin fjall-compare -- --backends fjall,rocksdb,redb`);
//! - the project's criterion workloads: `benches/workloads.rs`.
//!
//! ```
//! use store_api::{KeyValueStore, WriteBatch};
//!
//! byo_fjall::register()?;
//! let dir = tempfile::tempdir()?;
//! let store = statestore::open("fjall", dir.path(), &serde_json::json!({ "cache_mb": 16 }))?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"", b"the empty key").put(b"user/1", b"ada");
//! store.write(batch)?;
//! assert_eq!(store.get(b"")?, Some(b"the empty key".to_vec()));
//! let keys: Vec<_> = store.range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)?
//!     .map(|pair| pair.map(|(key, _)| key))
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(keys, [b"".to_vec(), b"user/1".to_vec()]);
//! store.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How it meets the contract
//! - **One database per store directory**, with two keyspaces: `data` holds every key but the
//!   empty one, which fjall's trees do not take; `empty` holds the empty key's value, if any,
//!   under one fixed key. A batch is one fjall batch over both keyspaces (atomic across
//!   them), and reads of the two go through one fjall snapshot, so the mapping is invisible.
//!   Empty values are ordinary fjall values.
//! - **Batches**: the last operation per key is kept before committing, since fjall gives every
//!   item of a batch the same sequence number and "later wins" must not depend on its tie-break.
//! - **`put_if_absent`** reads then writes while holding every other writer off (writes share
//!   a lock that it takes exclusively).
//! - **Iterators** read a fjall snapshot taken when they are made:
//!   [`Capabilities::snapshot_iterators`] is true. After `close` a live iterator yields one
//!   `Closed` and ends.
//! - **Durability**: each write reaches fjall's journal in the OS's buffers before it returns
//!   (it survives a process crash); [`flush`](KeyValueStore::flush) `fsync`s the journal, then
//!   checks the store directory is still the one opened (a flush that cannot be durable fails).
//! - **Locking**: fjall `flock`s a lock file; a second open is `Locked`. `close` waits for
//!   fjall's worker threads, so the directory reopens at once.

mod bucket;
mod config;
mod error;
mod iter;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fjall::{Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use store_api::limits::{check_entry, check_key, check_ops};
use store_api::{
    BackendFactory, BackendOptions, BatchOp, Capabilities, Error, InvertedRangeWarning,
    KeyValueStore, KvIter, PairVisitor, Result, StoreDirIdentity, ValueVisitor, WriteBatch,
    create_store_dir, parse_options,
};

pub use config::Config;
use error::{BACKEND, from_fjall, from_open};
use iter::{FjallIter, includes_empty};

/// The key the empty key's value is kept under, in the `empty` keyspace.
const EMPTY_SLOT: &[u8] = b"\0";

/// Opens fjall stores: the `"fjall"` entry of the backend registry, once registered.
#[derive(Debug, Clone, Copy, Default)]
pub struct FjallFactory;

impl BackendFactory for FjallFactory {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
        let config: Config = parse_options(BACKEND, options)?;
        Ok(Box::new(FjallStore::open(dir, &config)?))
    }
}

/// Registers [`FjallFactory`] in [`statestore::Registry::global`] under `"fjall"`.
///
/// # Errors
/// [`statestore::RegistryError::Duplicate`] when `"fjall"` is registered already.
pub fn register() -> std::result::Result<(), statestore::RegistryError> {
    statestore::register(&FjallFactory)
}

/// The open database and its two keyspaces.
struct Open {
    db: fjall::Database,
    /// Every key but the empty one.
    data: Keyspace,
    /// The empty key's value, under [`EMPTY_SLOT`].
    empty: Keyspace,
}

/// Where a key lives.
enum Place<'a> {
    /// Under a fjall key of its own, in a keyspace.
    Plain(&'a Keyspace, &'a [u8]),
    /// In the bucket under `prefix` in the data keyspace (see [`bucket`]), as `extra`.
    Bucket { prefix: &'a [u8], extra: Option<u8> },
}

impl Open {
    /// Where `key` lives.
    fn place<'a>(&'a self, key: &'a [u8]) -> Place<'a> {
        if key.is_empty() {
            return Place::Plain(&self.empty, EMPTY_SLOT);
        }
        match bucket::split(key) {
            Some((prefix, extra)) => Place::Bucket { prefix, extra },
            None => Place::Plain(&self.data, key),
        }
    }

    /// The value at `key`, read from one snapshot (fjall's plain `get` reads past the last
    /// published batch, so it could see part of a batch being applied).
    fn get(&self, key: &[u8]) -> Result<Option<fjall::Slice>> {
        let snapshot = self.db.snapshot();
        match self.place(key) {
            Place::Plain(keyspace, key) => snapshot.get(keyspace, key).map_err(from_fjall),
            Place::Bucket { prefix, extra } => {
                let Some(bytes) = snapshot.get(&self.data, prefix).map_err(from_fjall)? else {
                    return Ok(None);
                };
                let entries = bucket::decode(&bytes)?;
                Ok(bucket::find(&entries, extra).map(fjall::Slice::from))
            }
        }
    }

    /// The entries of the bucket under `prefix` now. Only called with every other writer held
    /// off, so the latest write is the one to read.
    fn bucket(&self, prefix: &[u8]) -> Result<bucket::Entries> {
        match self.data.get(prefix).map_err(from_fjall)? {
            Some(bytes) => bucket::decode(&bytes),
            None => Ok(bucket::Entries::new()),
        }
    }

    /// Writes `entries` as the bucket under `prefix` into `batch` (removing an empty one).
    fn stage_bucket(
        &self,
        batch: &mut fjall::OwnedWriteBatch,
        prefix: &[u8],
        entries: &bucket::Entries,
    ) {
        if entries.is_empty() {
            batch.remove(&self.data, prefix);
        } else {
            batch.insert(&self.data, prefix, bucket::encode(entries));
        }
    }

    /// Sets (`Some`) or deletes (`None`) a key of a bucket, alone. The caller holds every
    /// other writer off.
    fn write_bucket(&self, prefix: &[u8], extra: Option<u8>, value: Option<&[u8]>) -> Result<()> {
        let mut entries = self.bucket(prefix)?;
        bucket::set(&mut entries, extra, value);
        let mut batch = self.db.batch();
        self.stage_bucket(&mut batch, prefix, &entries);
        batch.commit().map_err(from_fjall)
    }
}

/// A key-value store kept in one fjall database directory.
pub struct FjallStore {
    /// `None` once closed.
    open: RwLock<Option<Open>>,
    /// Held shared by every write and exclusively by `put_if_absent`, whose read and write
    /// must not interleave with another write of the key.
    writes: RwLock<()>,
    /// Set by `close`; shared with every live iterator.
    closed: Arc<AtomicBool>,
    identity: StoreDirIdentity,
    dir: PathBuf,
    inverted: InvertedRangeWarning,
}

impl fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FjallStore")
            .field("dir", &self.dir)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl FjallStore {
    /// Opens, creating if needed, the store kept in directory `dir`.
    ///
    /// # Errors
    /// `Locked` when a fjall database in `dir` is open (in this process or another),
    /// `Corruption` when fjall cannot recover its journal, `Io` when files cannot be created
    /// or read, `Backend` for anything else fjall refuses.
    pub fn open(dir: &Path, config: &Config) -> Result<FjallStore> {
        create_store_dir(dir)?;
        let identity = StoreDirIdentity::capture(dir)?;
        let db = config
            .builder(dir)
            .open()
            .map_err(|err| from_open(err, dir))?;
        let data = db
            .keyspace("data", KeyspaceCreateOptions::default)
            .map_err(from_fjall)?;
        let empty = db
            .keyspace("empty", KeyspaceCreateOptions::default)
            .map_err(from_fjall)?;
        Ok(FjallStore {
            open: RwLock::new(Some(Open { db, data, empty })),
            writes: RwLock::new(()),
            closed: Arc::new(AtomicBool::new(false)),
            identity,
            dir: dir.to_path_buf(),
            inverted: InvertedRangeWarning::new(format!("{BACKEND} {}", dir.display())),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn open_db(&self) -> Result<MappedRwLockReadGuard<'_, Open>> {
        RwLockReadGuard::try_map(self.open.read(), Option::as_ref).map_err(|_| Error::Closed)
    }

    /// The empty key's value (when the range holds the empty key) and the data keyspace's
    /// iterator, both read from one snapshot; `None` for an empty range. The iterator's bounds
    /// are widened to whole buckets: buckets are filtered as they are expanded.
    fn snapshot_range(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<Option<(Option<Vec<u8>>, fjall::Iter)>> {
        let open = self.open_db()?;
        if self.inverted.range_is_empty(from, to) {
            return Ok(None);
        }
        let snapshot = open.db.snapshot();
        let empty = if includes_empty(from, to) {
            let value = snapshot.get(&open.empty, EMPTY_SLOT).map_err(from_fjall)?;
            value.map(|value| value.to_vec())
        } else {
            None
        };
        let data = snapshot.range::<&[u8], _>(&open.data, bucket::widen(from, to));
        Ok(Some((empty, data)))
    }

    fn iter(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        Ok(match self.snapshot_range(from, to)? {
            None => Box::new(std::iter::empty()),
            Some((empty, data)) => {
                let empty = empty.map(|value| (Vec::new(), value));
                let bounds = (from.map(<[u8]>::to_vec), to.map(<[u8]>::to_vec));
                Box::new(FjallIter::new(
                    empty,
                    data,
                    bounds,
                    reverse,
                    Arc::clone(&self.closed),
                ))
            }
        })
    }

    /// Flushes the journal, marks the store closed and drops the database, which waits for
    /// fjall's threads and releases the lock. `None` if it was closed already.
    fn shut_down(&self) -> Option<Result<()>> {
        let open = self.open.write().take()?;
        self.closed.store(true, Ordering::Release);
        let flushed = open.db.persist(PersistMode::SyncAll).map_err(from_fjall);
        drop(open);
        Some(flushed)
    }
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        // Drop cannot report a flush error; fjall logs it.
        let _ = self.shut_down();
    }
}

/// Applies `ops`, some of whose keys are in buckets, as one fjall batch: the buckets are read,
/// changed in order, and written whole. The caller holds every other writer off.
fn write_with_buckets(open: &Open, ops: &[BatchOp]) -> Result<()> {
    let mut batch = open.db.batch();
    let mut buckets: HashMap<&[u8], bucket::Entries> = HashMap::new();
    for op in last_per_key(ops) {
        match open.place(op.key()) {
            Place::Plain(keyspace, key) => match op {
                BatchOp::Put { value, .. } => batch.insert(keyspace, key, value.as_slice()),
                BatchOp::Delete { .. } => batch.remove(keyspace, key),
            },
            Place::Bucket { prefix, extra } => {
                let entries = match buckets.entry(prefix) {
                    std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                    std::collections::hash_map::Entry::Vacant(entry) => {
                        entry.insert(open.bucket(prefix)?)
                    }
                };
                bucket::set(entries, extra, op.value());
            }
        }
    }
    for (prefix, entries) in &buckets {
        open.stage_bucket(&mut batch, prefix, entries);
    }
    batch.commit().map_err(from_fjall)
}

/// The last operation on each key of `ops`, in no particular order.
fn last_per_key(ops: &[BatchOp]) -> Vec<&BatchOp> {
    let mut seen = HashSet::with_capacity(ops.len());
    ops.iter()
        .rev()
        .filter(|op| seen.insert(op.key()))
        .collect()
}

impl KeyValueStore for FjallStore {
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
        let value = self.open_db()?.get(key)?;
        Ok(value.map(|value| value.to_vec()))
    }

    /// Lends fjall's own value slice, which shares the block's bytes: no copy.
    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        check_key(key)?;
        let value = self.open_db()?.get(key)?;
        f(value.as_deref());
        Ok(())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        let open = self.open_db()?;
        match open.place(key) {
            Place::Plain(keyspace, key) => {
                let _writing = self.writes.read();
                keyspace.insert(key, value).map_err(from_fjall)
            }
            Place::Bucket { prefix, extra } => {
                let _alone = self.writes.write();
                open.write_bucket(prefix, extra, Some(value))
            }
        }
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_entry(key, value)?;
        let open = self.open_db()?;
        let _alone = self.writes.write();
        if let Some(current) = open.get(key)? {
            return Ok(Some(current.to_vec()));
        }
        match open.place(key) {
            Place::Plain(keyspace, key) => keyspace.insert(key, value).map_err(from_fjall)?,
            Place::Bucket { prefix, extra } => open.write_bucket(prefix, extra, Some(value))?,
        }
        Ok(None)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        let open = self.open_db()?;
        match open.place(key) {
            Place::Plain(keyspace, key) => {
                let _writing = self.writes.read();
                keyspace.remove(key).map_err(from_fjall)
            }
            Place::Bucket { prefix, extra } => {
                let _alone = self.writes.write();
                open.write_bucket(prefix, extra, None)
            }
        }
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_ops(batch.ops())
    }

    /// One fjall batch over both keyspaces, atomic for readers and crashes. Keys kept in
    /// buckets are applied to their buckets first, with every other writer held off.
    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        check_ops(ops)?;
        let open = self.open_db()?;
        if ops.is_empty() {
            return Ok(());
        }
        if ops.iter().any(|op| bucket::split(op.key()).is_some()) {
            let _alone = self.writes.write();
            return write_with_buckets(&open, ops);
        }
        let mut batch = open.db.batch();
        for op in last_per_key(ops) {
            let Place::Plain(keyspace, key) = open.place(op.key()) else {
                continue; // checked above: no op is in a bucket
            };
            match op {
                BatchOp::Put { value, .. } => batch.insert(keyspace, key, value.as_slice()),
                BatchOp::Delete { .. } => batch.remove(keyspace, key),
            }
        }
        let _writing = self.writes.read();
        batch.commit().map_err(from_fjall)
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, true)
    }

    /// Lends each pair from fjall's slices, from one snapshot, with no store lock held.
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        f: &mut PairVisitor<'_>,
    ) -> Result<()> {
        let Some((empty, data)) = self.snapshot_range(from, to)? else {
            return Ok(());
        };
        if reverse {
            let finished = iter::visit(data.rev(), (from, to), true, f)?;
            if let (true, Some(value)) = (finished, empty) {
                let _ = f(b"", &value);
            }
        } else {
            let go_on = empty.is_none_or(|value| f(b"", &value).is_continue());
            if go_on {
                iter::visit(data, (from, to), false, f)?;
            }
        }
        Ok(())
    }

    /// fjall's estimate for the data keyspace (exact until tables overlap; a bucket of long keys
    /// counts once), plus the empty key.
    fn approximate_len(&self) -> Result<u64> {
        let open = self.open_db()?;
        let empty = open.empty.get(EMPTY_SLOT).map_err(from_fjall)?.is_some();
        Ok(open.data.approximate_len() as u64 + u64::from(empty))
    }

    /// `fsync`s fjall's journal, then checks the directory is still the one opened.
    fn flush(&self) -> Result<()> {
        let open = self.open_db()?;
        open.db.persist(PersistMode::SyncAll).map_err(from_fjall)?;
        self.identity.verify()
    }

    fn close(&self) -> Result<()> {
        self.shut_down().unwrap_or(Ok(()))
    }
}
