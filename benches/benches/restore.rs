//! Restore: a file log of every record of the scale (1M at full scale, `load_random`'s keys
//! and values in its order) replayed into each backend, against a raw sequential scan of the
//! same log and against that backend's `load_random`. One group, `restore`, with ids
//! `raw_scan`, `<backend>/replay` and `<backend>/load_random`; throughput in records.
//!
//! Measured: `replay` is `statestore_changelog::restore` into a fresh store with no checkpoint,
//! in batches of `DEFAULT_RESTORE_BATCH_RECORDS` (1000, as `load_random`'s) or of
//! `STATESTORE_RESTORE_BATCH_RECORDS`, then one flush and the checkpoint write; `raw_scan`
//! reads the log from start to end in batches of the same size and drops the records;
//! `load_random` is the workload (batches of 1000, no flush). Not measured: writing the log
//! (once, before the group), opening the fresh stores.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use statestore_benches::{Driver, Fixture, Scale, Target, Workload, backends};
use statestore_changelog::{
    Changelog, Checkpoint, FileLog, FileLogConfig, NoopRestoreListener, restore,
};
use store_api::{BatchOp, Result};

const TOPIC: &str = "bench-restore-changelog";
/// Records per restore batch and per raw read: `STATESTORE_RESTORE_BATCH_RECORDS`, else the
/// library's default.
fn batch() -> usize {
    std::env::var("STATESTORE_RESTORE_BATCH_RECORDS")
        .ok()
        .and_then(|records| records.parse().ok())
        .unwrap_or(statestore_changelog::DEFAULT_RESTORE_BATCH_RECORDS)
}

/// Appends `load_random`'s records to `log`, by driving the workload against an adapter that
/// appends instead of storing.
struct Appender<'a>(&'a FileLog);

impl Target for Appender<'_> {
    fn get(&self, _key: &[u8]) -> Result<Option<usize>> {
        Ok(None)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0
            .append(&[BatchOp::Put {
                key: key.to_vec(),
                value: value.to_vec(),
            }])
            .map(drop)
    }
    fn write_batch(&self, entries: &[(statestore_benches::data::Key, &[u8])]) -> Result<()> {
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

fn write_log(dir: &Path, scale: Scale) -> FileLog {
    let log = FileLog::open(dir, TOPIC, 0, FileLogConfig::default()).expect("file log");
    let mut driver = Driver::new(Workload::LoadRandom, scale);
    common::time_load(&mut driver, &Appender(&log));
    log.sync().expect("sync");
    log
}

fn raw_scan(log: &FileLog, batch: usize) -> Duration {
    let start = Instant::now();
    let (mut from, end) = (
        log.start_offset().expect("start"),
        log.end_offset().expect("end"),
    );
    while from < end {
        let records = log.read(from, batch).expect("read");
        let Some(last) = records.last() else { break };
        from = last.offset + 1;
        std::hint::black_box(records);
    }
    start.elapsed()
}

fn replay(backend: &str, log: &FileLog, batch: usize) -> Duration {
    let fixture = Fixture::open(backend).expect("open store");
    let checkpoint = Checkpoint::open(fixture.dir().join(".checkpoint")).expect("checkpoint");
    let start = Instant::now();
    let outcome = restore(
        fixture.store(),
        log,
        &checkpoint,
        batch,
        &mut NoopRestoreListener,
    )
    .expect("restore");
    let elapsed = start.elapsed();
    assert_eq!(
        outcome.records,
        log.end_offset().expect("end"),
        "restore replayed every record"
    );
    elapsed
}

fn restore_group(c: &mut Criterion) {
    let scale = common::scale();
    let batch = batch();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path(), scale);
    let mut group = c.benchmark_group("restore");
    group.throughput(Throughput::Elements(scale.records));
    group.bench_function("raw_scan", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| raw_scan(&log, batch)).sum())
    });
    for backend in backends() {
        group.bench_function(BenchmarkId::new(backend, "replay"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| replay(backend, &log, batch)).sum());
        });
        group.bench_function(BenchmarkId::new(backend, "load_random"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let fixture = Fixture::open(backend).expect("open store");
                        common::time_load(&mut Driver::new(Workload::LoadRandom, scale), &fixture)
                    })
                    .sum()
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = restore_group
}
criterion_main!(benches);
