//! Abstraction overhead: each engine through its own API against the same engine through
//! `&dyn KeyValueStore`, on `get_hit`, `put_random` and `range_10`. Each pair shares a group,
//! so both run in one process, one after the other: `abstraction_<workload>`, with ids
//! `<backend>/native` and `<backend>/store-api`.
//!
//! Measured: the same workload code (one [`Target`] adapter) on both sides, each side on its
//! own store in its own directory, opened with the same engine settings and preloaded the same
//! way. The store-API side pays for what statestore adds: limit checks, the lock that makes
//! `close` safe, values and scanned pairs copied into owned `Vec`s, boxed owned iterators,
//! one dynamic call per operation. The memory backend's native side is a `BTreeMap` in a
//! `parking_lot::RwLock`, as the backend is built.
//!
//! Not measured: opening and preloading (untimed), compactions after a sample.

mod common;

use std::path::Path;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use statestore_benches::native::{BTreeTarget, RedbTarget, RocksDbTarget, SledTarget};
use statestore_benches::{Driver, Fixture, Target, Workload, backends, prepare};

const WORKLOADS: [Workload; 3] = [Workload::GetHit, Workload::PutRandom, Workload::Range10];

fn bench<T: Target + ?Sized>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    target: &T,
    workload: Workload,
) {
    let scale = common::scale();
    prepare(target, workload, scale, |_| {}).expect("preload");
    let mut driver = Driver::new(workload, scale);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| common::time_steps(&mut driver, target, iters))
    });
}

fn native(group: &mut BenchmarkGroup<'_, WallTime>, backend: &str, dir: &Path, workload: Workload) {
    let id = BenchmarkId::new(backend, "native");
    match backend {
        "memory" => bench(group, id, &BTreeTarget::new(), workload),
        "rocksdb" => bench(
            group,
            id,
            &RocksDbTarget::open(dir).expect("rocksdb"),
            workload,
        ),
        "sled" => bench(group, id, &SledTarget::open(dir).expect("sled"), workload),
        "redb" => bench(group, id, &RedbTarget::open(dir).expect("redb"), workload),
        other => println!("abstraction: no native adapter for backend {other}, skipped"),
    }
}

fn abstraction(c: &mut Criterion) {
    for workload in WORKLOADS {
        let mut group = c.benchmark_group(format!("abstraction_{workload}"));
        group.throughput(Throughput::Elements(if workload == Workload::Range10 {
            10
        } else {
            1
        }));
        for backend in backends() {
            let dir = tempfile::tempdir().expect("tempdir");
            native(&mut group, backend, &dir.path().join("native"), workload);
            let fixture = Fixture::open(backend).expect("open store");
            bench(
                &mut group,
                BenchmarkId::new(backend, "store-api"),
                &fixture.target(),
                workload,
            );
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = abstraction
}
criterion_main!(benches);
