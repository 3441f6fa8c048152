//! Settings and helpers shared by the bench targets (each includes this file as a module).

#![allow(dead_code, reason = "each bench target uses a different subset")]

use std::time::{Duration, Instant};

use criterion::Criterion;
use statestore_benches::{Driver, Scale, Target};

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

/// Runs `iters` steps of `driver` on `target` and returns the time they took.
pub fn time_steps<T: Target + ?Sized>(driver: &mut Driver, target: &T, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let done = driver.step(target).expect("workload step");
        std::hint::black_box(done);
    }
    start.elapsed()
}

/// Runs a load workload to its end on `target` and returns the time it took.
pub fn time_load<T: Target + ?Sized>(driver: &mut Driver, target: &T) -> Duration {
    let start = Instant::now();
    while driver.step(target).expect("load step").is_some() {}
    start.elapsed()
}
