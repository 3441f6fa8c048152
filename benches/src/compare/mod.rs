//! `compare`: run workloads on backends, print a table and a recommendation per workload, and
//! write `results.json`, `results.csv` and SVG charts. A library function over a
//! [`Registry`], so any crate makes its own compare binary; the `statestore` command is one.
//!
//! A backend crate's `src/bin/compare.rs`, running its engine beside the built-ins:
//!
//! ```no_run
//! # #[derive(Debug)] struct MyFactory;
//! # impl store_api::BackendFactory for MyFactory {
//! #     fn name(&self) -> &'static str { "mine" }
//! #     fn open(&self, d: &std::path::Path, o: &store_api::BackendOptions)
//! #         -> store_api::Result<Box<dyn store_api::KeyValueStore>> { statestore::open("memory", d, o) }
//! # }
//! fn main() -> std::process::ExitCode {
//!     if let Err(err) = statestore::register(&MyFactory) {
//!         eprintln!("error: {err}");
//!         return std::process::ExitCode::FAILURE;
//!     }
//!     // `compare --backends mine,rocksdb,redb --records 200000 --require durable`
//!     statestore_benches::compare::main()
//! }
//! ```
//!
//! What users vary: `--backends`, `--workloads`, `--records` or `--state-size`, `--duration`,
//! `--key-size`, `--value-size`, `--threads` (threads issuing each workload together against
//! one store), `--cache-size` (the disk engines' caches, to make the state outgrow them),
//! `--options` (per-backend options as JSON, or `@file.json` or `@file.toml`), `--data-dir`
//! (the disk), and `--require` (`durable`, `larger-than-memory`): the recommendation is then
//! the best engine among those that meet every requirement. Every value is checked before anything runs
//! ([`ArgsError`]).

mod args;
mod chart;
mod measure;
mod output;
mod report;

use std::collections::BTreeMap;
use std::error::Error;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use statestore::Registry;
use store_api::BackendOptions;

use crate::{Scale, Workload};
pub use args::{
    ArgsError, CACHE_OPTIONS, Checked, CompareArgs, DEFAULT_DURATION_SECS, DEFAULT_RECORDS,
    MAX_RECORDS, MAX_THREADS, parse_size,
};
use measure::{Measurement, RunPlan, measure};
use output::{Machine, Report, RunSettings};
pub use report::{Recommendation, Requirement, bytes, thousands};

/// `println!` that hands back the write's error (a reader that went away) instead of
/// panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// The result of a comparison: any error, printed with its causes by [`main`].
pub type CompareResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

/// Options per backend name, as `--options` gives them.
pub type OptionsByBackend = BTreeMap<String, BackendOptions>;

/// A whole compare command: parses `std::env::args` as [`CompareArgs`], runs them against
/// [`Registry::global`] (register a backend before calling it), prints any error with its
/// causes and returns the exit status (2 for bad arguments, 1 for a failed run).
pub fn main() -> ExitCode {
    let args = CompareArgs::parse();
    report_outcome(run(&args, Registry::global()))
}

/// The exit status of a finished command, after printing its error and their causes. A
/// reader that stopped reading (`compare | head`) is not an error.
pub fn report_outcome(outcome: CompareResult) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(err.as_ref()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            let mut source = err.source();
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}

