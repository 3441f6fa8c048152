//! One timed run of one workload on one backend, in a fresh store, by one thread or several.

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde::Serialize;
use statestore::Registry;
use store_api::{BackendOptions, Error, Result};

use super::OptionsByBackend;
use crate::{ApiTarget, Driver, Fixture, Scale, Workload, prepare};

/// How often the progress bar is updated, in steps: often enough to move smoothly, rarely
/// enough to cost nothing next to the operations.
const PROGRESS_EVERY: u64 = 512;
/// The longest latency the histogram records; slower operations are counted at this value.
const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// The workload's name.
    pub workload: String,
    /// The backend's name.
    pub backend: String,
    /// Whether the backend keeps data on disk (the memory backend does not).
    pub persistent: bool,
    /// Records read or written: one per operation, the batch size for loads.
    pub records: u64,
    /// Operations timed: single operations, or batches for loads.
    pub operations: u64,
    /// Measured time, in seconds.
    pub seconds: f64,
    /// Operations per second; records per second for the load workloads.
    pub ops_per_sec: f64,
    /// Median latency of one operation (one batch for loads), in microseconds.
    pub p50_us: f64,
    /// 99th-percentile latency of one operation, in microseconds.
    pub p99_us: f64,
    /// The store's files on disk after the run and a flush, in bytes.
    pub bytes_on_disk: u64,
    /// This backend's throughput over the best one's on this workload (1.0 for the best).
    pub ratio_to_best: f64,
}

#[cfg(test)]
impl Measurement {
    /// A measurement of `backend` at `ops_per_sec` on `workload`, for tests of what reads them.
    pub(crate) fn sample(
        workload: &str,
        backend: &str,
        ops_per_sec: f64,
        bytes_on_disk: u64,
        persistent: bool,
    ) -> Measurement {
        Measurement {
            workload: workload.into(),
            backend: backend.into(),
            persistent,
            records: 1,
            operations: 1,
            seconds: 1.0,
            ops_per_sec,
            p50_us: 1.0,
            p99_us: 2.0,
            bytes_on_disk,
            ratio_to_best: 1.0,
        }
    }
}

/// Where and how long runs go.
#[derive(Debug, Clone)]
pub struct RunPlan<'a> {
    /// The scale of the workloads.
    pub scale: Scale,
    /// How long each non-load workload runs.
    pub duration: Duration,
    /// Where stores are created; `None` for the system temp dir.
    pub data_dir: Option<&'a Path>,
    /// Where backend names resolve.
    pub registry: &'a Registry,
    /// Options per backend; a backend not named gets its defaults.
    pub options: &'a OptionsByBackend,
    /// Threads issuing the workload together against the one store (at least 1).
    pub threads: usize,
}

/// Preloads, runs and measures `workload` on `backend` in a new store, then removes it.
///
/// # Errors
/// Any failure of the store, or of the temporary directory.
pub fn measure(
    plan: &RunPlan<'_>,
    workload: Workload,
    backend: &str,
    bar: &ProgressBar,
) -> Result<Measurement> {
    let fixture = open_fixture(plan, backend)?;
    let target = fixture.target();
    let preload = workload.preload(plan.scale);
    if preload > 0 {
        bar.set_length(preload);
        bar.set_message("preloading");
        prepare(&target, workload, plan.scale, |done| bar.set_position(done))?;
    }
    bar.set_position(0);
    bar.set_message("running");
    let timed = timed_run(workload, &target, plan, bar)?;
    fixture.store().flush()?;
    let bytes_on_disk = fixture.bytes_on_disk();
    let persistent = fixture.store().capabilities().persistent;
    fixture.store().close()?;
    Ok(timed.into_measurement(workload, backend, persistent, bytes_on_disk))
}

fn open_fixture(plan: &RunPlan<'_>, backend: &str) -> Result<Fixture> {
    let factory = plan.registry.get(backend)?;
    let options = plan.options.get(backend).unwrap_or(&BackendOptions::Null);
    let parent = match plan.data_dir {
        Some(parent) => parent.to_path_buf(),
        None => std::env::temp_dir(),
    };
    std::fs::create_dir_all(&parent)
        .map_err(|err| Error::io(format!("creating {}", parent.display()), err))?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("statestore-compare-{backend}-"))
        .tempdir_in(&parent)
        .map_err(|err| Error::io(format!("creating a directory in {}", parent.display()), err))?;
    Fixture::open_with(factory, options, dir)
}

struct Timed {
    records: u64,
    operations: u64,
    elapsed: Duration,
    latencies: Histogram<u64>,
}

