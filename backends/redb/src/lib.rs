//! [redb](https://docs.rs/redb) backend for statestore: a copy-on-write B-tree in one file, with
//! MVCC read snapshots.
//!
//! A store is one database file, `store.redb`, inside the store directory, holding one table of
//! byte-string keys and values. Every write (a `put`, a `delete`, a `put_if_absent`, a whole
//! [`WriteBatch`]) is one redb write transaction, so it is atomic and isolated. Reads and
//! iterators run in read transactions, so iterators are snapshots
//! ([`Capabilities::snapshot_iterators`]) and stream from the B-tree without copying the range
//! first. [`Config::durability`] chooses whether each commit is fsynced or only
//! [`flush`](KeyValueStore::flush) is.
//!
//! # How it meets the contract
//! - **Iterators** open a read transaction and keep redb's `Range<'static, ..>`, which owns
//!   the transaction's guard: they read the MVCC snapshot taken at creation (no later write is
//!   seen), walk the B-tree page by page without copying the range first, and hold the
//!   snapshot's pages until they end or are dropped. Reverse iteration is the same range run
//!   from its back end.
//! - **Locking**: redb locks its file; a second open, from this process or another, is
//!   `Locked` naming the file. `close` releases the lock even while an iterator is alive; that
//!   iterator's later reads fail with `Closed`.
//! - **Empty keys and values** are ordinary redb byte slices. **Large values** go to redb's
//!   overflow pages; redb's own ceiling (3 GiB) is above the API's limit.
//! - **`approximate_len`** is exact and O(1): redb keeps each table's length in its header.
//! - **Damaged files** are `Corruption`: a file that is not a redb database, and a file whose
//!   pages fail redb's checks (redb may panic on those while opening; the panic is caught).
//!
//! ```
//! use statestore_redb::{Config, RedbStore};
//! use store_api::{KeyValueStore, WriteBatch};
//!
//! let dir = tempfile::tempdir()?;
//! let store = RedbStore::open(dir.path(), Config::default())?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"user/1", b"ada").put(b"user/2", b"grace");
//! store.write(batch)?;
//! assert_eq!(store.get(b"user/1")?, Some(b"ada".to_vec()));
//! let users: Vec<_> = store.prefix_scan(b"user/")?.collect::<Result<_, _>>()?;
//! assert_eq!(users.len(), 2);
//! store.flush()?;
//! store.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod error;
mod iter;

use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use redb::{
    Database, ReadOnlyTable, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, WriteTransaction,
};
use store_api::limits::{check_entry, check_key, check_ops};
use store_api::{
    BackendFactory, BackendOptions, BatchOp, Capabilities, Error, InvertedRangeWarning,
    KeyValueStore, KvIter, PairVisitor, Result, StoreDirIdentity, ValueVisitor, WriteBatch,
    create_store_dir, parse_options,
};

pub use config::{Config, Durability};
use error::{BACKEND, from_open, from_redb};

/// The name of the database file inside the store directory.
pub const FILE_NAME: &str = "store.redb";

/// The one table of a store.
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("statestore");

/// The table type redb gives write transactions.
type Table<'txn> = redb::Table<'txn, &'static [u8], &'static [u8]>;

/// Opens redb stores: the `"redb"` entry of the backend registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedbFactory;

impl BackendFactory for RedbFactory {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
        let config: Config = parse_options(BACKEND, options)?;
        Ok(Box::new(RedbStore::open(dir, config)?))
    }
}

/// A key-value store kept in one redb database file.
pub struct RedbStore {
    /// `None` once closed. Operations hold the read side for their whole duration, so `close`
    /// waits for them and never closes the database under a running write transaction.
    db: RwLock<Option<Database>>,
    path: PathBuf,
    durability: redb::Durability,
    quick_repair: bool,
    /// Checked after every flush: redb syncs its open file even when the directory was
    /// removed, so only this tells that the flush cannot be durable.
    dir: StoreDirIdentity,
    inverted: InvertedRangeWarning,
}

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("open", &self.db.read().is_some())
            .finish()
    }
}

impl RedbStore {
    /// Opens, creating if needed, the store kept in directory `dir` (its database file is
    /// `dir/store.redb`).
    ///
    /// # Errors
    /// `Locked` when the database is already open (in this process or another), `Corruption`
    /// when the file is not a redb database or fails its checks, `Io` when the directory or
    /// file cannot be created or read.
    pub fn open(dir: &Path, config: Config) -> Result<RedbStore> {
        create_store_dir(dir)?;
        let path = dir.join(FILE_NAME);
        let db = create_guarded(&config.builder(), &path)?;
        let store = RedbStore {
            dir: StoreDirIdentity::capture(dir)?,
            inverted: InvertedRangeWarning::new(format!("{BACKEND} {}", path.display())),
            db: RwLock::new(Some(db)),
            path,
            durability: config.durability.to_redb(),
            quick_repair: config.quick_repair,
        };
        // Creating the table now lets read transactions open it unconditionally.
        store.write_txn(store.durability, |_| Ok(()))?;
        Ok(store)
    }

