//! The project's criterion workloads for any backend, from a backend crate's own `benches/`.
//!
//! One line in `benches/workloads.rs` (with `harness = false` for it in `Cargo.toml`) runs every
//! [`Workload`] on the crate's backend and, beside it, on the built-ins it names, with the
//! settings and the throughput units of this workspace's own `workloads` bench:
//!
//! ```text
//! statestore_benches::criterion_workloads!(register: [&my_backend::MyFactory], with: ["rocksdb", "redb"]);
//! ```
//!
//! Each workload is a criterion group named after it, with one `BenchmarkId` per backend, so
//! `cargo run -p statestore-benches --bin bench-ratios` prints each backend's throughput
//! against the best of its group, the report the project uses for itself.
//!
//! Scale: 1M records (500k YCSB), 20k under `--quick`, or `STATESTORE_BENCH_RECORDS`;
//! `STATESTORE_BENCH_BACKENDS` (comma-separated names) overrides the backends run.
//! Measured and not measured: as the crate docs say, single-threaded, through the store API.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use store_api::BackendFactory;

use crate::{Driver, Fixture, Scale, Target, Workload, prepare};

/// Records of a `--quick` run: enough to leave the engines' write buffers, small enough that
/// the whole quick suite takes minutes on 2 cores.
pub const QUICK_RECORDS: u64 = 20_000;

/// True when criterion was asked for a quick run.
pub fn quick() -> bool {
    std::env::args().any(|arg| arg == "--quick")
}

/// The scale: `STATESTORE_BENCH_RECORDS` when set, else [`QUICK_RECORDS`] under `--quick`,
/// else [`Scale::FULL`].
pub fn scale() -> Scale {
    let from_env = std::env::var("STATESTORE_BENCH_RECORDS")
        .ok()
        .and_then(|records| records.parse::<u64>().ok());
    match from_env {
        Some(records) => Scale::with_records(records),
        None if quick() => Scale::with_records(QUICK_RECORDS),
        None => Scale::FULL,
    }
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

/// Every workload on each of `backends` (names in [`statestore::Registry::global`], or those
/// of `STATESTORE_BENCH_BACKENDS`) at [`scale`]: one `benchmark_group` per workload, one
/// `BenchmarkId` per backend.
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
