//! The window store's `fetch` and its segment expiry, on memory and RocksDB (or the backends in
//! `STATESTORE_WINDOW_BENCH_BACKENDS`, comma-separated), each against a layout without segments.
//! The window store's side is the harness's (`statestore_benches::harness`), which backend
//! crates run too; the code of both sides is `statestore_benches::window`.
//!
//! Group `window_fetch`: one key's `WINDOWS` windows (100, or `STATESTORE_WINDOW_BENCH_WINDOWS`)
//! among `KEYS` keys (1000, or `STATESTORE_WINDOW_BENCH_KEYS`), one-minute windows in segments
//! of ten minutes: `<backend>` is `WindowStore::fetch` over every live segment;
//! `<backend>/raw_range` reads the same number of entries as one range of `key | start` keys
//! in the same engine, the floor any layout pays. Throughput in windows.
//!
//! Group `window_expiry`: steady state of `SEGMENTS` live segments (5) of `PER_SEGMENT` records
//! each (2000, or `STATESTORE_WINDOW_BENCH_PER_SEGMENT`). Each iteration writes a new segment's
//! records (not timed), then times what expires the oldest segment: `<backend>` is the window
//! store's put that moves the stream time (the range of the expired segment and one batch of
//! its deletes); `<backend>/scan_and_delete` does the same for a store without segments
//! (`key | start` keys): a scan of every record to find the expired ones and one batch of
//! their deletes. Throughput in expired records.

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use statestore_benches::harness::{
    bench_segment_drop, bench_window_fetch, fetch_setup, window_sizes,
};
use statestore_benches::window::Unsegmented;

fn backends() -> Vec<String> {
    std::env::var("STATESTORE_WINDOW_BENCH_BACKENDS")
        .unwrap_or_else(|_| "memory,rocksdb".into())
        .split(',')
        .map(str::to_string)
        .collect()
}

fn fetch(c: &mut Criterion) {
    let sizes = window_sizes();
    let mut group = c.benchmark_group("window_fetch");
    group.throughput(Throughput::Elements(sizes.windows as u64));
    for backend in backends() {
        let setup = fetch_setup(&backend, sizes);
        bench_window_fetch(&mut group, &backend, &setup);
        group.bench_function(BenchmarkId::new(&backend, "raw_range"), |b| {
            b.iter(|| setup.raw_range().expect("range"));
        });
    }
    group.finish();
}

fn expiry(c: &mut Criterion) {
    let per_segment = window_sizes().per_segment;
    let mut group = c.benchmark_group("window_expiry");
    group.throughput(Throughput::Elements(per_segment as u64));
    for backend in backends() {
        bench_segment_drop(&mut group, &backend, per_segment);
        let mut unsegmented = Unsegmented::new(&backend, per_segment).expect("fill");
        group.bench_function(BenchmarkId::new(&backend, "scan_and_delete"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let took = unsegmented.expire_one().expect("expire");
                        unsegmented.fill().expect("fill");
                        took
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
    targets = fetch, expiry
}
criterion_main!(benches);
