//! The store trait of [`LoggedStore`]: reads merge the write buffer over the store; writes go
//! to the buffer only.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering;

use store_api::bounds::range_is_empty;
use store_api::limits::{check_entry, check_key};
use store_api::{
    BatchOp, Capabilities, DELETE_RANGE_BATCH_KEYS, KeyValueStore, KvIter, PairVisitor, Result,
    ValueVisitor, WriteBatch,
};

use crate::record::{EPOCH_KEY, check_append, check_record};

use super::merge::{MergeIter, MergeScan};
use super::{CommitPolicy, LoggedStore};

impl KeyValueStore for LoggedStore {
    fn name(&self) -> &str {
        self.store.name()
    }

    /// The wrapped store's: the buffer snapshot and the store iterator are taken under one
    /// buffer lock, so a snapshot-iterator store still gives snapshot iterators.
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        check_key(key)?;
        if let Some(buffered) = self.buffer.read().lookup(key) {
            return Ok(buffered.map(<[u8]>::to_vec));
        }
        self.store.get(key)
    }

    /// A buffered value is copied out of the buffer, so `f` runs with no lock held; any other
    /// key is lent by the wrapped store's own `get_with`.
    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        self.check_open()?;
        check_key(key)?;
        let buffered = self
            .buffer
            .read()
            .lookup(key)
            .map(|value| value.map(<[u8]>::to_vec));
        match buffered {
            Some(value) => {
                f(value.as_deref());
                Ok(())
            }
            None => self.store.get_with(key, f),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_loggable(key, Some(value))?;
        self.buffer_with_room()?.insert_copy(key, Some(value));
        Ok(())
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_loggable(key, Some(value))?;
        // The write lock is held across the store lookup, so no other write slips in between.
        let mut buffer = self.buffer_with_room()?;
        match buffer.lookup(key) {
            Some(Some(existing)) => return Ok(Some(existing.to_vec())),
            Some(None) => {}
            None => {
                if let Some(existing) = self.store.get(key)? {
                    return Ok(Some(existing));
                }
            }
        }
        buffer.insert_copy(key, Some(value));
        Ok(None)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.check_loggable(key, None)?;
        self.buffer_with_room()?.insert_copy(key, None);
        Ok(())
    }

    /// Buffers the whole batch under one lock, after any automatic commit, so readers see all
    /// of it or none of it and it always lands in a single commit.
    fn write(&self, batch: WriteBatch) -> Result<()> {
        batch.validate()?;
        check_append(batch.ops(), self.log.max_record_len())?;
        if batch.ops().iter().any(|op| op.key() == EPOCH_KEY) {
            return Err(store_api::Error::invalid(
                "the key \\0statestore.epoch is reserved for the changelog's writer epoch",
            ));
        }
        if batch.is_empty() {
            return self.check_open();
        }
        let mut buffer = self.buffer_with_room()?;
        for op in batch {
            let (key, value) = match op {
                store_api::BatchOp::Put { key, value } => (key, Some(value)),
                store_api::BatchOp::Delete { key } => (key, None),
            };
            buffer.insert(key, value);
        }
        Ok(())
    }

    /// Buffers a delete of every key of the range, as `delete` would, never a range
    /// deletion of the wrapped store: the changelog gets one tombstone per key, because a
    /// compacted topic (Kafka) compacts per key and a replica restored from it must see each
    /// key deleted. The keys are read from the merged view (buffer over store) and buffered
    /// [`DELETE_RANGE_BATCH_KEYS`] at a time, as `write`s. The reserved [`EPOCH_KEY`], which
    /// no write may touch, is left in place.
    fn delete_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<()> {
        self.check_open()?;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let start = after.as_deref().map_or(from, Bound::Excluded);
            let mut batch = WriteBatch::with_capacity(DELETE_RANGE_BATCH_KEYS);
            let mut last = None;
            let mut seen = 0;
            self.scan(start, to, false, &mut |key, _| {
                seen += 1;
                if key == EPOCH_KEY {
                    last = Some(key.to_vec());
                } else {
                    batch.push(BatchOp::Delete { key: key.to_vec() });
                }
                if seen < DELETE_RANGE_BATCH_KEYS {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            })?;
            let last = batch.ops().last().map(|op| op.key().to_vec()).max(last);
            let Some(last) = last else {
                return Ok(());
            };
            if !batch.is_empty() {
                self.write(batch)?;
            }
            after = Some(last);
        }
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.merged_range(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.merged_range(from, to, true)
    }

    /// The wrapped store's `scan`, with the buffered writes of the interval merged in: a
    /// buffered put replaces or adds a pair, a buffered delete hides one.
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        f: &mut PairVisitor<'_>,
    ) -> Result<()> {
        self.check_open()?;
        if range_is_empty(from, to) {
            return Ok(());
        }
        // As in `merged_range`, the buffer is copied and the store's scan begins under one
        // read lock, so a commit cannot move writes between the two and a snapshot store
        // still reads a snapshot. The lock is let go before `f` first runs: the store takes
        // its snapshot (if it takes one) before it visits its first pair.
        let buffer = self.buffer.read();
        let mut merge = MergeScan::new(buffer.snapshot(from, to, reverse), reverse, f);
        let mut held = Some(buffer);
        self.store.scan(from, to, reverse, &mut |key, value| {
            held = None;
            merge.store_pair(key, value)
        })?;
        drop(held);
        merge.finish();
        Ok(())
    }

    /// The store's estimate plus the buffered puts (some of which may replace stored keys).
    fn approximate_len(&self) -> Result<u64> {
        self.check_open()?;
        let buffered = self.buffer.read().buffered_puts() as u64;
        Ok(self.store.approximate_len()?.saturating_add(buffered))
    }

    /// Commits ([`CommitPolicy::Auto`]): for a logged store, durable means logged. Under
    /// [`CommitPolicy::Explicit`] flushes the wrapped store and checkpoints what it holds
    /// ([`checkpoint_now`](LoggedStore::checkpoint_now)), since only the owner's commits may
    /// reach the changelog.
    fn flush(&self) -> Result<()> {
        match self.config.commit_policy {
            CommitPolicy::Auto => self.commit(),
            CommitPolicy::Explicit => self.checkpoint_now(),
        }
    }

    /// Commits and checkpoints ([`CommitPolicy::Auto`]), then closes the wrapped store. If the
    /// commit fails the store stays open, so the caller can retry. Under
    /// [`CommitPolicy::Explicit`] what is committed is checkpointed and the writes since the
    /// last commit are discarded, as by [`abandon`](LoggedStore::abandon).
    fn close(&self) -> Result<()> {
        close(self)
    }
}

