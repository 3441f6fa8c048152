//! The project's criterion workloads for any backend, from a backend crate's own `benches/`.
//!
//! One line in `benches/workloads.rs` (with `harness = false` for it in `Cargo.toml`) runs every
//! [`Workload`], a restore from a changelog and the window store's fetch and expiry on the
//! crate's backend and, beside it, on the built-ins it names, with the settings and the
//! throughput units of this workspace's own `workloads` bench:
//!
//! ```text
//! statestore_benches::criterion_workloads!(register: [&my_backend::MyFactory], with: ["rocksdb", "redb"]);
//! ```
//!
//! Each workload is a criterion group named after it (see [`GROUPS`]), with one `BenchmarkId`
//! per backend, so `cargo run -p statestore-benches --bin bench-ratios` prints each backend's
//! throughput against the best of its group, the report the project uses for itself:
//! - the [`Workload`]s, in records per second;
//! - `restore`: a file changelog of `load_random`'s records replayed into a fresh store
//!   ([`crate::restore`]), in records;
//! - `window_fetch`: one key's windows through `WindowStore::fetch`, in windows;
//!   `window_expiry`: the put that drops a window store's oldest segment, in records dropped
//!   ([`crate::window`]).
//!
//! Scale: 1M records (500k YCSB), 20k under `--quick`, or `STATESTORE_BENCH_RECORDS`; the window
//! sizes of [`WindowSizes::FULL`] or the `STATESTORE_WINDOW_BENCH_*` variables. Run as a test
//! (`cargo test --benches`, where criterion runs each benchmark once) it uses [`TEST_RECORDS`]
//! and [`WindowSizes::SMALL`], so checking that every workload runs takes seconds.
//! `STATESTORE_BENCH_BACKENDS` (comma-separated names) overrides the backends run.
//! Measured and not measured: as the crate docs say, single-threaded, through the store API.

use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use store_api::BackendFactory;

use crate::restore::{self, RestoreLog};
use crate::window::{FetchSetup, Segmented, WindowSizes};
use crate::{Driver, Fixture, Scale, Target, Workload, prepare};

/// The groups of the harness beyond the [`Workload`]s, in the order they run.
pub const GROUPS: [&str; 3] = ["restore", "window_fetch", "window_expiry"];

/// Records of a `--quick` run: enough to leave the engines' write buffers, small enough that
/// the whole quick suite takes minutes on 2 cores.
pub const QUICK_RECORDS: u64 = 20_000;

/// Records of a run as a test, where criterion runs each benchmark once to check it works.
pub const TEST_RECORDS: u64 = 2_000;

/// True when criterion was asked for a quick run.
pub fn quick() -> bool {
    std::env::args().any(|arg| arg == "--quick")
}

/// True when criterion measures, as under `cargo bench`; false when it runs each benchmark
/// once as a test (`cargo test --benches`, or `--test`) or lists them. Criterion decides the
/// same way from the same arguments.
pub fn benchmarking() -> bool {
    let has = |flag: &str| std::env::args().any(|arg| arg == flag);
    has("--bench") && !has("--test") && !has("--list")
}

/// The scale: `STATESTORE_BENCH_RECORDS` when set, else [`TEST_RECORDS`] when not
/// [`benchmarking`], [`QUICK_RECORDS`] under `--quick`, else [`Scale::FULL`].
pub fn scale() -> Scale {
    let from_env = std::env::var("STATESTORE_BENCH_RECORDS")
        .ok()
        .and_then(|records| records.parse::<u64>().ok());
    match from_env {
        Some(records) => Scale::with_records(records),
        None if !benchmarking() => Scale::with_records(TEST_RECORDS),
        None if quick() => Scale::with_records(QUICK_RECORDS),
        None => Scale::FULL,
    }
}

/// The window workloads' sizes: [`WindowSizes::FULL`] when [`benchmarking`], else
/// [`WindowSizes::SMALL`], each replaced by its `STATESTORE_WINDOW_BENCH_*` variable when set.
pub fn window_sizes() -> WindowSizes {
    WindowSizes::from_env(if benchmarking() {
        WindowSizes::FULL
    } else {
        WindowSizes::SMALL
    })
}

/// Criterion settings: 10 samples (the fewest criterion takes) over 5 s after 1 s of warm-up,
/// or at most 1 s per benchmark under `--quick`. Command-line flags still override them.
pub fn config() -> Criterion {
    let measurement = if quick() {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(5)
    };
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(measurement)
}

