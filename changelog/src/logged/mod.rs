//! [`LoggedStore`]: any store made durable by any changelog.

mod buffer;
mod kv;
mod merge;

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use serde::{Deserialize, Serialize};
use store_api::{BatchOp, Error, KeyValueStore, Result};

use self::buffer::WriteBuffer;
use crate::checkpoint::Checkpoint;
use crate::commits::CommitReader;
use crate::record::{Changelog, Framing};
use crate::restore::{NoopRestoreListener, RestoreListener, RestoreOutcome, restore};

/// Options of a [`LoggedStore`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoggedStoreConfig {
    /// A write that finds the buffer holding at least this many bytes commits it first (keys
    /// and values, plus 64 bytes of bookkeeping per key). `0` commits before every write.
    /// Default: 16 MiB.
    pub commit_bytes: usize,
    /// Records per `WriteBatch` when restoring, and keys per batch when wiping.
    /// Default: [`DEFAULT_RESTORE_BATCH_RECORDS`](crate::DEFAULT_RESTORE_BATCH_RECORDS).
    pub restore_batch_records: usize,
}

impl Default for LoggedStoreConfig {
    fn default() -> Self {
        LoggedStoreConfig {
            commit_bytes: 16 << 20,
            restore_batch_records: crate::DEFAULT_RESTORE_BATCH_RECORDS,
        }
    }
}

/// A store whose every write also goes to a [`Changelog`], so it can be rebuilt anywhere.
///
/// Writes are buffered in memory until [`commit`](LoggedStore::commit) (or
/// [`flush`](KeyValueStore::flush), or a write that finds the buffer over
/// [`commit_bytes`](LoggedStoreConfig::commit_bytes)), and every read sees them: `get`,
/// ranges and prefix scans merge the buffer over the store. A commit:
/// 1. appends the latest write of each buffered key to the changelog and syncs it;
/// 2. applies them to the store as one `WriteBatch` and flushes it;
/// 3. rewrites the checkpoint to the offset of the last record appended.
///
/// The store therefore never holds a write the log has not acknowledged, and a crash at any
/// point is repaired by replaying the log after the checkpoint when the store is opened again.
/// The commit's records are framed by a commit marker appended after them (see
/// [`Changelog`]), so a crash before step 1 completes loses the commit, whole, even if part
/// of it reached the log; after it, restore replays it, whole. Opening a store whose log ends
/// in such an abandoned commit first appends a commit that undoes it (see
/// [`open`](LoggedStore::open)).
///
/// Durability is per commit: a write is durable once the `commit` that follows it returned.
///
/// ```
/// use std::sync::Arc;
/// use statestore_changelog::{Checkpoint, LoggedStore, LoggedStoreConfig, MemoryLog};
/// use statestore_memory::{Config, MemoryStore};
/// use store_api::KeyValueStore;
///
/// let dir = tempfile::tempdir()?;
/// let log = MemoryLog::new("app-counts-changelog", 0);
/// let checkpoint = Arc::new(Checkpoint::open(dir.path().join(".checkpoint"))?);
/// let store = LoggedStore::open(
///     Arc::new(MemoryStore::new(Config::default())),
///     Arc::new(log.clone()),
///     Arc::clone(&checkpoint),
///     LoggedStoreConfig::default(),
/// )?;
/// store.put(b"apple", b"3")?;
/// assert_eq!(store.get(b"apple")?, Some(b"3".to_vec())); // visible before the commit
/// store.commit()?;
/// // The checkpoint names the commit marker after the record, at offset 1.
/// assert_eq!(checkpoint.get("app-counts-changelog", 0), Some(1));
///
/// // Elsewhere, an empty store restored from the same log holds the same data.
/// let elsewhere = tempfile::tempdir()?;
/// let copy = LoggedStore::open(
///     Arc::new(MemoryStore::new(Config::default())),
///     Arc::new(log),
///     Arc::new(Checkpoint::open(elsewhere.path().join(".checkpoint"))?),
///     LoggedStoreConfig::default(),
/// )?;
/// assert_eq!(copy.get(b"apple")?, Some(b"3".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LoggedStore {
    store: Arc<dyn KeyValueStore>,
    log: Arc<dyn Changelog>,
    checkpoint: Arc<Checkpoint>,
    config: LoggedStoreConfig,
    buffer: RwLock<WriteBuffer>,
    /// Serializes commits: one set of writes is in flight at a time.
    commit_lock: Mutex<()>,
    closed: AtomicBool,
    restored: RestoreOutcome,
}

