//! `statestore compare`: run workloads on backends and recommend one per workload.

mod chart;
mod measure;
mod output;
mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use statestore_benches::{Scale, Workload};

use crate::CliResult;
use measure::{Measurement, RunPlan, measure};
use output::{Machine, Report};
use report::Recommendation;

pub use report::{bytes, thousands};

/// Records of the default (quick) run: small enough that every workload on every backend
/// finishes within 5 minutes on a 2-core machine, large enough to leave the memtables and
/// caches of the engines.
pub const DEFAULT_RECORDS: u64 = 100_000;
/// Seconds each non-load workload runs per backend in the default run.
pub const DEFAULT_DURATION_SECS: f64 = 2.0;
/// The longest `--duration` accepted, so a typo does not start a run of days.
const MAX_DURATION_SECS: f64 = 3600.0;

/// Arguments of `statestore compare`.
#[derive(Debug, Args)]
#[command(
    after_help = "Workloads: load_seq, load_random, put_random, put_durable, get_hit, \
get_miss, range_10, range_100, ycsb_a, ycsb_b, ycsb_c, ycsb_e, ycsb_f.\n\
Full scale is --records 1000000 (YCSB uses half). Load workloads always load every record; \
the others run for --duration on each backend."
)]
pub struct CompareArgs {
    /// Workloads to run, comma-separated [default: all].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_parser = parse_workload)]
    workloads: Vec<Workload>,
    /// Backends to compare, comma-separated [default: every backend in this build].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_parser = parse_backend)]
    backends: Vec<String>,
    /// Records loaded by load_* and preloaded for gets and ranges; YCSB preloads half.
    #[arg(long, default_value_t = DEFAULT_RECORDS,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    records: u64,
    /// Seconds each non-load workload runs on each backend.
    #[arg(long, default_value_t = DEFAULT_DURATION_SECS, value_parser = parse_duration)]
    duration: f64,
    /// Directory for results.json, results.csv and the SVG charts (created if missing).
    #[arg(long, default_value = "compare-results")]
    out: PathBuf,
    /// Directory the stores are created in, one fresh subdirectory per run [default: the
    /// system temp dir]. Put it on the disk you mean to deploy on.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

fn parse_workload(name: &str) -> Result<Workload, String> {
    name.parse()
        .map_err(|err: statestore_benches::UnknownWorkload| err.to_string())
}

fn parse_backend(name: &str) -> Result<String, String> {
    let known = statestore_benches::backends();
    if known.contains(&name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "unknown backend {name:?}; this build has: {}",
            known.join(", ")
        ))
    }
}

fn parse_duration(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if secs.is_finite() && secs > 0.0 && secs <= MAX_DURATION_SECS {
        Ok(secs)
    } else {
        Err(format!(
            "the duration must be above 0 and at most {MAX_DURATION_SECS} seconds"
        ))
    }
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

/// Runs the comparison and writes its results.
///
/// # Errors
/// An unusable output directory (checked before anything runs), a file that cannot be
/// written, or, after every other run finished and the results are written, the runs that
/// failed.
pub fn run(args: &CompareArgs) -> CliResult {
    let workloads = if args.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        dedup(&args.workloads)
    };
    let backends = if args.backends.is_empty() {
        statestore_benches::backends()
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        dedup(&args.backends)
    };
    std::fs::create_dir_all(&args.out).map_err(|err| {
        format!(
            "cannot create the output directory {}: {err}",
            args.out.display()
        )
    })?;
    let plan = RunPlan {
        scale: Scale::with_records(args.records),
        duration: Duration::from_secs_f64(args.duration),
        data_dir: args.data_dir.as_deref(),
    };
    let started = Instant::now();
    outln!(
        "statestore compare: {} workloads x {} backends, {} records ({} for YCSB), {}s per timed run",
        workloads.len(),
        backends.len(),
        plan.scale.records,
        plan.scale.ycsb_records,
        args.duration
    )?;
    // From here on a reader that went away does not stop the run: the files still get written.
    let (grouped, failures) = run_all(&plan, &workloads, &backends);
    let recommendations = recommend_all(&grouped);
    write_outputs(&args.out, &plan, &grouped, &recommendations)?;
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

fn recommend_all(grouped: &Grouped) -> Vec<Recommendation> {
    let _ = outln!("\nRecommendations (from the numbers above):");
    let recommendations: Vec<Recommendation> = grouped
        .iter()
        .filter_map(|(workload, results)| report::recommend(workload.name(), results))
        .collect();
    for rec in &recommendations {
        let _ = outln!("  {:<12} -> {}: {}", rec.workload, rec.backend, rec.reason);
    }
    recommendations
}

fn write_outputs(
    out: &Path,
    plan: &RunPlan<'_>,
    grouped: &Grouped,
    recs: &[Recommendation],
) -> CliResult {
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