/// Commits ([`CommitPolicy::Auto`] only), checkpoints and closes `logged`; closing a closed
/// store does nothing.
pub(super) fn close(logged: &LoggedStore) -> Result<()> {
    if logged.closed.load(Ordering::Acquire) {
        return Ok(());
    }
    if logged.config.commit_policy == CommitPolicy::Explicit {
        // What is committed is flushed and checkpointed, so reopening replays none of it.
        let checkpointed = logged.checkpoint_now();
        return logged.abandon().and(checkpointed);
    }
    logged.commit()?;
    logged.checkpoint_now()?;
    logged.closed.store(true, Ordering::Release);
    logged.store.close()
}

impl LoggedStore {
    /// Refuses, before buffering, a write the changelog would refuse at commit: one that
    /// could never be committed would fail every later commit.
    fn check_loggable(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if key == EPOCH_KEY {
            return Err(store_api::Error::invalid(
                "the key \\0statestore.epoch is reserved for the changelog's writer epoch",
            ));
        }
        match value {
            Some(value) => check_entry(key, value)?,
            None => check_key(key)?,
        }
        let value_len = value.map_or(0, <[u8]>::len);
        check_record(key, value_len, self.log.max_record_len())
    }

    fn merged_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        self.check_open()?;
        if range_is_empty(from, to) {
            return Ok(Box::new(std::iter::empty()));
        }
        // The buffer is copied before the store iterator is made, so a commit that moves
        // writes into the store in between cannot hide them. Holding the read lock over both
        // keeps new writes out, so a snapshot-iterator store still yields a snapshot.
        let buffer = self.buffer.read();
        let buffered = buffer.snapshot(from, to, reverse);
        let stored = if reverse {
            self.store.reverse_range(from, to)?
        } else {
            self.store.range(from, to)?
        };
        drop(buffer);
        Ok(Box::new(MergeIter::new(buffered, stored, reverse)))
    }
}
