//! [`LoggedStore`]: any store made durable by any changelog.

mod buffer;
mod kv;
mod merge;
mod snapshots;

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
use crate::record::EPOCH_KEY;
use crate::record::{Changelog, Framing, RecordKind};
use crate::restore::{
    NoopRestoreListener, RestoreListener, RestoreOutcome, epoch_of, restore_fenced, stored_epoch,
};

/// Who decides when a [`LoggedStore`] commits, and so what a commit holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitPolicy {
    /// The store commits by itself as well: when a write finds the buffer at
    /// [`commit_bytes`](LoggedStoreConfig::commit_bytes), on [`flush`](KeyValueStore::flush),
    /// [`close`](KeyValueStore::close) and drop. A crash loses at most the writes since the last
    /// commit; a commit may end between two writes the caller meant to go together.
    #[default]
    Auto,
    /// Only [`commit`](LoggedStore::commit) commits, so every commit ends where its owner
    /// says, with whatever the owner wrote last (an input position, say). A full buffer keeps
    /// taking writes and [`needs_commit`](LoggedStore::needs_commit) tells the owner to
    /// commit; `flush` flushes and checkpoints only what is already committed; `close` and
    /// drop do too, then discard the writes since the last commit, as
    /// [`abandon`](LoggedStore::abandon) does. A crash or a
    /// close loses exactly the writes since the owner's last commit.
    Explicit,
}

/// When a commit also flushes the wrapped store and rewrites the checkpoint file, and so
/// what a crash leaves for the next restore to replay. Either way every commit syncs the
/// changelog before it returns, so no committed write is lost to a crash, and the checkpoint
/// file never names an offset whose store writes a crash can lose: it is rewritten only after
/// the store's flush returned. A store that is not persistent ([`Capabilities::persistent`](
/// store_api::Capabilities::persistent) false) restores from the log's start after any
/// reopen, so it is never flushed for a checkpoint nor named in the file, whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointPolicy {
    /// Every commit flushes the store and rewrites the checkpoint file (fsynced). After a
    /// crash the store holds every commit that returned, and restore replays nothing of them.
    EveryCommit,
    /// A commit flushes the store and checkpoints only once at least this many bytes of
    /// records (keys and values) were committed since the last checkpoint; so do
    /// [`close`](KeyValueStore::close) and [`checkpoint_now`](LoggedStore::checkpoint_now).
    /// Between, the store's writes reach its files at the engine's own pace and the
    /// checkpoint file keeps the offset of the last flushed commit. After a crash the store
    /// holds that commit and possibly part of the later ones; restore replays the log from
    /// that offset (about this many bytes at most), which puts every key written since back
    /// to its last committed value.
    AfterBytes(u64),
}

impl Default for CheckpointPolicy {
    /// [`AfterBytes`](CheckpointPolicy::AfterBytes) of 64 MiB: four full buffers at the
    /// default `commit_bytes`, under a second of replay after a crash at the restore rates in
    /// `docs/benchmarks.md`. Kafka Streams checkpoints every 10 000 records, or only on a
    /// clean close under exactly-once.
    fn default() -> Self {
        CheckpointPolicy::AfterBytes(64 << 20)
    }
}

/// Options of a [`LoggedStore`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoggedStoreConfig {
    /// A write that finds the buffer holding at least this many bytes commits it first (keys
    /// and values, plus 64 bytes of bookkeeping per key). `0` commits before every write.
    /// Under [`CommitPolicy::Explicit`] the buffer is not committed but
    /// [`needs_commit`](LoggedStore::needs_commit) turns true. Default: 16 MiB.
    pub commit_bytes: usize,
    /// Whether the store also commits by itself. Default: [`CommitPolicy::Auto`].
    pub commit_policy: CommitPolicy,
    /// Records per `WriteBatch` when restoring, and keys per batch when wiping.
    /// Default: [`DEFAULT_RESTORE_BATCH_RECORDS`](crate::DEFAULT_RESTORE_BATCH_RECORDS).
    pub restore_batch_records: usize,
    /// When a commit flushes the store and checkpoints. Default: 64 MiB, see
    /// [`CheckpointPolicy`].
    pub checkpoint_policy: CheckpointPolicy,
}

