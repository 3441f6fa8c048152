//! Reads the criterion results of the ratio benches and prints each ratio against its target,
//! and each backend of the workload groups (the `workloads` bench, or a backend crate's bench
//! made with `statestore_benches::criterion_workloads!`) against the best of its group.
//!
//! ```text
//! cargo bench -p statestore-benches --bench abstraction --bench changelog --bench restore \
//!     --bench memory_vs_btreemap
//! cargo run -p statestore-benches --bin bench-ratios [CRITERION_DIR]
//! ```
//! `CRITERION_DIR` defaults to `$CARGO_TARGET_DIR/criterion`, else `target/criterion`. Ratios
//! compare two benchmarks of one group, which ran in one process one after the other.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

/// Mean seconds per record of each benchmark, by criterion's full id (`group/function/value`).
type Results = BTreeMap<String, f64>;

fn criterion_dir() -> PathBuf {
    if let Some(dir) = std::env::args_os().nth(1) {
        return PathBuf::from(dir);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| PathBuf::from("target"), PathBuf::from)
        .join("criterion")
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

/// Walks `dir` for `new/benchmark.json` files and reads each one's mean time per record.
fn collect(dir: &Path, out: &mut Results) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|name| name == "new") {
            if let Some((id, secs)) = per_record(&path) {
                out.insert(id, secs);
            }
        } else {
            collect(&path, out);
        }
    }
}

fn per_record(new_dir: &Path) -> Option<(String, f64)> {
    let benchmark = read_json(&new_dir.join("benchmark.json"))?;
    let estimates = read_json(&new_dir.join("estimates.json"))?;
    let id = benchmark["full_id"].as_str()?.to_string();
    let elements = benchmark["throughput"]["Elements"].as_f64().unwrap_or(1.0);
    let nanos = estimates["mean"]["point_estimate"].as_f64()?;
    Some((id, nanos / 1e9 / elements.max(1.0)))
}

/// Prints the rate of `fast` over the rate of `base` (higher is faster for `fast`) with the
/// target, when both were measured.
fn rate_ratio(results: &Results, label: &str, fast: &str, base: &str, target: &str) {
    if let (Some(a), Some(b)) = (results.get(fast), results.get(base)) {
        println!("{label:<44} {:>7.3}x   (target {target})", b / a);
    }
}

fn print_abstraction(results: &Results) {
    println!(
        "\nabstraction overhead (store-API time / native time per op; target <= 1.03x disk, <= 1.10x memory)"
    );
    for workload in ["get_hit", "put_random", "range_10"] {
        for backend in ["memory", "rocksdb", "sled", "redb"] {
            let group = format!("abstraction_{workload}/{backend}");
            let (api, native) = (format!("{group}/store-api"), format!("{group}/native"));
            if let (Some(api), Some(native)) = (results.get(&api), results.get(&native)) {
                let target = if backend == "memory" {
                    "1.10x"
                } else {
                    "1.03x"
                };
                println!(
                    "{:<44} {:>7.3}x   (target <= {target})",
                    format!("{workload} {backend}"),
                    api / native
                );
            }
        }
    }
}

fn print_changelog(results: &Results) {
    println!("\nchangelog overhead (logged throughput / unlogged throughput)");
    for workload in ["put_random", "ycsb_a"] {
        for backend in ["memory", "rocksdb", "sled", "redb"] {
            let group = format!("changelog_{workload}/{backend}");
            let unlogged = format!("{group}/unlogged");
            let label = format!("{workload} {backend} file log");
            rate_ratio(
                results,
                &label,
                &format!("{group}/logged-file"),
                &unlogged,
                ">= 0.8x",
            );
            let label = format!("{workload} {backend} kafka");
            rate_ratio(
                results,
                &label,
                &format!("{group}/logged-kafka"),
                &unlogged,
                ">= 0.5x",
            );
        }
    }
}

fn print_restore(results: &Results) {
    println!(
        "\nrestore (records/s; replay / load_random; target >= 1M records/s into memory, >= 0.8x)"
    );
    if let Some(scan) = results.get("restore/log/raw_scan") {
        println!(
            "{:<44} {:>12.0} records/s",
            "raw scan of the log",
            1.0 / scan
        );
    }
    for backend in ["memory", "rocksdb", "sled", "redb"] {
        let replay = format!("restore/{backend}");
        if let Some(secs) = results.get(&replay) {
            println!(
                "{:<44} {:>12.0} records/s",
                format!("replay into {backend}"),
                1.0 / secs
            );
        }
        let batches = format!("restore/{backend}/replay");
        if let Some(secs) = results.get(&batches) {
            println!(
                "{:<44} {:>12.0} records/s",
                format!("replay into {backend}, bulk loading off"),
                1.0 / secs
            );
            rate_ratio(
                results,
                &format!("{backend}: bulk load / replay"),
                &replay,
                &batches,
                ">= 2x",
            );
        }
        let label = format!("{backend}: replay / load_random");
        rate_ratio(
            results,
            &label,
            &replay,
            &format!("restore/{backend}/load_random"),
            ">= 0.8x",
        );
    }
}

fn print_memory(results: &Results) {
    println!("\nmemory backend vs BTreeMap (backend time / BTreeMap time per op; target <= 1.2x)");
    for (id, btree) in results.iter().filter(|(id, _)| id.ends_with("/btreemap")) {
        let group = id.trim_end_matches("/btreemap");
        if let Some(memory) = results.get(&format!("{group}/memory-backend")) {
            let workload = group.trim_start_matches("memory_vs_btreemap_");
            println!("{workload:<44} {:>7.3}x   (target <= 1.2x)", memory / btree);
        }
    }
}

/// Every backend of each workload group (`statestore_benches::harness`: the `workloads` bench
/// here, or a backend crate's) against the fastest of the group, as `compare` reports it.
/// Ids with a second part (`restore/memory/load_random`) are the project's baselines, not
/// backends of the group.
fn print_workloads(results: &Results) {
    let mut printed_header = false;
    let workloads = statestore_benches::Workload::ALL.map(|workload| workload.name());
    let groups = workloads.iter().chain(&statestore_benches::harness::GROUPS);
    for workload in groups {
        let prefix = format!("{workload}/");
        let rows: Vec<(&str, f64)> = results
            .iter()
            .filter_map(|(id, secs)| Some((id.strip_prefix(&prefix)?, *secs)))
            .filter(|(backend, _)| !backend.contains('/'))
            .collect();
        let Some(best) = rows.iter().map(|(_, secs)| *secs).reduce(f64::min) else {
            continue;
        };
        if !printed_header {
            println!(
                "\nworkloads (records per second, windows for window_fetch; throughput / the \
                 best of the workload)"
            );
            printed_header = true;
        }
        for (backend, secs) in rows {
            println!(
                "{:<44} {:>12.0}/s {:>7.3}x",
                format!("{workload} {backend}"),
                1.0 / secs,
                best / secs
            );
        }
    }
}

fn main() -> ExitCode {
    let dir = criterion_dir();
    let mut results = Results::new();
    collect(&dir, &mut results);
    if results.is_empty() {
        eprintln!(
            "no criterion results under {}; run the benches first",
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    print_workloads(&results);
    print_abstraction(&results);
    print_changelog(&results);
    print_restore(&results);
    print_memory(&results);
    ExitCode::SUCCESS
}
