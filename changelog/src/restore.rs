//! Restore: bring a store up to the end of its changelog.
//!
//! With a checkpoint the log still covers, only the records after it are replayed. Without
//! one, or with one the log no longer covers (retention removed what follows it, or the log
//! lost its tail), the store is wiped and the whole log is replayed: the log is the truth, and
//! a store holding data the checkpoint does not vouch for cannot be trusted. An empty store
//! under a checkpoint that claims records also gets the whole log: its directory was deleted
//! or replaced, and the checkpoint no longer describes it.
//!
//! Wiping is the store's [`delete_range`](KeyValueStore::delete_range) over every key (one
//! range tombstone on RocksDB, batches of deletes elsewhere) rather than deleting and
//! recreating the store directory: it works for any [`KeyValueStore`], including one the
//! caller opened with options this crate never sees, and it keeps the store's files and
//! locks in place.
//!
//! # Bulk loading
//! A full restore (the store wiped, the log read from its start) goes through the store's
//! [`bulk_loader`](KeyValueStore::bulk_loader) when it offers one (RocksDB builds and ingests
//! SST files), and through `WriteBatch`es otherwise. Both receive exactly the same updates
//! in the same order: those the [`CommitReader`] releases, so fenced writers' records, torn
//! commits and markers are left out the same way, and [`EPOCH_KEY`] is restored as any other
//! key. A restore from a checkpoint always replays batches: the loader is for filling an
//! empty store. A bulk load is all or nothing for the checkpoint, not for the store: the
//! checkpoint entry is removed before the wipe and written only after the loader finished
//! and the store flushed, so a crash halfway leaves a store with no checkpoint, which the
//! next restore wipes and loads again.

use std::collections::BTreeSet;
use std::ops::{Bound, ControlFlow};
use std::sync::mpsc::{self, SyncSender};

use store_api::{BatchOp, BulkLoader, Error, KeyValueStore, Result};

use crate::checkpoint::Checkpoint;
use crate::commits::{CommitReader, Released};
use crate::record::{Changelog, EPOCH_KEY};

/// Records per restore `WriteBatch` unless configured otherwise: 1000, as many as Kafka
/// Streams' restore consumer polls at a time (`max.poll.records`). Replaying 1M records of 174
/// bytes in batches of 10 000 was no faster into memory, RocksDB or redb (within the run-to-run
/// noise of this 2-core machine), and sled's resident memory peaked at 2.7 GiB, against
/// 0.4 GiB in batches of 1000.
pub const DEFAULT_RESTORE_BATCH_RECORDS: usize = 1000;

/// Progress callbacks of a restore, as in Kafka Streams' `StateRestoreListener`. Every method
/// has an empty default body.
pub trait RestoreListener {
    /// Restore of (`topic`, `partition`) begins: records from `start` up to, not including,
    /// `end` will be replayed.
    fn on_start(&mut self, topic: &str, partition: u32, start: u64, end: u64) {
        let _ = (topic, partition, start, end);
    }

    /// A batch of `records` records, ending with offset `batch_end_offset`, was applied.
    fn on_batch(&mut self, topic: &str, partition: u32, batch_end_offset: u64, records: usize) {
        let _ = (topic, partition, batch_end_offset, records);
    }

    /// Restore finished after replaying `total` records.
    fn on_end(&mut self, topic: &str, partition: u32, total: u64) {
        let _ = (topic, partition, total);
    }
}

/// A listener that ignores every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopRestoreListener;

impl RestoreListener for NoopRestoreListener {}

/// What a restore did (`Default`: nothing restored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RestoreOutcome {
    /// The whole log was replayed into a wiped store: no checkpoint vouched for its content
    /// (none, one the log no longer covers, or one over an empty store).
    pub wiped: bool,
    /// The first offset replayed from.
    pub from: u64,
    /// The number of updates replayed (commit markers are not counted).
    pub records: u64,
    /// The offset of the last commit end the store now holds (what the checkpoint says), or
    /// `None` when it holds none (an empty log, or one holding only a torn commit).
    pub checkpoint: Option<u64>,
    /// The highest writer epoch in the log up to where the restore stopped (see "Fencing" in
    /// [`Changelog`]); 0 when no writer stamped one.
    pub epoch: u64,
    /// The distinct keys of the records ignored because a newer writer had fenced theirs.
    pub fenced: u64,
    /// The updates went through the store's [`bulk_loader`](KeyValueStore::bulk_loader)
    /// rather than `WriteBatch`es (a full restore into a store that offers one).
    pub bulk_loaded: bool,
}