impl LoggedStore {
    /// Opens a logged store: restores `store` from `log` (see [`restore`]) according to its
    /// entry in `checkpoint`, then returns it ready for writes.
    ///
    /// When the log ends in framed records without their commit marker (a writer died
    /// halfway through a commit), it appends at once a commit holding, for each of their
    /// keys, the value the restored store holds or a tombstone, so that no later replay can
    /// apply them, and checkpoints it.
    ///
    /// # Errors
    /// Any error of the restore (of the log, the store, or the checkpoint file), or of
    /// appending that commit.
    pub fn open(
        store: Arc<dyn KeyValueStore>,
        log: Arc<dyn Changelog>,
        checkpoint: Arc<Checkpoint>,
        config: LoggedStoreConfig,
    ) -> Result<LoggedStore> {
        Self::open_with_listener(store, log, checkpoint, config, &mut NoopRestoreListener)
    }

    /// As [`open`](LoggedStore::open), reporting restore progress to `listener`.
    ///
    /// # Errors
    /// As [`open`](LoggedStore::open).
    pub fn open_with_listener(
        store: Arc<dyn KeyValueStore>,
        log: Arc<dyn Changelog>,
        checkpoint: Arc<Checkpoint>,
        config: LoggedStoreConfig,
        listener: &mut dyn RestoreListener,
    ) -> Result<LoggedStore> {
        let batch = config.restore_batch_records;
        let restored = restore(store.as_ref(), log.as_ref(), &checkpoint, batch, listener)?;
        let logged = LoggedStore {
            store,
            log,
            checkpoint,
            config,
            buffer: RwLock::new(WriteBuffer::default()),
            commit_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            restored,
        };
        if let Err(err) = logged.repair_abandoned_tail() {
            // Dropped unopened: the caller's store stays open, as when the restore fails.
            logged.closed.store(true, Ordering::Release);
            return Err(err);
        }
        Ok(logged)
    }

    /// What the restore on open did.
    pub fn restored(&self) -> RestoreOutcome {
        self.restored
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.store
    }

    /// The changelog.
    pub fn changelog(&self) -> &Arc<dyn Changelog> {
        &self.log
    }

    /// The checkpoint file this store records its offset in.
    pub fn checkpoint(&self) -> &Arc<Checkpoint> {
        &self.checkpoint
    }

    /// The options.
    pub fn config(&self) -> &LoggedStoreConfig {
        &self.config
    }

