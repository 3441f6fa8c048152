//! Snapshot bootstrap and snapshot taking for [`LoggedStore`].
//!
//! A snapshot is trusted exactly as a local checkpoint is, and a little less blindly: restore
//! resumes after a checkpoint only when the log still covers it, and a snapshot is loaded only
//! when
//! 1. its position is inside the log: below the log's end (a position at or past the end is
//!    from another log, or from a log that was deleted and recreated, or that lost its tail
//!    with an unclean broker election), and no further than one before the log's start (the
//!    records after it must still be there to replay);
//! 2. the record at its position, if compaction left it, is a commit marker of the epoch the
//!    snapshot recorded (a different record there means the offset now names another commit,
//!    of another writer or of a recreated log);
//! 3. every checksum holds (see [`crate::snapshot`]).
//!
//! A snapshot failing any of these is skipped with a warning and the next older one is
//! tried; with none left, the open replays the whole changelog. A snapshot only ever holds
//! commits that its writer applied, and a fenced writer applies no commit that a newer writer
//! fenced (its commit fails first), so the state at a snapshot's position is the state any
//! reader of the log reaches there; the tail after it is then replayed with the fencing rules
//! of any restore, starting from the epoch in the snapshot's [`EPOCH_KEY`](crate::EPOCH_KEY),
//! exactly as after a checkpoint.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use store_api::{Error, KeyValueStore, Result};

use super::LoggedStore;
use crate::checkpoint::Checkpoint;
use crate::record::{Changelog, RecordKind};
use crate::restore::{NoopRestoreListener, RestoreListener, is_empty};
use crate::{LoggedStoreConfig, SnapshotInfo, SnapshotStore};

/// What a snapshot took under the commit lock, to upload after it.
enum Taken {
    /// An export of every pair (see [`crate::export_snapshot`]).
    Export(Vec<bytes::Bytes>),
    /// The store's own files: their format, the checkpoint directory, the files in it.
    Files(String, std::path::PathBuf, Vec<std::path::PathBuf>),
}

/// A logged store's snapshot store, what its open loaded, and its commits since the last
/// snapshot.
pub(super) struct Snapshots {
    store: Option<Arc<SnapshotStore>>,
    loaded: Option<SnapshotInfo>,
    commits: AtomicU64,
    /// When the last snapshot was taken, or the store opened.
    last: Mutex<Instant>,
}

impl Snapshots {
    pub(super) fn new(store: Option<Arc<SnapshotStore>>, loaded: Option<SnapshotInfo>) -> Self {
        Snapshots {
            store,
            loaded,
            commits: AtomicU64::new(0),
            last: Mutex::new(Instant::now()),
        }
    }
}

/// Loads `store` from the newest usable snapshot when the local store would otherwise be
/// replayed from the log's start: no checkpoint entry, one the log no longer covers, or an
/// empty store. Returns the snapshot loaded, after which `checkpoint` names its position.
pub(super) fn bootstrap(
    store: &dyn KeyValueStore,
    log: &dyn Changelog,
    checkpoint: &Checkpoint,
    snapshots: &SnapshotStore,
) -> Result<Option<SnapshotInfo>> {
    let (topic, partition) = (log.topic(), log.partition());
    let start = log.start_offset()?;
    let end = log.end_offset()?;
    let held = checkpoint.get(topic, partition);
    let covered = held.filter(|&offset| offset.saturating_add(1) >= start && offset < end);
    if covered.is_some() && !is_empty(store)? {
        return Ok(None);
    }
    let candidates = match snapshots.list(topic, partition) {
        Ok(candidates) => candidates,
        Err(err) => {
            tracing::warn!(topic, partition, error = %err, "cannot list snapshots; replaying the changelog");
            return Ok(None);
        }
    };
    let tried = candidates.len();
    for info in candidates {
        let skip = |why: &str| {
            tracing::warn!(
                topic,
                partition,
                offset = info.offset,
                epoch = info.epoch,
                log_start = start,
                log_end = end,
                path = %info.path,
                "snapshot not used: {why}"
            );
        };
        if info.offset >= end {
            skip("its position is at or past the changelog's end");
            continue;
        }
        if info.offset.saturating_add(1) < start {
            skip("the changelog no longer holds the records after it");
            continue;
        }
        if let Some(record) = log.read(info.offset, 1)?.first()
            && record.offset == info.offset
            && (record.kind != RecordKind::CommitMarker || record.epoch != info.epoch)
        {
            skip("the changelog record at its position is not its commit marker");
            continue;
        }
        if info.is_files() {
            let Some(checkpoints) = store.checkpoints() else {
                skip("it holds an engine's files and this store takes none");
                continue;
            };
            // The checkpoint goes first: a crash while the files replace the store's leaves a
            // store no checkpoint vouches for, which the next open wipes. The files are
            // checked before they replace anything.
            checkpoint.remove(topic, partition)?;
            match snapshots.restore_files(&info, checkpoints) {
                Ok(true) => {}
                Ok(false) => {
                    skip("it is missing (deleted meanwhile)");
                    continue;
                }
                Err(err) => {
                    skip(&format!("it cannot be restored: {err}"));
                    continue;
                }
            }
            return loaded(store, checkpoint, info, None);
        }
        let snapshot = match snapshots.read(&info) {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => {
                skip("it is missing (deleted meanwhile)");
                continue;
            }
            Err(err) => {
                skip(&format!("it cannot be read: {err}"));
                continue;
            }
        };
        // As a full restore does: the checkpoint goes first, so a crash while loading leaves
        // a store no checkpoint vouches for, which the next open wipes.
        checkpoint.remove(topic, partition)?;
        store.delete_range(Bound::Unbounded, Bound::Unbounded)?;
        let pairs = snapshot.load_into(store)?;
        return loaded(store, checkpoint, info, Some(pairs));
    }
    if tried > 0 {
        tracing::warn!(
            topic,
            partition,
            snapshots = tried,
            "no snapshot usable; replaying the whole changelog"
        );
    }
    Ok(None)
}