/// Replays `log` into `store` from `checkpoint`'s entry for the log, in `WriteBatch`es of
/// `batch_records` records, up to the last record that ends a commit (see [`Changelog`]),
/// then flushes the store and checkpoints that record.
///
/// # Errors
/// Any error of the log, the store or the checkpoint file. A failed restore leaves the
/// checkpoint no further than the records the store holds, so running it again is safe.
pub fn restore(
    store: &dyn KeyValueStore,
    log: &dyn Changelog,
    checkpoint: &Checkpoint,
    batch_records: usize,
    listener: &mut dyn RestoreListener,
) -> Result<RestoreOutcome> {
    restore_fenced(store, log, checkpoint, batch_records, listener).map(|(outcome, _)| outcome)
}

/// The writer epoch a store's content was restored up to, as [`EPOCH_KEY`] holds it.
///
/// # Errors
/// A store error, or `Corruption` for a value that holds no epoch.
pub fn stored_epoch(store: &dyn KeyValueStore) -> Result<u64> {
    match store.get(EPOCH_KEY)? {
        None => Ok(0),
        Some(bytes) => epoch_of(&bytes).ok_or_else(|| {
            Error::Corruption(format!(
                "the writer epoch in the store has {} bytes, not 16",
                bytes.len()
            ))
        }),
    }
}

/// The epoch of a value of [`EPOCH_KEY`]: its first 8 bytes, big-endian, of 16.
pub(crate) fn epoch_of(value: &[u8]) -> Option<u64> {
    let bytes: [u8; 16] = value.try_into().ok()?;
    let mut epoch = [0; 8];
    epoch.copy_from_slice(&bytes[..8]);
    Some(u64::from_be_bytes(epoch))
}

/// As [`restore`], also returning the keys of the records it ignored as a fenced writer's.
pub(crate) fn restore_fenced(
    store: &dyn KeyValueStore,
    log: &dyn Changelog,
    checkpoint: &Checkpoint,
    batch_records: usize,
    listener: &mut dyn RestoreListener,
) -> Result<(RestoreOutcome, BTreeSet<Vec<u8>>)> {
    let (topic, partition) = (log.topic(), log.partition());
    let start = log.start_offset()?;
    let end = log.end_offset()?;
    let held = checkpoint.get(topic, partition);
    let covered = held.filter(|&offset| offset.saturating_add(1) >= start && offset < end);
    // An empty store under a checkpoint that vouches for records was deleted or replaced
    // (a store directory removed by hand, a checkpoint copied to a new machine). Replaying
    // everything into it is always right, and costs nothing extra when the store really is
    // empty because the log holds nothing before the checkpoint.
    let resume = match covered {
        Some(offset) if offset >= start && is_empty(store)? => None,
        other => other,
    };
    let from = match resume {
        Some(offset) => offset + 1,
        None => {
            tracing::info!(
                topic,
                partition,
                ?held,
                start,
                end,
                "wiping store before a full restore"
            );
            checkpoint.remove(topic, partition)?;
            store.delete_range(Bound::Unbounded, Bound::Unbounded)?;
            start
        }
    };
    // Only into a wiped store: a loader fills an empty store from the log's start.
    let sink = match resume {
        None => match store.bulk_loader()? {
            Some(loader) => Sink::Bulk(loader),
            None => Sink::Batches(store),
        },
        Some(_) => Sink::Batches(store),
    };
    let mut reader = CommitReader::with_epoch(log, from, stored_epoch(store)?);
    // Only records up to the last commit end are replayed: a commit torn at the tail is
    // left out whole.
    let target = reader.catch_up(end, batch_records.max(1))?;
    let bulk_loaded = matches!(sink, Sink::Bulk(_));
    if bulk_loaded {
        tracing::info!(
            topic,
            partition,
            "restoring through the store's bulk loader"
        );
    }
    listener.on_start(topic, partition, from, target.map_or(from, |t| t + 1));
    let records = replay(
        sink,
        log,
        &mut reader,
        target,
        batch_records.max(1),
        listener,
    )?;
    store.flush()?;
    // The last commit end applied, not the target: a log that answered short never gets a
    // checkpoint vouching for records the store did not receive.
    let last = reader.committed().or(resume);
    match last {
        Some(last) if store.capabilities().persistent => checkpoint.set(topic, partition, last)?,
        // A store that does not persist is not named in the file (see `LoggedStore`).
        Some(last) => checkpoint.advance(topic, partition, last)?,
        None => {}
    }
    listener.on_end(topic, partition, records);
    let fenced = std::mem::take(&mut reader.fenced);
    if !fenced.is_empty() {
        tracing::warn!(
            topic,
            partition,
            keys = fenced.len(),
            "ignored records that a fenced writer appended"
        );
    }
    let outcome = RestoreOutcome {
        wiped: resume.is_none(),
        from,
        records,
        checkpoint: last,
        epoch: reader.epoch(),
        fenced: fenced.len() as u64,
        bulk_loaded,
    };
    Ok((outcome, fenced))
}

