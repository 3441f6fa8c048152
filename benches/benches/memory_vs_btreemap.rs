//! The memory backend against a plain `BTreeMap<Vec<u8>, Vec<u8>>` behind the same lock
//! discipline (a `parking_lot::RwLock`: reads shared, each write or batch exclusive), on every
//! workload but `put_durable` (a flush is a no-op on both). Each pair shares a group,
//! `memory_vs_btreemap_<workload>`, with ids `memory-backend` and `btreemap`.
//!
//! Measured: the same workload code on both sides; values and pairs read in place on both (the
//! map under its lock, the backend through its borrowing reads, `get_with` and `scan`). The
//! backend adds limit checks, its closed flag, the dynamic call, and the reference counts
//! that let it lend stored slices with its lock released.
//!
//! Not measured: preloading (untimed). Loads time a full load into a fresh map.

mod common;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use statestore_benches::native::BTreeTarget;
use statestore_benches::{Driver, Fixture, Target, Workload, prepare};

fn steady<T: Target + ?Sized>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    target: &T,
    workload: Workload,
) {
    let scale = common::scale();
    prepare(target, workload, scale, |_| {}).expect("preload");
    let mut driver = Driver::new(workload, scale);
    group.bench_function(BenchmarkId::from_parameter(id), |b| {
        b.iter_custom(|iters| common::time_steps(&mut driver, target, iters));
    });
}

fn load<T: Target>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    open: impl Fn() -> T,
    workload: Workload,
) {
    let scale = common::scale();
    group.bench_function(BenchmarkId::from_parameter(id), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| common::time_load(&mut Driver::new(workload, scale), &open()))
                .sum()
        });
    });
}

fn memory_vs_btreemap(c: &mut Criterion) {
    let scale = common::scale();
    for workload in Workload::ALL
        .into_iter()
        .filter(|w| *w != Workload::PutDurable)
    {
        let mut group = c.benchmark_group(format!("memory_vs_btreemap_{workload}"));
        let elements = match workload {
            Workload::Range10 => 10,
            Workload::Range100 => 100,
            _ if workload.is_load() => scale.records,
            _ => 1,
        };
        group.throughput(Throughput::Elements(elements));
        if workload.is_load() {
            load(
                &mut group,
                "memory-backend",
                || Fixture::open("memory").expect("memory"),
                workload,
            );
            load(&mut group, "btreemap", BTreeTarget::new, workload);
        } else {
            let fixture = Fixture::open("memory").expect("memory");
            steady(&mut group, "memory-backend", &fixture.target(), workload);
            steady(&mut group, "btreemap", &BTreeTarget::new(), workload);
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = memory_vs_btreemap
}
criterion_main!(benches);