/// Runs `workload` on `target` with `plan.threads` threads, each stepping its own
/// [`Driver::shard`] until its share of a load ends or the duration passes, and adds up what
/// they did. The run lasts as long as the slowest thread.
fn timed_run(
    workload: Workload,
    target: &ApiTarget<'_>,
    plan: &RunPlan<'_>,
    bar: &ProgressBar,
) -> Result<Timed> {
    let threads = plan.threads.max(1);
    bar.set_length(if workload.is_load() {
        plan.scale.records
    } else {
        plan.duration.as_millis() as u64
    });
    if threads == 1 {
        let mut driver = Driver::new(workload, plan.scale);
        return run_shard(&mut driver, target, plan, bar, None);
    }
    // Every thread starts its clock once all of them are ready to issue operations.
    let start_line = Barrier::new(threads);
    let drivers = Driver::shards(workload, plan.scale, threads);
    let outcomes: Vec<Result<Timed>> = std::thread::scope(|scope| {
        let shards: Vec<_> = drivers
            .into_iter()
            .enumerate()
            .map(|(shard, mut driver)| {
                let start_line = &start_line;
                scope.spawn(move || {
                    start_line.wait();
                    run_shard(&mut driver, target, plan, bar, Some(shard))
                })
            })
            .collect();
        shards
            .into_iter()
            .map(|shard| {
                shard
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut outcomes = outcomes.into_iter();
    let mut total = outcomes
        .next()
        .unwrap_or_else(|| Err(Error::invalid("no thread ran")))?;
    for outcome in outcomes {
        total.add(outcome?)?;
    }
    Ok(total)
}

/// Steps `driver` until the load ends or the duration passes, timing every step. `shard` is
/// `None` for a run by one thread; shard 0 of several moves the bar of a timed run.
fn run_shard(
    driver: &mut Driver,
    target: &ApiTarget<'_>,
    plan: &RunPlan<'_>,
    bar: &ProgressBar,
    shard: Option<usize>,
) -> Result<Timed> {
    let load = driver.workload().is_load();
    let shows_time = shard.unwrap_or(0) == 0;
    let mut latencies = Histogram::<u64>::new_with_bounds(1, MAX_LATENCY_NS, 3)
        .map_err(|err| Error::invalid(format!("latency histogram: {err}")))?;
    let (mut records, mut operations) = (0, 0);
    let start = Instant::now();
    let mut last = start;
    while let Some(done) = driver.step(target)? {
        // One clock read per step: each step's latency runs from the end of the previous one.
        let now = Instant::now();
        latencies.saturating_record((now - last).as_nanos().min(u128::from(MAX_LATENCY_NS)) as u64);
        last = now;
        records += done;
        operations += 1;
        if load {
            bar.inc(done);
        } else if shows_time && operations % PROGRESS_EVERY == 0 {
            bar.set_position((now - start).as_millis() as u64);
        }
        if !load && now - start >= plan.duration {
            break;
        }
    }
    Ok(Timed {
        records,
        operations,
        elapsed: last - start,
        latencies,
    })
}

impl Timed {
    /// Adds what another thread of the same run did: its operations and latencies; the run
    /// took as long as the longer of the two.
    fn add(&mut self, other: Timed) -> Result<()> {
        self.records += other.records;
        self.operations += other.operations;
        self.elapsed = self.elapsed.max(other.elapsed);
        self.latencies
            .add(&other.latencies)
            .map_err(|err| Error::invalid(format!("latency histogram: {err}")))
    }

    fn into_measurement(
        self,
        workload: Workload,
        backend: &str,
        persistent: bool,
        bytes_on_disk: u64,
    ) -> Measurement {
        let seconds = self.elapsed.as_secs_f64();
        // A load's batches are an implementation detail: users compare load rates in records.
        let units = if workload.is_load() {
            self.records
        } else {
            self.operations
        };
        let micros = |quantile: f64| self.latencies.value_at_quantile(quantile) as f64 / 1000.0;
        Measurement {
            workload: workload.name().to_string(),
            backend: backend.to_string(),
            persistent,
            records: self.records,
            operations: self.operations,
            seconds,
            ops_per_sec: if seconds > 0.0 {
                units as f64 / seconds
            } else {
                0.0
            },
            p50_us: micros(0.5),
            p99_us: micros(0.99),
            bytes_on_disk: if persistent { bytes_on_disk } else { 0 },
            ratio_to_best: 1.0,
        }
    }
}
