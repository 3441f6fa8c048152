//! Every workload on every backend, through the store API: one `benchmark_group` per workload,
//! one `BenchmarkId` per backend.
//!
//! Measured: each operation as a caller of `&dyn KeyValueStore` sees it, single-threaded
//! (see the `statestore_benches` crate docs). `load_seq`/`load_random` time a whole load of
//! every record into a fresh store (opening the store is not timed); the other workloads time
//! single operations on a store preloaded, untimed, with every record (YCSB: 1000-byte values).
//! Throughput counts records: one per operation, the scan length for `range_10`/`range_100`.
//!
//! Not measured: opening, preloading and closing stores; compactions an engine runs after a
//! sample ends; concurrent clients. `put_random` and `put_durable` write into a store that
//! grows across samples, as a long-running application's does.
//!
//! Scale: 1M records (500k YCSB), 20k under `--quick`, or `STATESTORE_BENCH_RECORDS`.

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use statestore_benches::{Driver, Fixture, Workload, backends, prepare};

fn elements(workload: Workload) -> u64 {
    match workload {
        Workload::Range10 => 10,
        Workload::Range100 => 100,
        _ => 1,
    }
}

fn load(c: &mut Criterion, workload: Workload) {
    let scale = common::scale();
    let mut group = c.benchmark_group(workload.name());
    group.throughput(Throughput::Elements(scale.records));
    for backend in backends() {
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let fixture = Fixture::open(backend).expect("open store");
                        let mut driver = Driver::new(workload, scale);
                        common::time_load(&mut driver, &fixture.target())
                    })
                    .sum()
            });
        });
    }
    group.finish();
}

fn steady(c: &mut Criterion, workload: Workload) {
    let scale = common::scale();
    let mut group = c.benchmark_group(workload.name());
    group.throughput(Throughput::Elements(elements(workload)));
    for backend in backends() {
        let fixture = Fixture::open(backend).expect("open store");
        prepare(&fixture.target(), workload, scale, |_| {}).expect("preload");
        let mut driver = Driver::new(workload, scale);
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter_custom(|iters| common::time_steps(&mut driver, &fixture.target(), iters));
        });
    }
    group.finish();
}

fn workloads(c: &mut Criterion) {
    for workload in Workload::ALL {
        if workload.is_load() {
            load(c, workload);
        } else {
            steady(c, workload);
        }
    }
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = workloads
}
criterion_main!(benches);