/// True when `err` is the error of writing to a pipe whose reader has gone.
fn is_broken_pipe(err: &(dyn Error + 'static)) -> bool {
    err.downcast_ref::<std::io::Error>()
        .is_some_and(|err| err.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Keeps the first occurrence of each item, in order.
fn dedup<T: PartialEq + Clone>(items: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(items.len());
    for item in items {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

/// Runs the comparison of `args` on backends resolved through `registry`, prints a table per
/// workload and the recommendations, and writes the results into `args.out`.
///
/// # Errors
/// An [`ArgsError`] for a value out of range, a backend name or an options key that
/// `registry` does not hold, an unusable output directory (all checked before anything
/// runs), a file that cannot be written, or, after every other run finished and the results
/// are written, the runs that failed.
pub fn run(args: &CompareArgs, registry: &Registry) -> CompareResult {
    let checked = args.check()?;
    let workloads = if args.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        dedup(&args.workloads)
    };
    let backends = if args.backends.is_empty() {
        registry.names().into_iter().map(String::from).collect()
    } else {
        dedup(&args.backends)
    };
    let given = args.options.clone().unwrap_or_default();
    for name in backends.iter().chain(given.keys()) {
        registry.get(name)?;
    }
    let (options, cache_notes) = args::with_cache_size(&given, &backends, args.cache_size);
    std::fs::create_dir_all(&args.out).map_err(|err| {
        format!(
            "cannot create the output directory {}: {err}",
            args.out.display()
        )
    })?;
    let mut scale = Scale::with_records(checked.records).with_key_len(checked.key_len);
    if let Some(len) = checked.value_len {
        scale = scale.with_value_len(len);
    }
    let plan = RunPlan {
        scale,
        duration: Duration::from_secs_f64(args.duration),
        data_dir: args.data_dir.as_deref(),
        registry,
        options: &options,
        threads: checked.threads,
    };
    let settings = RunSettings {
        key_len: scale.key_len,
        value_len: scale.value_len,
        threads: checked.threads,
        cache_size: args.cache_size,
    };
    let started = Instant::now();
    outln!(
        "compare: {} workloads x {} backends, {} records ({} for YCSB), {}s per timed run, \
         {} thread{}",
        workloads.len(),
        backends.len(),
        plan.scale.records,
        plan.scale.ycsb_records,
        args.duration,
        checked.threads,
        if checked.threads == 1 { "" } else { "s" },
    )?;
    outln!("{}", settings.describe_state(plan.scale))?;
    for note in &cache_notes {
        outln!("{note}")?;
    }
    // From here on a reader that went away does not stop the run: the files still get written.
    let (grouped, failures) = run_all(&plan, &workloads, &backends);
    let recommendations = recommend_all(&grouped, &args.require);
    write_outputs(&args.out, &plan, &settings, &grouped, &recommendations)?;
    let _ = outln!("\nfinished in {:.0}s", started.elapsed().as_secs_f64());
    if failures.is_empty() {
        Ok(())
    } else {
        for failure in &failures {
            eprintln!("failed: {failure}");
        }
        Err(format!("{} of the runs failed (see above)", failures.len()).into())
    }
}

type Grouped = Vec<(Workload, Vec<Measurement>)>;

/// Runs every workload on every backend, printing each workload's table as it completes.
fn run_all(
    plan: &RunPlan<'_>,
    workloads: &[Workload],
    backends: &[String],
) -> (Grouped, Vec<String>) {
    let multi = MultiProgress::new();
    let overall = multi.add(ProgressBar::new((workloads.len() * backends.len()) as u64));
    overall.set_style(style("{prefix:<24} [{bar:30}] {pos}/{len} runs, {elapsed}"));
    overall.set_prefix("statestore compare");
    let mut grouped = Vec::new();
    let mut failures = Vec::new();
    for &workload in workloads {
        let mut results = Vec::new();
        for backend in backends {
            let bar = multi.add(ProgressBar::new(1));
            bar.set_style(style("{prefix:<24} [{bar:30}] {msg}"));
            bar.set_prefix(format!("{workload} on {backend}"));
            match measure(plan, workload, backend, &bar) {
                Ok(measurement) => results.push(measurement),
                Err(err) => failures.push(format!("{workload} on {backend}: {err}")),
            }
            bar.finish_and_clear();
            multi.remove(&bar);
            overall.inc(1);
        }
        report::set_ratios(&mut results);
        multi.suspend(|| {
            let table = report::table(workload, &results);
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), table.as_bytes());
        });
        grouped.push((workload, results));
    }
    overall.finish_and_clear();
    (grouped, failures)
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

fn recommend_all(grouped: &Grouped, require: &[Requirement]) -> Vec<Recommendation> {
    let _ = if require.is_empty() {
        outln!(
            "\nRecommendations (from the numbers above; --require durable or \
             --require larger-than-memory rules out engines that do not qualify):"
        )
    } else {
        let names: Vec<&str> = require.iter().map(|r| r.name()).collect();
        outln!(
            "\nRecommendations among the engines that are {} (from the numbers above):",
            names.join(" and ")
        )
    };
    let mut recommendations = Vec::new();
    for (workload, results) in grouped {
        match report::recommend(workload.name(), results, require) {
            Some(rec) => {
                let _ = outln!("  {:<12} -> {}: {}", rec.workload, rec.backend, rec.reason);
                recommendations.push(rec);
            }
            None if !results.is_empty() => {
                let _ = outln!(
                    "  {:<12} -> none: no backend measured meets the requirements",
                    workload.name()
                );
            }
            None => {}
        }
    }
    recommendations
}

fn write_outputs(
    out: &Path,
    plan: &RunPlan<'_>,
    settings: &RunSettings,
    grouped: &Grouped,
    recs: &[Recommendation],
) -> CompareResult {
    let results: Vec<Measurement> = grouped
        .iter()
        .flat_map(|(_, rows)| rows.iter().cloned())
        .collect();
    let machine = Machine::detect();
    let report = Report {
        finished_unix_secs: output::now_unix_secs(),
        machine: machine.clone(),
        records: plan.scale.records,
        ycsb_records: plan.scale.ycsb_records,
        duration_secs: plan.duration.as_secs_f64(),
        settings: settings.clone(),
        results: &results,
        recommendations: recs,
    };
    output::write_json(out, &report)?;
    output::write_csv(out, &results)?;
    for (workload, rows) in grouped.iter().filter(|(_, rows)| !rows.is_empty()) {
        let title = format!("{workload}: {}", workload.describe());
        chart::workload_chart(&out.join(format!("{workload}.svg")), &title, rows)
            .map_err(|err| format!("drawing {workload}.svg: {err}"))?;
    }
    let named: Vec<(&str, Vec<Measurement>)> = grouped
        .iter()
        .map(|(w, rows)| (w.name(), rows.clone()))
        .collect();
    let subtitle = format!(
        "{} records ({} YCSB), {}s per run, {} ({} cores)",
        plan.scale.records,
        plan.scale.ycsb_records,
        plan.duration.as_secs_f64(),
        machine.cpu,
        machine.cores
    );
    for (file, scope) in [
        ("summary.svg", chart::Summary::All),
        ("summary-disk.svg", chart::Summary::Disk),
    ] {
        chart::summary_chart(&out.join(file), &named, &subtitle, scope)
            .map_err(|err| format!("drawing {file}: {err}"))?;
    }
    let _ = outln!(
        "\nwrote {0}/results.json, {0}/results.csv, {0}/summary.svg, {0}/summary-disk.svg and \
         one SVG chart per workload",
        out.display()
    );
    Ok(())
}