impl Default for LoggedStoreConfig {
    fn default() -> Self {
        LoggedStoreConfig {
            commit_bytes: 16 << 20,
            commit_policy: CommitPolicy::Auto,
            restore_batch_records: crate::DEFAULT_RESTORE_BATCH_RECORDS,
            checkpoint_policy: CheckpointPolicy::default(),
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
/// 2. applies them to the store, not atomically
///    ([`write_ops_non_atomic`](KeyValueStore::write_ops_non_atomic)): reads find them in
///    the buffer until the commit ends, so a half-applied commit hides none of them;
/// 3. when the [`CheckpointPolicy`] says so, flushes the store and rewrites the checkpoint
///    to the offset of the last record appended; otherwise records that offset only in the
///    checkpoint's live entries, and the file keeps the last flushed one.
///
/// The store therefore never holds a write the log has not acknowledged, the checkpoint file
/// never vouches for a write the store could lose, and a crash at any point is repaired by
/// replaying the log after the checkpoint file's offset when the store is opened again.
///
/// A task with several stores commits each with [`commit_staged`](LoggedStore::commit_staged)
/// and then writes their shared checkpoint file once ([`Checkpoint::write_staged`]).
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
/// // The checkpoint names the commit marker after the record, at offset 1: the store holds
/// // it (the file is rewritten once 64 MiB were committed, or at close).
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
    /// The last commit failed after its writes may have reached the store: the store may hold
    /// part of them, which only the buffer (or a restore) makes whole again.
    commit_failed: AtomicBool,
    closed: AtomicBool,
    restored: RestoreOutcome,
    /// Set by [`fence`](LoggedStore::fence): this writer's epoch and the offset its next
    /// append should start at if nobody else appended.
    fence: Mutex<Option<Fence>>,
    /// The keys of records the restore ignored as a fenced writer's: the fence rewrites them.
    fenced_keys: Mutex<BTreeSet<Vec<u8>>>,
    /// The record bytes committed since the store was last flushed and checkpointed.
    unflushed: Mutex<u64>,
    /// A commit appended in a transaction by [`prepare_commit`](LoggedStore::prepare_commit),
    /// not yet applied to the store.
    prepared: Mutex<Option<Prepared>>,
    /// Where [`snapshot`](LoggedStore::snapshot) writes, and what the open loaded.
    snapshots: snapshots::Snapshots,
}

/// The writes of a commit appended inside a transaction, and the offsets they got.
struct Prepared {
    frozen: Arc<buffer::Frozen>,
    offsets: Range<u64>,
}

/// How often a fence reads its log again, 50 ms apart, until it sees its own commit: up to
/// a minute, as a previous owner's transaction left open on the log (a paused process) keeps
/// its last stable offset, which readers of committed records stop at, below the fence until
/// the brokers abort it, after its `transaction.timeout.ms`.
const CATCH_UP_ATTEMPTS: u32 = 1200;

/// How often `open` restores again when another writer keeps committing meanwhile.
const OPEN_ATTEMPTS: u32 = 5;

/// The outcome of a restore followed by `next` (or `next` alone for the `first`).
fn merge_outcomes(done: RestoreOutcome, next: RestoreOutcome, first: bool) -> RestoreOutcome {
    if first {
        return next;
    }
    RestoreOutcome {
        wiped: done.wiped,
        from: done.from,
        records: done.records + next.records,
        checkpoint: next.checkpoint.or(done.checkpoint),
        epoch: next.epoch.max(done.epoch),
        fenced: done.fenced + next.fenced,
        bulk_loaded: done.bulk_loaded,
    }
}

/// The value of [`EPOCH_KEY`] a fence writes: the epoch, then a number that tells this
/// writer's fence from another's of the same epoch (8 bytes each, big-endian).
fn fence_value(epoch: u64, nonce: u64) -> [u8; 16] {
    let mut value = [0; 16];
    value[..8].copy_from_slice(&epoch.to_be_bytes());
    value[8..].copy_from_slice(&nonce.to_be_bytes());
    value
}

/// A number no other process or call is likely to draw: a randomly keyed hash of the time
/// and process. It tells one fence from another of the same epoch, and makes process ids.
pub fn fence_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.finish()
}

/// The key and value bytes of `ops`, as a [`CheckpointPolicy`] counts them.
fn record_bytes(ops: &[BatchOp]) -> u64 {
    ops.iter()
        .map(|op| (op.key().len() + op.value().map_or(0, <[u8]>::len)) as u64)
        .sum()
}

/// A fenced writer's epoch and where its appends should land.
#[derive(Debug, Clone, Copy)]
struct Fence {
    epoch: u64,
    expected_start: u64,
}

impl LoggedStore {
    /// Opens a logged store: restores `store` from `log` (see [`restore`](crate::restore()))
    /// according to its entry in `checkpoint`, then returns it ready for writes.
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
        Self::open_inner(store, log, checkpoint, config, None, listener)
    }