    /// The bytes buffered since the last commit began (charged as for `commit_bytes`).
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.read().active_bytes()
    }

    /// Makes every buffered write durable: log, then store, then checkpoint (see the type's
    /// docs). Writes made while it runs wait for the next commit. A commit with nothing
    /// buffered does nothing.
    ///
    /// # Errors
    /// `Closed`, or the first error of the log, the store or the checkpoint file. Nothing is
    /// then lost or half-applied: the writes stay buffered and readable, and the next commit
    /// persists them again (a store batch is all-or-nothing, and replaying records the log
    /// already holds is harmless).
    pub fn commit(&self) -> Result<()> {
        self.check_open()?;
        let _one_at_a_time = self.commit_lock.lock();
        let Some(frozen) = self.buffer.write().freeze() else {
            return Ok(());
        };
        let result = self.persist(&frozen);
        drop(frozen);
        self.buffer.write().finish_commit(result.is_ok());
        if let Err(err) = &result {
            tracing::warn!(topic = self.log.topic(), error = %err, "commit failed; writes kept");
        }
        result
    }

    /// The three steps of a commit. The log and the store only borrow the frozen writes, so
    /// nothing is copied here: each copies them once into its own format.
    fn persist(&self, ops: &[BatchOp]) -> Result<()> {
        let offsets = self.log.append_framed(ops, Framing::Commit)?;
        self.log.sync()?;
        self.store.write_ops(ops)?;
        self.store.flush()?;
        self.checkpoint_at(&offsets)
    }

    /// Checkpoints the last offset of `offsets`: the marker of the commit just persisted.
    fn checkpoint_at(&self, offsets: &Range<u64>) -> Result<()> {
        match offsets.end.checked_sub(1) {
            Some(last) if !offsets.is_empty() => {
                self.checkpoint
                    .set(self.log.topic(), self.log.partition(), last)
            }
            _ => Ok(()),
        }
    }

    /// Closes a commit that a writer before this one abandoned halfway (see the commit rules
    /// of [`Changelog`]): for every key among the framed records after the last commit end,
    /// appends the value the restored store holds, or a tombstone, as one commit. A reader
    /// that later replays the abandoned records then replays this commit after them and
    /// reaches exactly the restored state. Returns the number of keys repaired.
    fn repair_abandoned_tail(&self) -> Result<usize> {
        let from = match self.restored.checkpoint {
            Some(offset) => offset + 1,
            None => self.log.start_offset()?,
        };
        let end = self.log.end_offset()?;
        let mut reader = CommitReader::new(self.log.as_ref(), from);
        while reader.position() < end {
            let released = reader.read(self.config.restore_batch_records.max(1))?;
            if released.last_read.is_none() {
                break;
            }
            if released.commit_end.is_some() {
                // Another writer committed since the restore: the tail is not abandoned, and
                // this store is no longer the partition's only writer.
                return Err(Error::invalid(format!(
                    "changelog {}/{} gained a commit while its store was opened; is another \
                     writer using it?",
                    self.log.topic(),
                    self.log.partition()
                )));
            }
        }
        let keys: BTreeSet<&[u8]> = reader.pending().iter().map(|r| r.op.key()).collect();
        if keys.is_empty() {
            return Ok(0);
        }
        let mut ops = Vec::with_capacity(keys.len());
        for key in &keys {
            ops.push(match self.store.get(key)? {
                Some(value) => BatchOp::Put {
                    key: key.to_vec(),
                    value,
                },
                None => BatchOp::Delete { key: key.to_vec() },
            });
        }
        tracing::warn!(
            topic = self.log.topic(),
            partition = self.log.partition(),
            abandoned_records = reader.pending().len(),
            keys = keys.len(),
            "closing a commit abandoned by an earlier writer"
        );
        let offsets = self.log.append_framed(&ops, Framing::Commit)?;
        self.log.sync()?;
        self.checkpoint_at(&offsets)?;
        Ok(keys.len())
    }

    /// Closes without committing: writes buffered since the last commit are dropped and
    /// nothing more reaches the changelog. For a task whose partition was lost to another
    /// instance, which may already be writing to the same changelog partition.
    ///
    /// # Errors
    /// The wrapped store's close error.
    pub fn abandon(&self) -> Result<()> {
        let _no_commit_in_flight = self.commit_lock.lock();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        *self.buffer.write() = WriteBuffer::default();
        self.store.close()
    }

    /// The buffer, locked for writing, once it has room for another write: when it holds
    /// `commit_bytes` or more, it is committed first.
    ///
    /// # Errors
    /// `Closed`, or the error of that commit; then the caller writes nothing.
    fn buffer_with_room(&self) -> Result<RwLockWriteGuard<'_, WriteBuffer>> {
        self.check_open()?;
        let buffer = self.buffer.write();
        if buffer.active_bytes() < self.config.commit_bytes || buffer.active_bytes() == 0 {
            return Ok(buffer);
        }
        drop(buffer);
        self.commit()?;
        Ok(self.buffer.write())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

impl fmt::Debug for LoggedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoggedStore")
            .field("store", &self.store)
            .field("topic", &self.log.topic())
            .field("partition", &self.log.partition())
            .field("buffered_bytes", &self.buffered_bytes())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for LoggedStore {
    fn drop(&mut self) {
        if let Err(err) = kv::close(self) {
            tracing::warn!(topic = self.log.topic(), error = %err, "closing a dropped logged store");
        }
    }
}