    /// The path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db(&self) -> Result<MappedRwLockReadGuard<'_, Database>> {
        RwLockReadGuard::try_map(self.db.read(), Option::as_ref).map_err(|_| Error::Closed)
    }

    /// The table in a fresh read transaction. The table holds the transaction's guard, so the
    /// snapshot lives as long as the table or any iterator made from it.
    fn read_table(&self) -> Result<ReadOnlyTable<&'static [u8], &'static [u8]>> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(from_redb)?;
        txn.open_table(TABLE).map_err(from_redb)
    }

    fn begin_write(&self, db: &Database, durability: redb::Durability) -> Result<WriteTransaction> {
        let mut txn = db.begin_write().map_err(from_redb)?;
        txn.set_durability(durability).map_err(from_redb)?;
        txn.set_quick_repair(self.quick_repair);
        Ok(txn)
    }

    /// Runs `body` on the table in one write transaction and commits it. An error from `body`
    /// aborts the transaction (by dropping it), so nothing of it is written.
    fn write_txn<T>(
        &self,
        durability: redb::Durability,
        body: impl FnOnce(&mut Table<'_>) -> Result<T, redb::StorageError>,
    ) -> Result<T> {
        let db = self.db()?;
        let txn = self.begin_write(&db, durability)?;
        let out = {
            let mut table = txn.open_table(TABLE).map_err(from_redb)?;
            body(&mut table).map_err(from_redb)?
        };
        txn.commit().map_err(from_redb)?;
        Ok(out)
    }

    /// An empty write transaction committed with `Immediate` durability: redb then persists
    /// every earlier commit, including the non-durable ones. Then checks that the synced file
    /// is still the store's.
    fn durable_commit(&self, db: &Database) -> Result<()> {
        let txn = self.begin_write(db, redb::Durability::Immediate)?;
        txn.commit().map_err(from_redb)?;
        self.dir.verify()
    }

    fn iter(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        let table = self.read_table()?;
        if self.inverted.range_is_empty(from, to) {
            return Ok(Box::new(std::iter::empty()));
        }
        iter::range(&table, from, to, reverse)
    }
}

/// Opens the database file, turning a panic inside redb into `Corruption`: redb documents that
/// opening a file damaged outside redb may panic unless `verify_on_open` is set.
fn create_guarded(builder: &redb::Builder, path: &Path) -> Result<Database> {
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.create(path)));
    match opened {
        Ok(result) => result.map_err(|err| from_open(err, path)),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(Error::Corruption(format!(
                "redb failed to open {}: {message}",
                path.display()
            )))
        }
    }
}

impl KeyValueStore for RedbStore {
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
        let table = self.read_table()?;
        let value = table.get(key).map_err(from_redb)?;
        Ok(value.map(|guard| guard.value().to_vec()))
    }

    /// Lends the value from redb's page through its access guard: no copy.
    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        check_key(key)?;
        let table = self.read_table()?;
        let value = table.get(key).map_err(from_redb)?;
        f(value.as_ref().map(|guard| guard.value()));
        Ok(())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.write_txn(self.durability, |table| table.insert(key, value).map(drop))
    }

    /// Reads and writes inside one write transaction; redb runs one write transaction at a
    /// time, so no other write can come between the check and the insert. When the key is
    /// present the transaction is aborted, so a hit costs no commit.
    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_entry(key, value)?;
        let db = self.db()?;
        let txn = self.begin_write(&db, self.durability)?;
        {
            let mut table = txn.open_table(TABLE).map_err(from_redb)?;
            if let Some(existing) = table.get(key).map_err(from_redb)? {
                return Ok(Some(existing.value().to_vec()));
            }
            table.insert(key, value).map_err(from_redb)?;
        }
        txn.commit().map_err(from_redb)?;
        Ok(None)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.write_txn(self.durability, |table| table.remove(key).map(drop))
    }

    /// redb copies the operations into its pages either way.
    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_ops(batch.ops())
    }

    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        check_ops(ops)?;
        if ops.is_empty() {
            return self.db().map(drop);
        }
        self.write_txn(self.durability, |table| {
            for op in ops {
                match op {
                    BatchOp::Put { key, value } => {
                        drop(table.insert(key.as_slice(), value.as_slice())?)
                    }
                    BatchOp::Delete { key } => drop(table.remove(key.as_slice())?),
                }
            }
            Ok(())
        })
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, true)
    }

    /// The read snapshot's range, lending each pair from redb's pages.
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        f: &mut PairVisitor<'_>,
    ) -> Result<()> {
        let table = self.read_table()?;
        if self.inverted.range_is_empty(from, to) {
            return Ok(());
        }
        iter::scan(&table, from, to, reverse, f)
    }

    /// Exact: redb keeps the entry count in the table's header, so this is one read
    /// transaction and no scan.
    fn approximate_len(&self) -> Result<u64> {
        self.read_table()?.len().map_err(from_redb)
    }

    /// Commits an empty transaction with `Immediate` durability, which makes every earlier
    /// commit, durable or not, persistent.
    fn flush(&self) -> Result<()> {
        self.durable_commit(&*self.db()?)
    }

    fn close(&self) -> Result<()> {
        let Some(db) = self.db.write().take() else {
            return Ok(());
        };
        let flushed = self.durable_commit(&db);
        // Close even when the flush failed, so the file lock is released either way.
        let closed = db.close().map_err(from_redb);
        flushed.and(closed)
    }
}
