//! Abstraction overhead: each engine through its own API against the same engine through
//! `&dyn KeyValueStore`, on `get_hit`, `put_random` and `range_10`. Each pair shares a group,
//! so both run in one process, one after the other: `abstraction_<workload>`, with ids
//! `<backend>/native` and `<backend>/store-api`.
//!
//! # What a pair measures
//! The same workload code on both sides (one [`Target`] adapter, and a fresh [`Driver`] per
//! side, so both issue the identical sequence of operations), on the same data in the same
//! state, with the engine settings of the backend's `Config::default()`:
//! - **rocksdb, sled, redb**: one preload per workload and backend, through the native
//!   adapter, in the backend's file layout. It is settled ([`DiskTarget::settle`]: RocksDB
//!   flushes its memtables, compacts the whole key range and waits until no flush or
//!   compaction is left; sled flushes; redb commits durably), closed, and copied twice, each
//!   copy synced to disk. The native side opens one copy, the backend the other; there is no
//!   second preload. Each side thus starts on a freshly opened engine over byte-identical,
//!   settled files that the OS page cache holds, with no write-back pending, and no side runs
//!   while the other's work finishes.
//! - **memory**: the native side is the backend's own map layout used directly
//!   ([`LayoutTarget`]: short keys inline, values in `Arc<[u8]>`, a `parking_lot::RwLock`);
//!   against a plain `BTreeMap<Vec<u8>, Vec<u8>>` the backend won by its layout, which says
//!   nothing about the abstraction (`memory_vs_btreemap` measures that comparison). It cannot
//!   hand its data to the backend, so each side is preloaded on its own, the same way;
//!   neither does background work.
//!
//! Every workload starts from its whole key space preloaded (the scale's `records`, 1M at full
//! scale), `put_random` included, which the other benches start empty; here it overwrites
//! present keys, so that both sides write into the same settled store. Before it is timed,
//! each side reads every record once through its own API, so it is measured with its engine's
//! caches warm (sled's and redb's hold the whole store) rather than while they fill: cold, a
//! side's cost per operation fell as its run went on, and the ratio depended on how many
//! operations criterion chose to run on each side.
//!
//! # Why copies, not one directory
//! Handing the native side's directory to the backend gives both sides the same data only
//! while neither writes. After `put_random` the second side started from the first side's
//! overwrites: RocksDB compacted them away, but sled's log and redb's free pages kept them,
//! and sled's store-API puts took about half the native time at full scale.
//!
//! # Order: native first, then the store API
//! With a copy each, no state passes from one side to the other, so the order matters only
//! through what they share: the machine, and the OS page cache, which holds both copies from
//! the moment they are written and synced. Either order would do; native runs first because it
//! is the reference the store-API side is read against.
//!
//! # What the store-API side pays for
//! Reads go through the borrowing paths, `get_with` and `scan`, so both sides read values and
//! pairs in place. What statestore adds: limit checks, the lock or flag that makes `close`
//! safe, the visitor's dynamic call, one dynamic call per operation; for memory, the reference
//! counts that let it lend stored slices with its lock released.
//!
//! Not measured: opening, preloading, settling, copying, the warm-up read and closing (all
//! untimed). Background work a side's own puts start (RocksDB's flushes and compactions) counts
//! only as far as it slows that side's operations while they run.
//!
//! Each side takes 10 samples over 5 s. On a shared 2-core machine the samples of one side
//! spread by 10-20%, so one run cannot resolve an overhead of a few percent.

mod common;

use std::fs::{self, File};
use std::io;
use std::path::Path;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use statestore_benches::native::{DiskTarget, LayoutTarget, RedbTarget, RocksDbTarget, SledTarget};
use statestore_benches::{
    ApiTarget, Driver, Fixture, Target, Workload, backends, data, open_store, preload,
};

const WORKLOADS: [Workload; 3] = [Workload::GetHit, Workload::PutRandom, Workload::Range10];

/// Measures `workload` on `target` from a fresh driver, so both sides of a pair issue the same
/// operations in the same order.
fn measure<T: Target + ?Sized>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    (backend, side): (&str, &str),
    target: &T,
    workload: Workload,
) {
    warm(target, workload, &format!("{backend}/{side}"));
    let mut driver = Driver::new(workload, common::scale());
    group.bench_function(BenchmarkId::new(backend, side), |b| {
        b.iter_custom(|iters| common::time_steps(&mut driver, target, iters))
    });
}

/// Loads the workload's whole key space (see the module docs for `put_random`) and flushes.
fn load<T: Target + ?Sized>(target: &T, workload: Workload) {
    let records = workload.key_space(common::scale());
    preload(target, records, workload.value_len(), |_| {}).expect("preload");
}

/// Reads every preloaded record once, untimed, so that each side is measured with its
/// engine's caches as warm as they get rather than while they fill: sled's and redb's 1 GiB
/// caches then hold the whole store, RocksDB's 50 MiB block cache churns either way. It also
/// fails the bench when a side does not see the whole preload (a store that missed the
/// native side's files must not be timed as a fast, empty one).
fn warm<T: Target + ?Sized>(target: &T, workload: Workload, side: &str) {
    let records = workload.key_space(common::scale());
    let read = target
        .scan(&data::key(0), records as usize)
        .expect("warm-up scan");
    assert_eq!(read as u64, records, "{side}: the preload is incomplete");
}

fn memory_pair(group: &mut BenchmarkGroup<'_, WallTime>, workload: Workload) {
    {
        let native = LayoutTarget::new();
        load(&native, workload);
        measure(group, ("memory", "native"), &native, workload);
    }
    let fixture = Fixture::open("memory").expect("open the memory store");
    load(&fixture.target(), workload);
    measure(group, ("memory", "store-api"), &fixture.target(), workload);
}

fn disk_pair<N: DiskTarget>(group: &mut BenchmarkGroup<'_, WallTime>, workload: Workload) {
    let backend = N::BACKEND;
    let root = tempfile::Builder::new()
        .prefix(&format!("statestore-abstraction-{backend}-"))
        .tempdir()
        .expect("tempdir");
    let loaded = root.path().join("loaded");
    let native = N::open(&loaded).expect("open native");
    load(&native, workload);
    native.settle().expect("settle the preload");
    native.close().expect("close native");
    let [native_dir, api_dir] = ["native", "store-api"].map(|side| root.path().join(side));
    for copy in [&native_dir, &api_dir] {
        copy_dir(&loaded, copy).expect("copy the preloaded directory");
    }
    fs::remove_dir_all(&loaded).expect("remove the preloaded directory");

    let native = N::open(&native_dir).expect("open native on its copy");
    measure(group, (backend, "native"), &native, workload);
    native.close().expect("close native");

    let store = open_store(backend, &api_dir).expect("open the store on its copy");
    let api = ApiTarget(store.as_ref());
    measure(group, (backend, "store-api"), &api, workload);
    store.close().expect("close the store");
}

/// Copies the files under `from` into `to` and syncs them, so that no write-back of the copy
/// is left for the kernel to do while a side is measured.
fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
            File::open(&target)?.sync_all()?;
        }
    }
    Ok(())
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
            match backend {
                "memory" => memory_pair(&mut group, workload),
                "rocksdb" => disk_pair::<RocksDbTarget>(&mut group, workload),
                "sled" => disk_pair::<SledTarget>(&mut group, workload),
                "redb" => disk_pair::<RedbTarget>(&mut group, workload),
                other => println!("abstraction: no native adapter for backend {other}, skipped"),
            }
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