    /// The open of every constructor: with `snapshots`, a store that has no usable local
    /// checkpoint is first loaded from the newest usable snapshot (see
    /// [`open_with_snapshots`](LoggedStore::open_with_snapshots)).
    fn open_inner(
        store: Arc<dyn KeyValueStore>,
        log: Arc<dyn Changelog>,
        checkpoint: Arc<Checkpoint>,
        config: LoggedStoreConfig,
        snapshot_store: Option<Arc<crate::SnapshotStore>>,
        listener: &mut dyn RestoreListener,
    ) -> Result<LoggedStore> {
        let batch = config.restore_batch_records;
        let loaded = match &snapshot_store {
            Some(snapshot_store) => {
                snapshots::bootstrap(store.as_ref(), log.as_ref(), &checkpoint, snapshot_store)?
            }
            None => None,
        };
        let mut logged = LoggedStore {
            store,
            log,
            checkpoint,
            config,
            buffer: RwLock::new(WriteBuffer::default()),
            commit_lock: Mutex::new(()),
            commit_failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            restored: RestoreOutcome::default(),
            fence: Mutex::new(None),
            fenced_keys: Mutex::new(BTreeSet::new()),
            unflushed: Mutex::new(0),
            prepared: Mutex::new(None),
            snapshots: snapshots::Snapshots::new(snapshot_store, loaded),
        };
        // A writer that committed while this store restored (a previous owner not yet aware
        // that it lost the partition) is caught up with by restoring again.
        let mut attempts = 0;
        let result = loop {
            attempts += 1;
            let (restored, fenced_keys) = match restore_fenced(
                logged.store.as_ref(),
                logged.log.as_ref(),
                &logged.checkpoint,
                batch,
                listener,
            ) {
                Ok(restored) => restored,
                Err(err) => break Err(err),
            };
            logged.restored = merge_outcomes(logged.restored, restored, attempts == 1);
            logged.fenced_keys.lock().extend(fenced_keys);
            if restored.epoch > 0
                && let Err(err) = logged.log.set_writer_epoch(restored.epoch)
            {
                // Any repair below then counts unless a newer writer fenced the last one.
                break Err(err);
            }
            match logged.repair_abandoned_tail() {
                Ok(Some(_)) => break Ok(()),
                Ok(None) if attempts < OPEN_ATTEMPTS => {}
                Ok(None) => {
                    break Err(Error::invalid(format!(
                        "changelog {}/{} kept gaining commits while its store was opened; is \
                         another writer using it?",
                        logged.log.topic(),
                        logged.log.partition()
                    )));
                }
                Err(err) => break Err(err),
            }
        };
        if let Err(err) = result {
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

    /// True when the buffer holds [`commit_bytes`](LoggedStoreConfig::commit_bytes) or more:
    /// under [`CommitPolicy::Explicit`], the owner should commit at its next boundary.
    pub fn needs_commit(&self) -> bool {
        let bytes = self.buffered_bytes();
        bytes > 0 && bytes >= self.config.commit_bytes
    }

    /// Makes every buffered write durable: log, then store, then checkpoint when the
    /// [`CheckpointPolicy`] says so (see the type's docs). Writes made while it runs wait for
    /// the next commit. A commit with nothing buffered does nothing.
    ///
    /// # Errors
    /// `Closed`, or the first error of the log, the store or the checkpoint file. Nothing is
    /// then lost or half-applied: after an error of the log or the store the writes stay
    /// buffered and readable over whatever part of them the store took (its write is not
    /// atomic, see [`KeyValueStore::write_ops_non_atomic`]), and the next commit persists
    /// them all again (replaying records the log already holds is harmless); after an
    /// error writing the checkpoint file the commit itself holds, the file keeps its older
    /// offset, and the next commit or [`checkpoint_now`](LoggedStore::checkpoint_now) writes
    /// it again.
    pub fn commit(&self) -> Result<()> {
        self.commit_staged()?;
        self.checkpoint.write_staged()
    }

    /// As [`commit`](LoggedStore::commit), except that a checkpoint the commit makes is only
    /// staged in the shared [`Checkpoint`], after the store's flush: the caller writes the
    /// file once for all its stores with [`Checkpoint::write_staged`]. Until then the file
    /// keeps an older offset, which is always safe (restore replays from it).
    ///
    /// # Errors
    /// As [`commit`](LoggedStore::commit).
    pub fn commit_staged(&self) -> Result<()> {
        self.check_open()?;
        let _one_at_a_time = self.commit_lock.lock();
        self.check_nothing_prepared()?;
        let Some(frozen) = self.buffer.write().freeze() else {
            return Ok(());
        };
        let result = self.persist(&frozen);
        drop(frozen);
        self.buffer.write().finish_commit(result.is_ok());
        self.commit_failed.store(result.is_err(), Ordering::Release);
        if let Err(err) = &result {
            tracing::warn!(topic = self.log.topic(), error = %err, "commit failed; writes kept");
        }
        drop(_one_at_a_time);
        result?;
        self.snapshot_if_due()
    }

    /// The first half of a commit whose records go in a transaction (see
    /// [`Changelog::append_transactional`]): appends the buffered writes, framed as one
    /// commit, inside the log's open transaction, and keeps them, readable, until
    /// [`apply_prepared`](LoggedStore::apply_prepared) writes them to the store once the
    /// transaction committed. Nothing reaches the store or the checkpoint before: if the
    /// transaction aborts, the store and its checkpoint hold the last committed state, and
    /// the owner closes the store with [`abandon`](LoggedStore::abandon) (which drops the
    /// prepared writes) and opens it again, which restores only what committed transactions
    /// added. Returns whether anything was appended.
    ///
    /// The writer's fence is checked by `apply_prepared`, not here: the log's readers cannot
    /// read the records of an open transaction. Before that, the brokers fence a stale
    /// owner's transaction (its producer epoch, its consumer group generation).
    ///
    /// # Errors
    /// `Closed`; `InvalidArgument` while a prepared commit is not applied yet; `Unsupported`
    /// for a log without transactions; an error of the append, after which the writes stay
    /// buffered and the transaction must be aborted.
    pub fn prepare_commit(&self) -> Result<bool> {
        self.check_open()?;
        let _one_at_a_time = self.commit_lock.lock();
        self.check_nothing_prepared()?;
        let Some(frozen) = self.buffer.write().freeze() else {
            return Ok(false);
        };
        match self.log.append_transactional(&frozen, Framing::Commit) {
            Ok(offsets) => {
                *self.prepared.lock() = Some(Prepared { frozen, offsets });
                Ok(true)
            }
            Err(err) => {
                drop(frozen);
                self.buffer.write().finish_commit(false);
                Err(err)
            }
        }
    }

    /// The second half of a commit [`prepare_commit`](LoggedStore::prepare_commit) began,
    /// once its transaction committed: checks that no newer writer fenced this one (as a
    /// commit does), writes the prepared writes to the store and checkpoints them when the
    /// [`CheckpointPolicy`] says so (staged, as [`commit_staged`](LoggedStore::commit_staged)
    /// does). Does nothing without a prepared commit.
    ///
    /// # Errors
    /// `Closed`; `Fenced` when a newer writer fenced the log before the transaction's
    /// records (every reader ignores them; the store closes without them); or an error of
    /// the store or the checkpoint: as after a failed
    /// [`commit`](LoggedStore::commit), the writes stay readable over whatever part of them
    /// the store took, and only a reopen (a restore of the committed log) makes the store
    /// whole.
    pub fn apply_prepared(&self) -> Result<()> {
        self.check_open()?;
        let _one_at_a_time = self.commit_lock.lock();
        let Some(Prepared { frozen, offsets }) = self.prepared.lock().take() else {
            return Ok(());
        };
        let result = self.apply(&frozen, &offsets);
        drop(frozen);
        self.buffer.write().finish_commit(result.is_ok());
        self.commit_failed.store(result.is_err(), Ordering::Release);
        drop(_one_at_a_time);
        result?;
        self.snapshot_if_due()
    }

    /// Writes the prepared `ops`, committed at `offsets`, to the store, as `persist` does
    /// after its append. The fence is checked first, now that the records are visible: a
    /// transaction's control record may sit between this writer's last append and these.
    fn apply(&self, ops: &[BatchOp], offsets: &Range<u64>) -> Result<()> {
        let stale = self.check_not_fenced(offsets, ops.len() + 1, 1)?;
        // As in `persist`: the writes are read from the buffer until the commit ends.
        self.store.write_ops_non_atomic(ops)?;
        let mut bytes = record_bytes(ops);
        let mut last = offsets.end.saturating_sub(1);
        if !stale.is_empty() {
            let (rewritten, rewritten_bytes) = self.rewrite(stale)?;
            last = rewritten.end.saturating_sub(1);
            bytes += rewritten_bytes;
        }
        self.committed(last, bytes)
    }

    /// The three steps of a commit. The log and the store only borrow the frozen writes, so
    /// nothing is copied here: each copies them once into its own format.
    fn persist(&self, ops: &[BatchOp]) -> Result<()> {
        let offsets = self.log.append_framed(ops, Framing::Commit)?;
        self.log.sync()?;
        let stale = self.check_not_fenced(&offsets, ops.len() + 1, 0)?;
        // Readers see `ops` in the buffer until the commit ends and a crash replays them from
        // the log after the checkpoint, so the store's write need not be atomic.
        self.store.write_ops_non_atomic(ops)?;
        let mut bytes = record_bytes(ops);
        let mut last = offsets.end.saturating_sub(1);
        if !stale.is_empty() {
            let (rewritten, rewritten_bytes) = self.rewrite(stale)?;
            last = rewritten.end.saturating_sub(1);
            bytes += rewritten_bytes;
        }
        self.committed(last, bytes)
    }

    /// Records that the store holds the commit whose marker is at `last`, after `bytes` more
    /// bytes of records: flushes the store and stages a checkpoint when the policy says so,
    /// else advances the checkpoint's live entry only.
    fn committed(&self, last: u64, bytes: u64) -> Result<()> {
        let mut unflushed = self.unflushed.lock();
        let pending = unflushed.saturating_add(bytes);
        let due = self.persistent()
            && match self.config.checkpoint_policy {
                CheckpointPolicy::EveryCommit => true,
                CheckpointPolicy::AfterBytes(limit) => pending >= limit,
            };
        let (topic, partition) = (self.log.topic(), self.log.partition());
        if due {
            self.store.flush()?;
            self.checkpoint.stage(topic, partition, last)?;
            *unflushed = 0;
        } else {
            self.checkpoint.advance(topic, partition, last)?;
            *unflushed = pending;
        }
        Ok(())
    }

    /// Whether the store keeps its content across a reopen. A store that does not is never
    /// flushed for a checkpoint and never named in the checkpoint file (as Kafka Streams
    /// checkpoints persistent stores only): it restores from the log's start anyway, so the
    /// file's fsyncs would buy nothing. Its live entry is kept.
    fn persistent(&self) -> bool {
        self.store.capabilities().persistent
    }

    /// Flushes the wrapped store and checkpoints the last commit it holds, whatever the
    /// [`CheckpointPolicy`], so that a restore after a crash or a close replays nothing that
    /// was committed. Does not commit buffered writes.
    ///
    /// # Errors
    /// `Closed`, or an error of the store's flush or the checkpoint file.
    pub fn checkpoint_now(&self) -> Result<()> {
        self.stage_checkpoint()?;
        self.checkpoint.write_staged()
    }

    /// As [`checkpoint_now`](LoggedStore::checkpoint_now), staging the checkpoint for the
    /// caller's [`Checkpoint::write_staged`] instead of writing the file.
    ///
    /// # Errors
    /// As [`checkpoint_now`](LoggedStore::checkpoint_now).
    pub fn stage_checkpoint(&self) -> Result<()> {
        self.check_open()?;
        let _one_at_a_time = self.commit_lock.lock();
        let mut unflushed = self.unflushed.lock();
        // With no commit in flight, the live entry names exactly what the store holds.
        let (topic, partition) = (self.log.topic(), self.log.partition());
        self.store.flush()?;
        if let Some(last) = self
            .checkpoint
            .get(topic, partition)
            .filter(|_| self.persistent())
        {
            self.checkpoint.stage(topic, partition, last)?;
        }
        *unflushed = 0;
        Ok(())
    }

    /// Appends, as one commit, the value the store holds (or a tombstone) for each of `keys`,
    /// which a fenced writer appended: readers ignore those records, and with this commit no
    /// compaction can keep one of them as the latest of its key. Returns its offsets and its
    /// record bytes; the caller checkpoints it.
    fn rewrite(&self, keys: BTreeSet<Vec<u8>>) -> Result<(Range<u64>, u64)> {
        let mut ops = Vec::with_capacity(keys.len());
        for key in keys {
            ops.push(match self.store.get(&key)? {
                Some(value) => BatchOp::Put { key, value },
                None => BatchOp::Delete { key },
            });
        }
        tracing::warn!(
            topic = self.log.topic(),
            partition = self.log.partition(),
            keys = ops.len(),
            "rewriting keys a fenced writer appended"
        );
        let offsets = self.log.append_framed(&ops, Framing::Commit)?;
        self.log.sync()?;
        // The keys' values are already in the store: nothing is applied.
        let _ = self.check_not_fenced(&offsets, ops.len() + 1, 0)?;
        Ok((offsets, record_bytes(&ops)))
    }

    /// Checkpoints the last offset of `offsets`: the marker of the commit just persisted.
    fn checkpoint_at(&self, offsets: &Range<u64>) -> Result<()> {
        match offsets.end.checked_sub(1) {
            Some(last) if !offsets.is_empty() => {
                let (topic, partition) = (self.log.topic(), self.log.partition());
                if self.persistent() {
                    self.checkpoint.set(topic, partition, last)
                } else {
                    self.checkpoint.advance(topic, partition, last)
                }
            }
            _ => Ok(()),
        }
    }

    /// Closes a commit that a writer before this one abandoned halfway (see the commit rules
    /// of [`Changelog`]): for every key among the framed records after the last commit end,
    /// appends the value the restored store holds, or a tombstone, as one commit. A reader
    /// that later replays the abandoned records then replays this commit after them and
    /// reaches exactly the restored state. Returns the number of keys repaired, or `None`
    /// when another writer committed since the restore (restore again).
    fn repair_abandoned_tail(&self) -> Result<Option<usize>> {
        let from = match self.restored.checkpoint {
            Some(offset) => offset + 1,
            None => self.log.start_offset()?,
        };
        let end = self.log.end_offset()?;
        let mut reader = CommitReader::with_epoch(self.log.as_ref(), from, self.restored.epoch);
        while reader.position() < end {
            let released = reader.read(self.config.restore_batch_records.max(1))?;
            if released.last_read.is_none() {
                break;
            }
            if released.commit_end.is_some() {
                // Another writer committed since the restore: the tail is not abandoned, and
                // this store is not yet the partition's only writer. `open` restores again.
                return Ok(None);
            }
        }
        let keys: BTreeSet<&[u8]> = reader.pending().iter().map(|r| r.op.key()).collect();
        if keys.is_empty() {
            return Ok(Some(0));
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
        Ok(Some(keys.len()))
    }

    /// Makes this store its changelog partition's only honoured writer, for an owner that
    /// took the partition over from another (a task assigned to this instance): picks a
    /// writer epoch above every epoch in the log, stamps it on everything this store appends
    /// from now on, and commits [`EPOCH_KEY`] under it. From that commit on, every reader
    /// ignores what a previous owner appends (see "Fencing" in [`Changelog`]), and that owner
    /// learns it was fenced at its next commit.
    ///
    /// Whatever a previous owner committed between this store's restore and the fence is
    /// replayed into the store before `fence` returns, so the store holds exactly what any
    /// later reader of the log will. The fence commit also rewrites, with the value the store
    /// holds, every key of the records the restore ignored as a fenced writer's, so no
    /// compaction can leave such a record as the latest of its key. Returns the epoch.
    ///
    /// # Errors
    /// `InvalidArgument` when writes are buffered (fence right after opening); `Unsupported`
    /// for a log that cannot carry epochs (the file log, which one process owns); `Fenced`
    /// when an even newer writer fenced this one meanwhile; or an error of the log, the
    /// store or the checkpoint file.
    pub fn fence(&self) -> Result<u64> {
        self.check_open()?;
        let _one_at_a_time = self.commit_lock.lock();
        if self.buffered_bytes() > 0 {
            return Err(Error::invalid(
                "a logged store is fenced before anything is written to it",
            ));
        }
        let held = self.fence.lock().map_or(0, |fence| fence.epoch);
        let mut floor = self
            .restored
            .epoch
            .max(held)
            .max(stored_epoch(self.store.as_ref())?);
        let nonce = fence_nonce();
        for _ in 0..OPEN_ATTEMPTS {
            let epoch = floor
                .checked_add(1)
                .ok_or_else(|| Error::Corruption("the writer epoch overflowed".into()))?;
            let (offsets, rivals) = self.append_fence(epoch, nonce)?;
            let caught_up = self.catch_up_to(offsets.end.saturating_sub(1))?;
            let value = self.store.get(EPOCH_KEY)?;
            if caught_up.epoch > epoch || value.as_deref() != Some(&fence_value(epoch, nonce)[..]) {
                self.closed.store(true, Ordering::Release);
                return Err(Error::Fenced(format!(
                    "changelog {}/{} was fenced by another writer (epoch {}) while this one \
                     fenced it with epoch {epoch}",
                    self.log.topic(),
                    self.log.partition(),
                    caught_up.epoch
                )));
            }
            if rivals >= epoch {
                // Another owner fenced with the same epoch just before this one: this fence is
                // the last, so fence again above both.
                floor = rivals;
                continue;
            }
            *self.fence.lock() = Some(Fence {
                epoch,
                expected_start: offsets.end,
            });
            tracing::debug!(
                topic = self.log.topic(),
                partition = self.log.partition(),
                epoch,
                "fenced the changelog"
            );
            return Ok(epoch);
        }
        Err(Error::Fenced(format!(
            "changelog {}/{}: other writers kept fencing it while this one did",
            self.log.topic(),
            self.log.partition()
        )))
    }

    /// Replays what another writer committed before the fence, then the fence itself, whose
    /// marker is at `marker`. A log whose end offset lags its last acknowledged append (a
    /// broker's high watermark) is read again until the replay reaches the marker.
    fn catch_up_to(&self, marker: u64) -> Result<RestoreOutcome> {
        let mut attempts = 0;
        loop {
            let (caught_up, _) = restore_fenced(
                self.store.as_ref(),
                self.log.as_ref(),
                &self.checkpoint,
                self.config.restore_batch_records,
                &mut NoopRestoreListener,
            )?;
            attempts += 1;
            if caught_up.checkpoint.is_some_and(|at| at >= marker) || attempts >= CATCH_UP_ATTEMPTS
            {
                return Ok(caught_up);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Appends a fence commit of `epoch`: [`EPOCH_KEY`] and the keys the restore ignored as a
    /// fenced writer's. Returns its offsets and the highest epoch of another writer's fence
    /// between the last restore and this one (0 for none).
    fn append_fence(&self, epoch: u64, nonce: u64) -> Result<(Range<u64>, u64)> {
        let from = match self.checkpoint.get(self.log.topic(), self.log.partition()) {
            Some(offset) => offset + 1,
            None => self.log.start_offset()?,
        };
        self.log.set_writer_epoch(epoch)?;
        let mut ops = vec![BatchOp::Put {
            key: EPOCH_KEY.to_vec(),
            value: fence_value(epoch, nonce).to_vec(),
        }];
        let rewritten = std::mem::take(&mut *self.fenced_keys.lock());
        for key in rewritten {
            ops.push(match self.store.get(&key)? {
                Some(value) => BatchOp::Put { key, value },
                None => BatchOp::Delete { key },
            });
        }
        let offsets = self.log.append_framed(&ops, Framing::Commit)?;
        self.log.sync()?;
        let mut rivals = 0;
        let mut at = from;
        while at < offsets.start {
            let records = self
                .log
                .read(at, self.config.restore_batch_records.max(1))?;
            let Some(last) = records.last() else { break };
            at = last.offset + 1;
            rivals = records
                .iter()
                .filter(|record| record.offset < offsets.start && record.op.key() == EPOCH_KEY)
                .filter_map(|record| record.op.value().and_then(epoch_of))
                .fold(rivals, u64::max);
        }
        Ok((offsets, rivals))
    }

    /// The writer epoch [`fence`](LoggedStore::fence) chose, once it ran.
    pub fn writer_epoch(&self) -> Option<u64> {
        self.fence.lock().map(|fence| fence.epoch)
    }

    /// After a fenced writer's append got `offsets` for `count` records: when anything else
    /// was appended since this writer's last append, checks that no newer writer did. A newer
    /// writer's records mean this one is fenced: the append is ignored by every reader, so it
    /// must not reach the store either, and the store closes. Returns the keys of records
    /// older, fenced writers appended meanwhile (empty without a fence or another writer).
    /// Up to `gap` offsets before `offsets` may be taken by something other than a record (a
    /// transaction's control record) without a read: a newer writer's fence takes at least
    /// two.
    fn check_not_fenced(
        &self,
        offsets: &Range<u64>,
        count: usize,
        gap: u64,
    ) -> Result<BTreeSet<Vec<u8>>> {
        let mut fence = self.fence.lock();
        let Some(Fence {
            epoch,
            expected_start,
        }) = *fence
        else {
            return Ok(BTreeSet::new());
        };
        let consecutive = usize::try_from(offsets.end - offsets.start).ok() == Some(count);
        let mut stale = BTreeSet::new();
        let in_place = (expected_start..=expected_start + gap).contains(&offsets.start);
        if in_place && consecutive {
            *fence = Some(Fence {
                epoch,
                expected_start: offsets.end,
            });
            return Ok(stale);
        }
        let mut at = expected_start;
        let mut newer = None;
        while at < offsets.end && newer.is_none() {
            let records = self
                .log
                .read(at, self.config.restore_batch_records.max(1))?;
            let Some(last) = records.last() else { break };
            at = last.offset + 1;
            for record in records.iter().filter(|record| record.offset < offsets.end) {
                if record.epoch > epoch {
                    newer = Some(record.epoch);
                } else if record.epoch < epoch && record.kind != RecordKind::CommitMarker {
                    stale.insert(record.op.key().to_vec());
                }
            }
        }
        if let Some(newer) = newer {
            drop(fence);
            self.closed.store(true, Ordering::Release);
            return Err(Error::Fenced(format!(
                "changelog {}/{} was taken over by a writer of epoch {newer}; this writer's \
                 epoch is {epoch}",
                self.log.topic(),
                self.log.partition()
            )));
        }
        *fence = Some(Fence {
            epoch,
            expected_start: offsets.end,
        });
        Ok(stale)
    }

    /// Sets a savepoint in the write buffer, replacing the one set before:
    /// [`roll_back_to_savepoint`](LoggedStore::roll_back_to_savepoint) then undoes the writes
    /// made after it, and nothing else. For an owner that wraps each unit of work (a record)
    /// in a savepoint, so that one failing unit is undone alone, without going back to the
    /// last commit. Until the next commit each write also records what it replaced in the
    /// buffer, in buffers reused from one savepoint to the next; a commit removes the
    /// savepoint.
    pub fn savepoint(&self) {
        self.buffer.write().savepoint();
    }

    /// Undoes every write made since the last [`savepoint`](LoggedStore::savepoint): reads
    /// see the buffer as it was then. The savepoint stays set. Returns whether anything was
    /// undone.
    ///
    /// # Errors
    /// `Closed`; `InvalidArgument` when no savepoint is set, or a commit came after it (the
    /// writes between may already be in the log and the store): only
    /// [`discard_uncommitted`](LoggedStore::discard_uncommitted), back to the last commit,
    /// is left.
    pub fn roll_back_to_savepoint(&self) -> Result<bool> {
        self.check_open()?;
        self.buffer.write().roll_back().ok_or_else(|| {
            Error::invalid(format!(
                "changelog {}/{}: no savepoint to roll back to (none was set, or a commit \
                 came after it)",
                self.log.topic(),
                self.log.partition()
            ))
        })
    }

    /// Drops every write buffered since the last commit, leaving the store open: reads see the
    /// last committed state again. For an owner that wrote part of a unit of work it then
    /// gave up (a record whose processing failed half-way) and goes on from its last commit.
    ///
    /// # Errors
    /// `Closed`; `InvalidArgument` when the last commit failed: the store may then hold part
    /// of that commit, which the buffer alone still covers, so only a reopen (which restores
    /// from the changelog) brings back the committed state.
    pub fn discard_uncommitted(&self) -> Result<()> {
        let _no_commit_in_flight = self.commit_lock.lock();
        self.check_open()?;
        self.check_nothing_prepared()?;
        if self.commit_failed.load(Ordering::Acquire) {
            return Err(Error::invalid(format!(
                "the writes buffered for changelog {}/{} cannot be dropped: the last commit \
                 failed and the store may hold part of it; reopen the store to restore it",
                self.log.topic(),
                self.log.partition()
            )));
        }
        *self.buffer.write() = WriteBuffer::default();
        Ok(())
    }

    /// Closes without committing: writes buffered since the last commit, and a prepared
    /// commit not applied, are dropped and nothing more reaches the changelog. For a task whose partition was lost to another
    /// instance, which may already be writing to the same changelog partition.
    ///
    /// # Errors
    /// The wrapped store's close error.
    pub fn abandon(&self) -> Result<()> {
        let _no_commit_in_flight = self.commit_lock.lock();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        *self.prepared.lock() = None;
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
        if self.config.commit_policy == CommitPolicy::Explicit
            || buffer.active_bytes() < self.config.commit_bytes
            || buffer.active_bytes() == 0
        {
            return Ok(buffer);
        }
        drop(buffer);
        self.commit()?;
        Ok(self.buffer.write())
    }

    /// `InvalidArgument` while a commit appended in a transaction waits for
    /// [`apply_prepared`](LoggedStore::apply_prepared) (or a reopen, if it aborted).
    fn check_nothing_prepared(&self) -> Result<()> {
        if self.prepared.lock().is_some() {
            return Err(Error::invalid(format!(
                "changelog {}/{}: a commit prepared in a transaction is not applied yet",
                self.log.topic(),
                self.log.partition()
            )));
        }
        Ok(())
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
