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
    /// What undoes the writes since the savepoint of a store with logging off, whose writes
    /// go to the engine at once (a logged store keeps its savepoint in its write buffer).
    local_undo: parking_lot::Mutex<LocalUndo>,
}

/// The values a local store held before the writes since its savepoint, oldest first.
#[derive(Debug, Default)]
struct LocalUndo {
    set: bool,
    before: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl TaskKv {
    pub(crate) fn new(name: String, backing: Backing) -> TaskKv {
        TaskKv {
            name,
            backing,
            replaying: AtomicBool::new(false),
            local_undo: parking_lot::Mutex::new(LocalUndo::default()),
        }
    }

    /// Sets a savepoint, replacing the one before: [`roll_back`](TaskKv::roll_back) undoes
    /// the writes after it. A logged store's is in its write buffer; a store with logging off
    /// reads, before each write, the value it replaces.
    pub(crate) fn savepoint(&self) {
        match &self.backing {
            Backing::Logged(store) => store.savepoint(),
            Backing::Local(_) => {
                let mut undo = self.local_undo.lock();
                undo.set = true;
                undo.before.clear();
            }
        }
    }

    /// Undoes the writes since the [`savepoint`](TaskKv::savepoint), which stays set. Returns
    /// whether there were any.
    ///
    /// # Errors
    /// A logged store without a savepoint (a commit came after it), or a write of the local
    /// store that fails.
    pub(crate) fn roll_back(&self) -> Result<bool> {
        let store = match &self.backing {
            Backing::Logged(store) => return store.roll_back_to_savepoint(),
            Backing::Local(store) => store,
        };
        let before = std::mem::take(&mut self.local_undo.lock().before);
        let undone = !before.is_empty();
        for (key, value) in before.into_iter().rev() {
            match value {
                Some(value) => store.put(&key, &value)?,
                None => store.delete(&key)?,
            }
        }
        Ok(undone)
    }

    /// Before `keys` are written to a local store under a savepoint: keeps the values they
    /// replace.
    fn remember<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Result<()> {
        let Backing::Local(store) = &self.backing else {
            return Ok(());
        };
        let mut undo = self.local_undo.lock();
        if !undo.set {
            return Ok(());
        }
        for key in keys {
            let value = store.get(key)?;
            undo.before.push((key.to_vec(), value));
        }
        Ok(())
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
        self.remember([key])?;
        self.backing.store().put(key, value)
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        if self.replaying() {
            return self.backing.store().get(key);
        }
        self.remember([key])?;
        self.backing.store().put_if_absent(key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        if self.replaying() {
            return Ok(());
        }
        self.remember([key])?;
        self.backing.store().delete(key)
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        for op in batch.ops() {
            check_key(op.key())?;
        }
        if self.replaying() {
            return Ok(());
        }
        self.remember(batch.ops().iter().map(BatchOp::key))?;
        self.backing.store().write(batch)
    }

    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        for op in ops {
            check_key(op.key())?;
        }
        if self.replaying() {
            return Ok(());
        }
        self.remember(ops.iter().map(BatchOp::key))?;
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
