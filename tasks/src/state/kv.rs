//! [`TaskStore`]: a task's key-value store of bytes as the processor sees it.

use std::ops::Bound;

use statestore_changelog::EPOCH_KEY;
use store_api::{Error, KeyValueStore, KvIter, Result, WriteBatch};

use crate::stores::TaskKv;
use crate::task::POSITION_KEY;

/// One key-value store of the task that owns the record being processed.
///
/// Reads see every write of the task, committed or not. The task's reserved keys (its
/// position and stream time, [`POSITION_KEY`], and the changelog's writer epoch
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

/// Refuses the keys the task and the changelog reserve.
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key == EPOCH_KEY {
        return Err(Error::invalid(
            "the key \\0statestore.epoch is reserved for the changelog's writer epoch",
        ));
    }
    if key == POSITION_KEY {
        return Err(Error::invalid(
            "the key \\0statestore.task.position is reserved for the task's input position",
        ));
    }
    Ok(())
}

/// Whether `key` is one the task or the changelog keeps in every store.
pub(crate) fn is_reserved(key: &[u8]) -> bool {
    key == POSITION_KEY || key == EPOCH_KEY
}

/// Leaves out the task's position (with its stream time) and the changelog's writer epoch,
/// which the task keeps in every store.
pub(crate) fn hide_reserved(iter: KvIter) -> KvIter {
    Box::new(iter.filter(|item| !matches!(item, Ok((key, _)) if is_reserved(key))))
}
