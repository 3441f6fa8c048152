//! The key-value store each store of a task is kept in ([`TaskKv`]: logged or local, its
//! reserved keys hidden) and [`TaskStore`], the same store of bytes as the processor sees it.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use statestore_changelog::LoggedStore;
use store_api::{
    BatchOp, Capabilities, Error, KeyValueStore, KvIter, Result, ValueVisitor, WriteBatch,
};

use super::position::{check_key, hide_reserved};

/// One key-value store of the task that owns the record being processed.
///
/// Reads see every write of the task, committed or not. The task's reserved keys (its
/// position and stream time, [`POSITION_KEY`](super::position::POSITION_KEY), and the changelog's writer epoch
/// [`EPOCH_KEY`](statestore_changelog::EPOCH_KEY)) are hidden from reads and refused to
/// writes. While the task replays records this store already holds (after a crash between the
/// commits of two stores of the task), writes are dropped, so each record is applied once (see
/// the crate docs).
#[derive(Debug, Clone, Copy)]
pub struct TaskStore<'a> {
    pub(crate) kv: &'a TaskKv,
}

impl TaskStore<'_> {
    /// The value of `key`, or `None`.
    ///
    /// # Errors
    /// A store error; `InvalidArgument` for a reserved key.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.kv.get(key)
    }

    /// Sets `key` to `value` (dropped while replaying a record this store holds).
    ///
    /// # Errors
    /// A store error; `InvalidArgument` for a reserved key or an oversized entry.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.kv.put(key, value)
    }

    /// Deletes `key` (dropped while replaying a record this store holds).
    ///
    /// # Errors
    /// A store error; `InvalidArgument` for a reserved key.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.kv.delete(key)
    }

    /// Applies `batch` atomically (dropped while replaying a record this store holds).
    ///
    /// # Errors
    /// A store error; `InvalidArgument` when the batch touches a reserved key.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.kv.write(batch)
    }

    /// The entries in `[from, to)` bounds, in key order, without the reserved keys.
    ///
    /// # Errors
    /// A store error.
    pub fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.kv.range(from, to)
    }

    /// The entries in the bounds, in reverse key order, without the reserved keys.
    ///
    /// # Errors
    /// A store error.
    pub fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.kv.reverse_range(from, to)
    }

    /// The entries whose key starts with `prefix`, in key order, without the reserved keys.
    ///
    /// # Errors
    /// A store error.
    pub fn prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        self.kv.prefix_scan(prefix)
    }

    /// The store as a [`KeyValueStore`], for code written against the trait.
    pub fn as_key_value(&self) -> &TaskKv {
        self.kv
    }
}

/// The key-value store a task store is kept in: logged (its changelog restores it) or local.
#[derive(Debug)]
pub(crate) enum Backing {
    Logged(Box<LoggedStore>),
    /// Not logged: writes go to the engine as they are made; nothing restores it.
    Local(Arc<dyn KeyValueStore>),
}

impl Backing {
    fn store(&self) -> &dyn KeyValueStore {
        match self {
            Backing::Logged(store) => store.as_ref(),
            Backing::Local(store) => store.as_ref(),
        }
    }
}

/// One store of a task as its processor and the operator stores over it see it: the task's
/// reserved keys hidden and refused, and writes dropped while the task replays records this
/// store already holds (see the `task` module).
#[derive(Debug)]
pub struct TaskKv {
    name: String,
    pub(crate) backing: Backing,
    /// The record being processed is already part of this store's committed content.
    replaying: AtomicBool,
}

impl TaskKv {
    pub(crate) fn new(name: String, backing: Backing) -> TaskKv {
        TaskKv {
            name,
            backing,
            replaying: AtomicBool::new(false),
        }
    }

    pub(crate) fn set_replaying(&self, replaying: bool) {
        self.replaying.store(replaying, Ordering::Relaxed);
    }

    fn replaying(&self) -> bool {
        self.replaying.load(Ordering::Relaxed)
    }

    /// The logged store, for a logged store.
    pub(crate) fn logged(&self) -> Option<&LoggedStore> {
        match &self.backing {
            Backing::Logged(store) => Some(store),
            Backing::Local(_) => None,
        }
    }
}

impl KeyValueStore for TaskKv {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.backing.store().capabilities()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.backing.store().get(key)
    }

    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        check_key(key)?;
        self.backing.store().get_with(key, f)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().put(key, value)
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        if self.replaying() {
            return self.backing.store().get(key);
        }
        self.backing.store().put_if_absent(key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().delete(key)
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        for op in batch.ops() {
            check_key(op.key())?;
        }
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().write(batch)
    }

    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        for op in ops {
            check_key(op.key())?;
        }
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().write_ops(ops)
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(hide_reserved(self.backing.store().range(from, to)?))
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(hide_reserved(self.backing.store().reverse_range(from, to)?))
    }

    fn approximate_len(&self) -> Result<u64> {
        self.backing.store().approximate_len()
    }

    /// The task commits its stores; a processor's flush is a no-op, so it can never commit
    /// part of a record.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// The task closes its stores; a processor's close is refused.
    fn close(&self) -> Result<()> {
        Err(Error::invalid(format!(
            "store {:?} belongs to its task, which closes it",
            self.name
        )))
    }
}
