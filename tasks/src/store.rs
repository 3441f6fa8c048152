//! [`TaskStore`]: a task's store as the processor sees it.

use std::ops::Bound;

use statestore_changelog::{EPOCH_KEY, LoggedStore};
use store_api::{Error, KeyValueStore, KvIter, Result, WriteBatch};

use crate::task::POSITION_KEY;

/// One store of the task that owns the record being processed.
///
/// Reads see every write of the task, committed or not. The task's position key
/// ([`POSITION_KEY`]) and the changelog's writer epoch
/// ([`EPOCH_KEY`](statestore_changelog::EPOCH_KEY)) are hidden from reads and refused to
/// writes. While the task replays
/// records this store already holds (after a crash between the commits of two stores of the
/// task), writes are dropped, so each record is applied once (see the crate docs).
#[derive(Debug)]
pub struct TaskStore<'a> {
    pub(crate) store: &'a LoggedStore,
    /// The record is already part of this store's committed content.
    pub(crate) replayed: bool,
}

impl TaskStore<'_> {
    /// The value of `key`, or `None`.
    ///
    /// # Errors
    /// A store error; `InvalidArgument` for the reserved position key.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.store.get(key)
    }

    /// Sets `key` to `value` (dropped while replaying a record this store holds).
    ///
    /// # Errors
    /// A store error; `InvalidArgument` for the reserved position key or an oversized entry.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        if self.replayed {
            return Ok(());
        }
        self.store.put(key, value)
    }

    /// Deletes `key` (dropped while replaying a record this store holds).
    ///
    /// # Errors
    /// A store error; `InvalidArgument` for the reserved position key.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        if self.replayed {
            return Ok(());
        }
        self.store.delete(key)
    }

    /// Applies `batch` atomically (dropped while replaying a record this store holds).
    ///
    /// # Errors
    /// A store error; `InvalidArgument` when the batch touches the reserved position key.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        for op in batch.ops() {
            check_key(op.key())?;
        }
        if self.replayed {
            return Ok(());
        }
        self.store.write(batch)
    }

    /// The entries in `[from, to)` bounds, in key order, without the position key.
    ///
    /// # Errors
    /// A store error.
    pub fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(hide_position(self.store.range(from, to)?))
    }

    /// The entries in the bounds, in reverse key order, without the position key.
    ///
    /// # Errors
    /// A store error.
    pub fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(hide_position(self.store.reverse_range(from, to)?))
    }

    /// The entries whose key starts with `prefix`, in key order, without the position key.
    ///
    /// # Errors
    /// A store error.
    pub fn prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        Ok(hide_position(self.store.prefix_scan(prefix)?))
    }
}

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

/// Leaves out the task's position and the changelog's writer epoch, which the task keeps in
/// every store.
pub(crate) fn hide_position(iter: KvIter) -> KvIter {
    Box::new(iter.filter(|item| {
        !matches!(item, Ok((key, _)) if key.as_slice() == POSITION_KEY || key.as_slice() == EPOCH_KEY)
    }))
}