/// Registers `factory` in [`statestore::Registry::global`], unless it is registered already
/// (a bench or a test may set up twice), and returns its name. "Already" means a factory of
/// the same name that prints the same with `Debug`: two `&MyFactory` of a unit struct need
/// not have one address.
///
/// # Panics
/// When a different factory holds the name, or the name is invalid: a bench cannot run then.
pub fn register(factory: &'static dyn BackendFactory) -> &'static str {
    let name = factory.name();
    if let Ok(known) = statestore::resolve(name)
        && format!("{known:?}") == format!("{factory:?}")
    {
        return name;
    }
    if let Err(err) = statestore::register(factory) {
        panic!("registering the backend to bench: {err}");
    }
    name
}

/// The backends to run: `STATESTORE_BENCH_BACKENDS` when set, else `backends`.
pub fn backends_or_env(backends: &[&str]) -> Vec<String> {
    match std::env::var("STATESTORE_BENCH_BACKENDS") {
        Ok(names) => names
            .split(',')
            .filter(|name| !name.is_empty())
            .map(str::to_string)
            .collect(),
        Err(_) => backends.iter().map(|name| name.to_string()).collect(),
    }
}

/// Runs `iters` steps of `driver` on `target` and returns the time they took.
///
/// # Panics
/// When a step fails: a broken engine must not be timed as a fast one.
pub fn time_steps<T: Target + ?Sized>(driver: &mut Driver, target: &T, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let done = driver
            .step(target)
            .unwrap_or_else(|err| panic!("step: {err}"));
        std::hint::black_box(done);
    }
    start.elapsed()
}

/// Runs a load workload to its end on `target` and returns the time it took.
///
/// # Panics
/// When a step fails.
pub fn time_load<T: Target + ?Sized>(driver: &mut Driver, target: &T) -> Duration {
    let start = Instant::now();
    while driver
        .step(target)
        .unwrap_or_else(|err| panic!("load step: {err}"))
        .is_some()
    {}
    start.elapsed()
}

fn elements(workload: Workload) -> u64 {
    match workload {
        Workload::Range10 => 10,
        Workload::Range100 => 100,
        _ => 1,
    }
}

fn open(backend: &str) -> Fixture {
    Fixture::open(backend).unwrap_or_else(|err| panic!("opening {backend}: {err}"))
}

/// `load_seq`/`load_random`: a whole load of every record into a fresh store, per iteration.
fn load(c: &mut Criterion, workload: Workload, scale: Scale, backends: &[String]) {
    let mut group = c.benchmark_group(workload.name());
    group.throughput(Throughput::Elements(scale.records));
    for backend in backends {
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let fixture = open(backend);
                        let mut driver = Driver::new(workload, scale);
                        time_load(&mut driver, &fixture.target())
                    })
                    .sum()
            });
        });
    }
    group.finish();
}

/// The other workloads: single operations on a store preloaded, untimed, for the workload.
fn steady(c: &mut Criterion, workload: Workload, scale: Scale, backends: &[String]) {
    let mut group = c.benchmark_group(workload.name());
    group.throughput(Throughput::Elements(elements(workload)));
    for backend in backends {
        let fixture = open(backend);
        prepare(&fixture.target(), workload, scale, |_| {})
            .unwrap_or_else(|err| panic!("preloading {backend}: {err}"));
        let mut driver = Driver::new(workload, scale);
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter_custom(|iters| time_steps(&mut driver, &fixture.target(), iters));
        });
    }
    group.finish();
}

/// `restore`: a changelog of `scale`'s `load_random` records replayed into a fresh store of
/// each backend, per iteration.
///
/// # Panics
/// When the log cannot be written or a restore fails.
pub fn restore_group(c: &mut Criterion, scale: Scale, backends: &[String]) {
    let log = RestoreLog::write(scale).unwrap_or_else(|err| panic!("writing the log: {err}"));
    let mut group = c.benchmark_group("restore");
    group.throughput(Throughput::Elements(scale.records));
    for backend in backends {
        bench_replay(&mut group, backend, &log, restore::batch());
    }
    group.finish();
}

/// Benchmark `<backend>` of a `restore` group: a replay of `log` into a fresh store of
/// `backend` in batches of `batch` records, per iteration.
///
/// # Panics
/// When a restore fails.
pub fn bench_replay(
    group: &mut BenchmarkGroup<'_, WallTime>,
    backend: &str,
    log: &RestoreLog,
    batch: usize,
) {
    group.bench_function(BenchmarkId::from_parameter(backend), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    restore::replay(backend, log, batch)
                        .unwrap_or_else(|err| panic!("restoring {backend}: {err}"))
                })
                .sum()
        });
    });
}

/// `window_fetch`: one key's windows fetched from a window store of each backend.
///
/// # Panics
/// When a store fails.
pub fn window_fetch_group(c: &mut Criterion, sizes: WindowSizes, backends: &[String]) {
    let mut group = c.benchmark_group("window_fetch");
    group.throughput(Throughput::Elements(sizes.windows as u64));
    for backend in backends {
        let setup = fetch_setup(backend, sizes);
        bench_window_fetch(&mut group, backend, &setup);
    }
    group.finish();
}