/// Where a restore applies the updates it reads.
enum Sink<'s> {
    /// One `WriteBatch` per batch read.
    Batches(&'s dyn KeyValueStore),
    /// The store's bulk loader, finished after the last batch.
    Bulk(Box<dyn BulkLoader + 's>),
}

impl Sink<'_> {
    fn apply(&mut self, ops: Vec<BatchOp>) -> Result<()> {
        match self {
            Sink::Batches(store) => store.write(ops.into_iter().collect()),
            Sink::Bulk(loader) => loader.load(ops),
        }
    }

    fn finish(self) -> Result<()> {
        match self {
            Sink::Batches(_) => Ok(()),
            Sink::Bulk(loader) => loader.finish(),
        }
    }
}

/// Applies the updates the reader releases up to `target` to `sink`, batch by batch, and
/// returns how many were applied. A commit larger than a batch is applied in several store
/// batches; the checkpoint is only written once the restore reached a commit end.
///
/// Reading and applying overlap: a thread reads and decodes the next batches from the log
/// (at most [`READ_AHEAD`] ahead) while this one applies the current one to the store, so a
/// restore takes about as long as the slower of the two rather than their sum. On an error
/// of either side nothing after it is applied.
fn replay(
    mut sink: Sink<'_>,
    log: &dyn Changelog,
    reader: &mut CommitReader<'_>,
    target: Option<u64>,
    batch_records: usize,
    listener: &mut dyn RestoreListener,
) -> Result<u64> {
    let Some(target) = target else {
        return sink.finish().map(|()| 0);
    };
    std::thread::scope(|scope| {
        let (batches, received) = mpsc::sync_channel(READ_AHEAD);
        let reading = scope.spawn(move || read_ahead(reader, target, batch_records, &batches));
        let mut total = 0u64;
        let mut outcome = Ok(());
        for released in &received {
            let released: Released = match released {
                Ok(released) => released,
                Err(err) => {
                    outcome = Err(err);
                    break;
                }
            };
            let count = released.ops.len();
            if count > 0
                && let Err(err) = sink.apply(released.ops)
            {
                outcome = Err(err);
                break;
            }
            total += count as u64;
            if let Some(last_read) = released.last_read {
                listener.on_batch(log.topic(), log.partition(), last_read, count);
            }
        }
        // A reader blocked on a full channel sees it closed and stops.
        drop(received);
        if let Err(panic) = reading.join() {
            std::panic::resume_unwind(panic);
        }
        // A failed load is dropped unfinished: the checkpoint does not vouch for it.
        outcome?;
        sink.finish().map(|()| total)
    })
}

/// Batches a restore keeps read ahead of the store: two, so the reader can decode one while
/// the store applies another and a third waits.
const READ_AHEAD: usize = 2;

/// The reading side of [`replay`]: sends each batch the reader releases up to `target`, or
/// the read's error, and stops when the receiver has gone.
fn read_ahead(
    reader: &mut CommitReader<'_>,
    target: u64,
    batch_records: usize,
    batches: &SyncSender<Result<Released>>,
) {
    while reader.position() <= target {
        let released = match reader.read(batch_records) {
            Ok(released) => released,
            Err(err) => {
                let _receiver_gone = batches.send(Err(err));
                return;
            }
        };
        if released.last_read.is_none() {
            // Nothing at or below the target: the log answered short, or its records up to
            // the target were compacted away meanwhile (then the reader moved past it).
            if reader.position() <= target {
                return;
            }
            continue;
        }
        if batches.send(Ok(released)).is_err() {
            return;
        }
    }
}

pub(crate) fn is_empty(store: &dyn KeyValueStore) -> Result<bool> {
    let mut empty = true;
    store.scan(Bound::Unbounded, Bound::Unbounded, false, &mut |_, _| {
        empty = false;
        ControlFlow::Break(())
    })?;
    Ok(empty)
}
