//! Restore from a changelog: a file log of `load_random`'s records, replayed into a fresh store
//! of any backend, as a task restores its stores after a move.
//!
//! [`RestoreLog`] writes the log once; [`replay`] times `statestore_changelog::restore` into a
//! fresh store with no checkpoint (batches of [`batch`] records, then one flush and the
//! checkpoint write), and [`raw_scan`] times a plain read of the same log, the floor of any
//! replay. Not timed: writing the log, opening the fresh store.

use std::time::{Duration, Instant};

use statestore_changelog::{
    Changelog, Checkpoint, FileLog, FileLogConfig, NoopRestoreListener, restore,
};
use store_api::{BatchOp, Error, Result};
use tempfile::TempDir;

use crate::{Driver, Fixture, Scale, Target, Workload};

const TOPIC: &str = "bench-restore-changelog";

/// Records per restore batch and per raw read: `STATESTORE_RESTORE_BATCH_RECORDS`, else the
/// changelog's default (1000, as `load_random`'s batches).
pub fn batch() -> usize {
    std::env::var("STATESTORE_RESTORE_BATCH_RECORDS")
        .ok()
        .and_then(|records| records.parse().ok())
        .filter(|records| *records > 0)
        .unwrap_or(statestore_changelog::DEFAULT_RESTORE_BATCH_RECORDS)
}

/// A file changelog of every record of `load_random` at a scale, in its order, in a
/// temporary directory removed on drop.
#[derive(Debug)]
pub struct RestoreLog {
    // Declared before `_dir`, so the log closes before its directory is removed.
    log: FileLog,
    _dir: TempDir,
}

impl RestoreLog {
    /// Writes the log of `scale`'s `load_random` records, one append per batch, and syncs it.
    ///
    /// # Errors
    /// Any failure of the temporary directory or of the log.
    pub fn write(scale: Scale) -> Result<RestoreLog> {
        let dir = tempfile::tempdir().map_err(|err| Error::io("creating a temp dir", err))?;
        let log = FileLog::open(dir.path(), TOPIC, 0, FileLogConfig::default())?;
        let mut driver = Driver::new(Workload::LoadRandom, scale);
        let appender = Appender(&log);
        while driver.step(&appender)?.is_some() {}
        log.sync()?;
        Ok(RestoreLog { log, _dir: dir })
    }

    /// The log.
    pub fn log(&self) -> &FileLog {
        &self.log
    }

    /// The records it holds.
    ///
    /// # Errors
    /// Any failure of the log.
    pub fn records(&self) -> Result<u64> {
        Ok(self.log.end_offset()? - self.log.start_offset()?)
    }
}

/// Appends what a workload writes to the log instead of storing it.
struct Appender<'a>(&'a FileLog);

impl Target for Appender<'_> {
    fn get(&self, _key: &[u8]) -> Result<Option<usize>> {
        Ok(None)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_batch(&[(key, value)])
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
        let ops: Vec<BatchOp> = entries
            .iter()
            .map(|(key, value)| BatchOp::Put {
                key: key.to_vec(),
                value: value.to_vec(),
            })
            .collect();
        self.0.append(&ops).map(drop)
    }

    fn scan(&self, _from: &[u8], _limit: usize) -> Result<usize> {
        Ok(0)
    }

    fn flush(&self) -> Result<()> {
        self.0.sync()
    }
}

/// Reads `log` from start to end in reads of `batch` records and drops them; the time taken.
///
/// # Errors
/// Any failure of the log.
pub fn raw_scan(log: &RestoreLog, batch: usize) -> Result<Duration> {
    let log = log.log();
    let start = Instant::now();
    let (mut from, end) = (log.start_offset()?, log.end_offset()?);
    while from < end {
        let records = log.read(from, batch.max(1))?;
        let Some(last) = records.last() else { break };
        from = last.offset + 1;
        std::hint::black_box(records);
    }
    Ok(start.elapsed())
}

/// Restores a fresh store of `backend` (a registered name) from `log` in batches of `batch`
/// records; the time the restore took, its flush and checkpoint included.
///
/// # Errors
/// Any failure of the store or the log, and [`Error::Corruption`] when the restore did not
/// replay every record of the log.
pub fn replay(backend: &str, log: &RestoreLog, batch: usize) -> Result<Duration> {
    replay_into(&Fixture::open(backend)?, log, batch)
}

/// As [`replay`], into the fresh store of `fixture` (opened with options of the caller's
/// choice, such as RocksDB's with bulk loading off).
///
/// # Errors
/// As [`replay`].
pub fn replay_into(fixture: &Fixture, log: &RestoreLog, batch: usize) -> Result<Duration> {
    let backend = fixture.backend();
    let checkpoint = Checkpoint::open(fixture.dir().join(".checkpoint"))?;
    let start = Instant::now();
    let outcome = restore(
        fixture.store(),
        log.log(),
        &checkpoint,
        batch.max(1),
        &mut NoopRestoreListener,
    )?;
    let elapsed = start.elapsed();
    let expected = log.records()?;
    if outcome.records != expected {
        return Err(Error::Corruption(format!(
            "restoring {backend} replayed {} of the log's {expected} records",
            outcome.records
        )));
    }
    Ok(elapsed)
}