/// Makes `store`, just loaded from `info`, durable and names its position in `checkpoint`.
fn loaded(
    store: &dyn KeyValueStore,
    checkpoint: &Checkpoint,
    info: SnapshotInfo,
    pairs: Option<u64>,
) -> Result<Option<SnapshotInfo>> {
    let (topic, partition) = (info.topic.as_str(), info.partition);
    store.flush()?;
    if store.capabilities().persistent {
        checkpoint.set(topic, partition, info.offset)?;
    } else {
        checkpoint.advance(topic, partition, info.offset)?;
    }
    tracing::info!(
        topic,
        partition,
        offset = info.offset,
        epoch = info.epoch,
        pairs,
        files = info.is_files(),
        path = %info.path,
        "loaded the store from a snapshot; replaying the changelog after it"
    );
    Ok(Some(info))
}

impl LoggedStore {
    /// As [`open_with_listener`](LoggedStore::open_with_listener), with snapshots in
    /// `snapshots`: when the local store has no checkpoint the log covers (a new machine, an
    /// empty state directory) or is empty, the newest usable snapshot of the changelog
    /// partition is loaded first and only the changelog after its position is replayed
    /// (the listener and [`restored`](LoggedStore::restored) see that tail). A snapshot that is
    /// missing, corrupt or does not match the log is skipped with a warning, for the next
    /// older one or, with none left, a replay of the whole changelog. The store can then
    /// [`snapshot`](LoggedStore::snapshot) itself.
    ///
    /// # Errors
    /// As [`open`](LoggedStore::open); an object store that cannot be listed or read is not
    /// an error (the changelog is replayed instead).
    pub fn open_with_snapshots(
        store: Arc<dyn KeyValueStore>,
        log: Arc<dyn Changelog>,
        checkpoint: Arc<Checkpoint>,
        config: LoggedStoreConfig,
        snapshots: Arc<SnapshotStore>,
        listener: &mut dyn RestoreListener,
    ) -> Result<LoggedStore> {
        Self::open_inner(store, log, checkpoint, config, Some(snapshots), listener)
    }

    /// As [`open_with_snapshots`](LoggedStore::open_with_snapshots), without a listener.
    ///
    /// # Errors
    /// As [`open`](LoggedStore::open).
    pub fn open_snapshotted(
        store: Arc<dyn KeyValueStore>,
        log: Arc<dyn Changelog>,
        checkpoint: Arc<Checkpoint>,
        config: LoggedStoreConfig,
        snapshots: Arc<SnapshotStore>,
    ) -> Result<LoggedStore> {
        Self::open_with_snapshots(
            store,
            log,
            checkpoint,
            config,
            snapshots,
            &mut NoopRestoreListener,
        )
    }

    /// The snapshot the open loaded the store from, if any.
    pub fn bootstrapped_from(&self) -> Option<&SnapshotInfo> {
        self.snapshots.loaded.as_ref()
    }

