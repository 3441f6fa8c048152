//! Restore: a file log of every record of the scale (1M at full scale, `load_random`'s keys
//! and values in its order) replayed into each backend, against a raw sequential scan of the
//! same log and against that backend's `load_random`. One group, `restore`, with ids
//! `<backend>` (the harness's replay, which backend crates run too), `log/raw_scan`,
//! `<backend>/load_random`, and `rocksdb/replay` (RocksDB with bulk loading off, against
//! `rocksdb`, which restores from empty by SST ingestion); throughput in records.
//!
//! Measured: `<backend>` is `statestore_changelog::restore` into a fresh store with no
//! checkpoint, in batches of `DEFAULT_RESTORE_BATCH_RECORDS` (1000, as `load_random`'s) or of
//! `STATESTORE_RESTORE_BATCH_RECORDS`, then one flush and the checkpoint write; `raw_scan`
//! reads the log from start to end in batches of the same size and drops the records;
//! `load_random` is the workload (batches of 1000, no flush). Not measured: writing the log
//! (once, before the group), opening the fresh stores. See `statestore_benches::restore`.

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use statestore_benches::harness::bench_replay;
use statestore_benches::restore::{self, RestoreLog};
use statestore_benches::{Driver, Fixture, Workload, backends};

fn restore_group(c: &mut Criterion) {
    let scale = common::scale();
    let batch = restore::batch();
    let log = RestoreLog::write(scale).expect("writing the log");
    let mut group = c.benchmark_group("restore");
    group.throughput(Throughput::Elements(scale.records));
    group.bench_function(BenchmarkId::new("log", "raw_scan"), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| restore::raw_scan(&log, batch).expect("scan"))
                .sum()
        })
    });
    for backend in backends() {
        bench_replay(&mut group, backend, &log, batch);
        if backend == "rocksdb" {
            bench_rocksdb_without_bulk_load(&mut group, &log, batch);
        }
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

/// `rocksdb/replay`: the restore into RocksDB with bulk loading off (`bulk_load_bytes: 0`),
/// so it replays `WriteBatch`es as every restore did before SST ingestion.
fn bench_rocksdb_without_bulk_load(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    log: &RestoreLog,
    batch: usize,
) {
    let options = serde_json::json!({ "bulk_load_bytes": 0 });
    group.bench_function(BenchmarkId::new("rocksdb", "replay"), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let factory = statestore::resolve("rocksdb").expect("rocksdb registered");
                    let fixture = Fixture::open_with(factory, &options, dir).expect("open");
                    restore::replay_into(&fixture, log, batch).expect("restore")
                })
                .sum()
        });
    });
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = restore_group
}
criterion_main!(benches);