/// The windows of `sizes` written into stores of `backend`.
///
/// # Panics
/// When a store fails.
pub fn fetch_setup(backend: &str, sizes: WindowSizes) -> FetchSetup {
    FetchSetup::new(backend, sizes).unwrap_or_else(|err| panic!("writing {backend}: {err}"))
}

/// Benchmark `<backend>` of a `window_fetch` group: [`FetchSetup::fetch`].
///
/// # Panics
/// When a fetch fails or misses windows.
pub fn bench_window_fetch(
    group: &mut BenchmarkGroup<'_, WallTime>,
    backend: &str,
    setup: &FetchSetup,
) {
    group.bench_function(BenchmarkId::from_parameter(backend), |b| {
        b.iter(|| {
            setup
                .fetch()
                .unwrap_or_else(|err| panic!("fetching from {backend}: {err}"));
        });
    });
}

/// `window_expiry`: the put that expires the oldest of a window store's segments, on each
/// backend.
///
/// # Panics
/// When a store fails.
pub fn window_expiry_group(c: &mut Criterion, sizes: WindowSizes, backends: &[String]) {
    let mut group = c.benchmark_group("window_expiry");
    group.throughput(Throughput::Elements(sizes.per_segment as u64));
    for backend in backends {
        bench_segment_drop(&mut group, backend, sizes.per_segment);
    }
    group.finish();
}

/// Benchmark `<backend>` of a `window_expiry` group: each iteration times
/// [`Segmented::expire_one`], then refills a segment, untimed.
///
/// # Panics
/// When a store fails.
pub fn bench_segment_drop(
    group: &mut BenchmarkGroup<'_, WallTime>,
    backend: &str,
    per_segment: i64,
) {
    let mut segmented = Segmented::new(backend, per_segment)
        .unwrap_or_else(|err| panic!("filling {backend}: {err}"));
    group.bench_function(BenchmarkId::from_parameter(backend), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let took = segmented.expire_one();
                    let took = took.and_then(|took| segmented.fill().map(|()| took));
                    took.unwrap_or_else(|err| panic!("expiring in {backend}: {err}"))
                })
                .sum()
        });
    });
}

/// Every workload and every group of [`GROUPS`] on each of `backends` (names in
/// [`statestore::Registry::global`], or those of `STATESTORE_BENCH_BACKENDS`) at [`scale`]
/// and [`window_sizes`]: one `benchmark_group` per workload, one `BenchmarkId` per backend.
///
/// # Panics
/// When a backend is not registered, or fails to open or to run a workload.
pub fn workloads(c: &mut Criterion, backends: &[&str]) {
    let scale = scale();
    let backends = backends_or_env(backends);
    for backend in &backends {
        if let Err(err) = statestore::resolve(backend) {
            panic!("{err}");
        }
    }
    for workload in Workload::ALL {
        if workload.is_load() {
            load(c, workload, scale, &backends);
        } else {
            steady(c, workload, scale, &backends);
        }
    }
    restore_group(c, scale, &backends);
    let sizes = window_sizes();
    window_fetch_group(c, sizes, &backends);
    window_expiry_group(c, sizes, &backends);
}

/// Writes a criterion bench's `main` that runs [`workloads`] on the backends registered by
/// `register` (factories, `&'static`) followed by the built-ins named in `with`:
///
/// ```text
/// statestore_benches::criterion_workloads!(register: [&my_backend::MyFactory], with: ["rocksdb", "memory"]);
/// statestore_benches::criterion_workloads!(with: ["memory", "rocksdb", "sled", "redb"]);
/// ```
#[macro_export]
macro_rules! criterion_workloads {
    (register: [$($factory:expr),* $(,)?], with: [$($backend:expr),* $(,)?] $(,)?) => {
        fn statestore_workloads(c: &mut $crate::criterion::Criterion) {
            let registered: &[&str] = &[$($crate::harness::register($factory)),*];
            let builtins: &[&str] = &[$($backend),*];
            let backends: ::std::vec::Vec<&str> =
                registered.iter().chain(builtins).copied().collect();
            $crate::harness::workloads(c, &backends);
        }
        $crate::criterion::criterion_group! {
            name = statestore_benches_group;
            config = $crate::harness::config();
            targets = statestore_workloads
        }
        $crate::criterion::criterion_main!(statestore_benches_group);
    };
    (with: [$($backend:expr),* $(,)?] $(,)?) => {
        $crate::criterion_workloads!(register: [], with: [$($backend),*]);
    };
}