    /// Writes a snapshot of the committed state: what the store holds after its last commit
    /// (writes buffered since are not in it), at the position of that commit's marker, then
    /// deletes all but the newest `keep` snapshots of the partition. A store that offers
    /// [`checkpoints`](KeyValueStore::checkpoints) is snapshotted as its own files, any other
    /// as an export of its pairs. Commits wait while the store is checkpointed or exported
    /// (reads and writes to the buffer do not); the upload runs after.
    /// Returns `None` when nothing was committed yet.
    ///
    /// # Errors
    /// `InvalidArgument` without a snapshot store, while a prepared commit is not applied,
    /// or after a failed commit (the store may hold part of it); `Fenced` when a newer writer
    /// appended since this writer's last commit; `Closed`; or an error of the store's scan,
    /// the log or the object store.
    pub fn snapshot(&self) -> Result<Option<SnapshotInfo>> {
        let Some(snapshot_store) = self.snapshots.store.as_ref() else {
            return Err(Error::invalid(
                "this logged store was opened without a snapshot store",
            ));
        };
        self.check_open()?;
        let (topic, partition) = (self.log.topic(), self.log.partition());
        let (offset, epoch, body) = {
            let _no_commit_in_flight = self.commit_lock.lock();
            self.check_nothing_prepared()?;
            if self.commit_failed.load(Ordering::Acquire) {
                return Err(Error::invalid(format!(
                    "changelog {topic}/{partition}: the last commit failed and the store may \
                     hold part of it; no snapshot is taken of it"
                )));
            }
            // With no commit in flight, the live entry names exactly what the store holds.
            let Some(offset) = self.checkpoint.get(topic, partition) else {
                return Ok(None);
            };
            self.check_still_owner()?;
            let epoch = self.marker_epoch(offset)?;
            let taken = match self.store.checkpoints() {
                Some(checkpoints) => {
                    let (dir, files) = checkpoints.create()?;
                    Taken::Files(checkpoints.format().to_string(), dir, files)
                }
                None => Taken::Export(crate::export_snapshot(
                    topic,
                    partition,
                    offset,
                    epoch,
                    self.store.as_ref(),
                )?),
            };
            (offset, epoch, taken)
        };
        self.snapshots.commits.store(0, Ordering::Relaxed);
        *self.snapshots.last.lock() = Instant::now();
        match body {
            Taken::Export(body) => snapshot_store.upload(topic, partition, offset, epoch, body),
            Taken::Files(format, dir, files) => {
                let uploaded = snapshot_store
                    .upload_files(topic, partition, offset, epoch, &format, (&dir, &files));
                if let Err(err) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %err, "cannot remove a checkpoint taken for a snapshot");
                }
                uploaded
            }
        }
        .map(Some)
    }

    /// After a commit: a snapshot when `every_commits` commits were made, or `every_ms`
    /// milliseconds passed, since the last one. A failed snapshot is logged, not returned: the
    /// commit holds.
    pub(super) fn snapshot_if_due(&self) -> Result<()> {
        let Some(snapshot_store) = self.snapshots.store.as_ref() else {
            return Ok(());
        };
        let (every, every_ms) = (snapshot_store.every_commits(), snapshot_store.every_ms());
        if every == 0 && every_ms == 0 {
            return Ok(());
        }
        let commits = self.snapshots.commits.fetch_add(1, Ordering::Relaxed) + 1;
        let by_count = every > 0 && commits >= every;
        let by_time =
            every_ms > 0 && self.snapshots.last.lock().elapsed() >= Duration::from_millis(every_ms);
        if !by_count && !by_time {
            return Ok(());
        }
        if let Err(err) = self.snapshot() {
            tracing::warn!(
                topic = self.log.topic(),
                partition = self.log.partition(),
                error = %err,
                "periodic snapshot failed; the commit holds"
            );
        }
        Ok(())
    }

    /// The epoch of the commit marker at `offset`: read from the log, or, when compaction
    /// removed it, the epoch this writer stamps.
    fn marker_epoch(&self, offset: u64) -> Result<u64> {
        let records = self.log.read(offset, 1)?;
        match records.first() {
            Some(record) if record.offset == offset => Ok(record.epoch),
            _ => Ok(self.writer_epoch().unwrap_or(self.restored.epoch)),
        }
    }

    /// `Fenced` when a writer of a newer epoch appended since this fenced writer's last
    /// append; a snapshot of this store would then hold state readers no longer reach.
    fn check_still_owner(&self) -> Result<()> {
        let Some(fence) = *self.fence.lock() else {
            return Ok(());
        };
        let end = self.log.end_offset()?;
        let mut at = fence.expected_start;
        while at < end {
            let records = self
                .log
                .read(at, self.config.restore_batch_records.max(1))?;
            let Some(last) = records.last() else { break };
            at = last.offset + 1;
            if let Some(newer) = records.iter().find(|record| record.epoch > fence.epoch) {
                return Err(Error::Fenced(format!(
                    "changelog {}/{} was taken over by a writer of epoch {}; no snapshot is \
                     taken by the writer of epoch {}",
                    self.log.topic(),
                    self.log.partition(),
                    newer.epoch,
                    fence.epoch
                )));
            }
        }
        Ok(())
    }
}
