//! The `statestore` binary, run for real: argument errors, `compare` at a tiny scale, and
//! `inspect`/`dump`/`restore` on a state directory made by the wordcount example.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use statestore_changelog::StateDirectory;

fn statestore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_statestore"))
        .args(args)
        .output()
        .expect("run statestore")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts success and returns stdout.
fn ok(args: &[&str]) -> String {
    let output = statestore(args);
    assert!(
        output.status.success(),
        "{args:?} failed: {}",
        stderr(&output)
    );
    stdout(&output)
}

/// Asserts failure with `code` and a message containing `message`, and no panic.
fn fails(args: &[&str], code: i32, message: &str) {
    let output = statestore(args);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        err.contains(message),
        "{args:?}: expected {message:?} in {err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

#[test]
fn every_subcommand_has_help() {
    assert!(ok(&["--help"]).contains("compare"));
    for sub in ["compare", "inspect", "dump", "restore"] {
        let help = ok(&[sub, "--help"]);
        assert!(
            help.contains(&format!("Usage: statestore {sub}")),
            "{sub}: {help}"
        );
    }
}

#[test]
fn bad_arguments_exit_non_zero_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    fails(&["frobnicate"], 2, "unrecognized subcommand");
    fails(
        &["compare", "--workloads", "ycsb_z"],
        2,
        "unknown workload \"ycsb_z\"",
    );
    fails(
        &["compare", "--backends", "leveldb"],
        2,
        "unknown backend \"leveldb\"",
    );
    fails(&["compare", "--duration", "0"], 2, "must be above 0");
    fails(
        &["compare", "--require", "fast"],
        2,
        "unknown requirement \"fast\"",
    );
    fails(
        &["compare", "--options", "{rocksdb"],
        2,
        "options must be a JSON object",
    );
    fails(
        &["compare", "--options", r#"{"leveldb": {}}"#, "--out", d],
        1,
        "unknown backend \"leveldb\"; registered: memory",
    );
    fails(
        &["compare", "--duration", "soon"],
        2,
        "not a number of seconds",
    );
    fails(&["compare", "--records", "0"], 2, "--records");
    fails(
        &["compare", "--key-size", "8"],
        2,
        "--key-size must be 16 to 4096",
    );
    fails(
        &["compare", "--threads", "0"],
        2,
        "--threads must be 1 to 256",
    );
    fails(
        &["compare", "--value-size", "2GiB"],
        2,
        "--value-size must be at most",
    );
    fails(
        &["compare", "--state-size", "2TB"],
        2,
        "is not a number of bytes",
    );
    fails(
        &["compare", "--cache-size", "lots"],
        2,
        "is not a number of bytes",
    );
    fails(
        &["compare", "--records", "10", "--state-size", "1MiB"],
        2,
        "cannot be used with",
    );
    fails(
        &["compare", "--records", "10", "--out", "/dev/null/x"],
        1,
        "cannot create the output directory",
    );
    fails(&["dump"], 2, "required");
    fails(&["inspect", "/no/such/state/dir"], 1, "is not a directory");
    fails(&["dump", d, "counts"], 1, "no application");
    fails(&["dump", d, "counts", "--task", "zero"], 2, "task id");
    let restore = [
        "restore",
        d,
        "--application",
        "app",
        "--store",
        "s",
        "--backend",
    ];
    fails(
        &[&restore[..], &["memory"]].concat(),
        2,
        "memory backend keeps nothing",
    );
    fails(
        &[&restore[..], &["rocksdb", "--options", "{"]].concat(),
        2,
        "not valid JSON",
    );
    fails(
        &[&restore[..], &["rocksdb"]].concat(),
        1,
        "cannot read the log directory",
    );
    let bad_app = [
        "restore",
        d,
        "--application",
        "a/b",
        "--store",
        "s",
        "--backend",
        "redb",
    ];
    fails(&bad_app, 1, "application id \"a/b\" is not allowed");
    let missing_task = [&restore[..], &["sled", "--task", "0_3"]].concat();
    fails(&missing_task, 1, "no log of app-s-changelog partition 3");
    // A failed restore creates nothing in the state directory.
    assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
}

#[test]
fn compare_takes_sizes_threads_and_a_cache_size() {
    let out = tempfile::tempdir().expect("tempdir");
    let out_dir = out.path().join("results");
    let printed = ok(&[
        "compare",
        "--workloads",
        "load_seq,get_hit",
        "--backends",
        "memory,rocksdb",
        "--key-size",
        "32",
        "--value-size",
        "100",
        "--threads",
        "2",
        "--state-size",
        "64KiB",
        "--cache-size",
        "1MiB",
        "--duration",
        "0.05",
        "--out",
        out_dir.to_str().expect("utf-8"),
    ]);
    assert!(printed.contains("2 threads"), "{printed}");
    assert!(printed.contains("state per store: 63.9 KiB"), "{printed}");
    assert!(
        printed.contains("memory holds the whole state"),
        "{printed}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("results.json")).expect("json"))
            .expect("valid json");
    assert_eq!(json["records"], (64 << 10) / 132);
    let settings = &json["settings"];
    assert_eq!(
        (
            &settings["key_len"],
            &settings["value_len"],
            &settings["threads"]
        ),
        (
            &serde_json::json!(32),
            &serde_json::json!(100),
            &serde_json::json!(2)
        )
    );
    assert_eq!(json["results"].as_array().map(Vec::len), Some(4));
}

#[test]
fn compare_writes_results_charts_and_recommendations() {
    let out = tempfile::tempdir().expect("tempdir");
    let out_dir = out.path().join("results");
    let args = ["compare", "--records", "400", "--duration", "0.05", "--out"];
    let printed = ok(&[&args[..], &[out_dir.to_str().expect("utf-8")]].concat());
    let workloads = [
        "load_seq",
        "load_random",
        "put_random",
        "put_durable",
        "get_hit",
        "get_miss",
        "range_10",
        "range_100",
        "ycsb_a",
        "ycsb_b",
        "ycsb_c",
        "ycsb_e",
        "ycsb_f",
    ];
    let backends = ["memory", "rocksdb", "sled", "redb"];
    assert!(printed.contains("Recommendations"), "{printed}");
    for workload in workloads {
        assert!(
            printed.contains(&format!("== {workload}:")),
            "no table for {workload}"
        );
        assert!(
            printed.contains(&format!("  {workload:<12} -> ")),
            "no pick for {workload}"
        );
    }

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("results.json")).expect("json"))
            .expect("valid json");
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), workloads.len() * backends.len());
    for result in results {
        assert!(
            result["ops_per_sec"].as_f64().is_some_and(|ops| ops > 0.0),
            "{result}"
        );
        assert!(
            result["p99_us"].as_f64() >= result["p50_us"].as_f64(),
            "{result}"
        );
    }
    for workload in workloads {
        let best = results.iter().filter(|r| r["workload"] == workload);
        let ones = best
            .filter(|r| r["ratio_to_best"].as_f64() == Some(1.0))
            .count();
        assert_eq!(ones, 1, "{workload} has one best backend");
    }
    assert_eq!(
        json["recommendations"].as_array().map(Vec::len),
        Some(workloads.len())
    );

    let csv = std::fs::read_to_string(out_dir.join("results.csv")).expect("csv");
    assert!(csv.starts_with("workload,backend,"));
    assert_eq!(csv.lines().count(), 1 + workloads.len() * backends.len());
    for chart in workloads
        .iter()
        .map(|w| format!("{w}.svg"))
        .chain(["summary.svg".into()])
    {
        let svg = std::fs::read_to_string(out_dir.join(&chart)).expect(&chart);
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{chart}"
        );
        assert!(
            backends.iter().all(|b| svg.contains(b)),
            "{chart} names every backend"
        );
    }
    let disk = std::fs::read_to_string(out_dir.join("summary-disk.svg")).expect("disk chart");
    assert!(disk.starts_with("<svg") && disk.trim_end().ends_with("</svg>"));
    assert!(
        ["rocksdb", "sled", "redb"].iter().all(|b| disk.contains(b)) && !disk.contains("memory"),
        "summary-disk.svg charts the disk engines only"
    );
}

/// The wordcount example's binary, built next to this one (`cargo test --workspace` builds it,
/// as does `cargo build -p wordcount`).
fn wordcount() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_statestore")).with_file_name("wordcount");
    assert!(
        bin.exists(),
        "{} is missing: build the example first with `cargo build -p wordcount`",
        bin.display()
    );
    bin
}

/// Runs wordcount on rocksdb and returns its printed counts, `word -> count`.
fn run_wordcount(state_dir: &Path, lines: u64) -> BTreeMap<String, u64> {
    let output = Command::new(wordcount())
        .arg("--state-dir")
        .arg(state_dir)
        .args([
            "--lines",
            &lines.to_string(),
            "--backend",
            "rocksdb",
            "--print-counts",
        ])
        .output()
        .expect("run wordcount");
    assert!(output.status.success(), "wordcount: {}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| {
            let (word, count) = line.split_once('\t').expect("word<TAB>count");
            (word.to_string(), count.parse().expect("count"))
        })
        .collect()
}

/// `statestore restore` of wordcount's `counts` store in `state_dir` into `backend`, with
/// `extra` arguments; asserts success and returns stdout.
fn restore_counts(state_dir: &str, backend: &str, extra: &[&str]) -> String {
    let args = [
        "restore",
        state_dir,
        "--application",
        "wordcount",
        "--store",
        "counts",
        "--backend",
        backend,
    ];
    ok(&[&args[..], extra].concat())
}

/// `dump` output as `backend -> (key -> value)`.
fn dump(state_dir: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut sections = BTreeMap::new();
    let mut current = String::new();
    for line in ok(&["dump", state_dir, "counts", "--application", "wordcount"]).lines() {
        if let Some(header) = line.strip_prefix("# task 0_0, backend ") {
            current = header.split(',').next().expect("backend").to_string();
            continue;
        }
        let (key, value) = line.split_once('\t').expect("key<TAB>value");
        sections
            .entry(current.clone())
            .or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
    }
    sections
}

#[test]
fn inspect_dump_and_restore_a_wordcount_state_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let counts = run_wordcount(dir.path(), 3000);
    assert!(counts.len() > 10, "wordcount counted words");
    let d = dir.path().to_str().expect("utf-8 path");

    let inspected = ok(&["inspect", d]);
    for expected in [
        "application wordcount (not running)",
        "task 0_0",
        "checkpoint: wordcount-counts-changelog partition 0 at offset",
        "store counts",
        "backend rocksdb",
        "checkpointed at",
        "wordcount-counts-changelog-0",
    ] {
        assert!(
            inspected.contains(expected),
            "{expected:?} missing from:\n{inspected}"
        );
    }

    let original = dump(d);
    let rocksdb = &original["rocksdb"];
    assert_eq!(rocksdb["meta/next_line"], format!("0x{:016x}", 3000));
    for (word, count) in &counts {
        assert_eq!(
            rocksdb[&format!("word/{word}")],
            format!("0x{count:016x}"),
            "{word}"
        );
    }
    assert_eq!(rocksdb.len(), counts.len() + 1);

    // Into another backend: a full replay, whatever the task's checkpoint says.
    let restored = restore_counts(d, "redb", &[]);
    assert!(restored.contains("(full replay)"), "{restored}");
    assert_eq!(dump(d)["redb"], *rocksdb);
    // Again: nothing after the checkpoint.
    let again = restore_counts(d, "redb", &[]);
    assert!(
        again.contains("restored 0 records") && again.contains("after the checkpoint"),
        "{again}"
    );
    // --fresh rebuilds the original store from nothing, to the same contents.
    let fresh = restore_counts(d, "rocksdb", &["--fresh", "--task", "0_0"]);
    assert!(fresh.contains("(full replay)"), "{fresh}");
    assert_eq!(dump(d)["rocksdb"], *rocksdb);
}

#[test]
fn a_running_application_is_reported_and_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    run_wordcount(dir.path(), 200);
    let d = dir.path().to_str().expect("utf-8 path");
    let running = StateDirectory::open(dir.path(), "wordcount").expect("lock the application");
    let inspected = ok(&["inspect", d]);
    let holder = format!("running, locked by process {}", std::process::id());
    assert!(inspected.contains(&holder), "{inspected}");
    fails(&["dump", d, "counts"], 1, "stop it first");
    let restore = [
        "restore",
        d,
        "--application",
        "wordcount",
        "--store",
        "counts",
        "--backend",
        "redb",
    ];
    fails(&restore, 1, "stop it first");
    drop(running);
    assert!(ok(&["inspect", d]).contains("(not running)"));
}

/// Runs `program` with `args` and its stdout a pipe whose reader is already gone, as in
/// `statestore inspect DIR | head -0`; returns its exit status and stderr.
fn into_closed_pipe(program: &Path, args: &[&str]) -> (std::process::ExitStatus, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = Command::new(program)
        .args(args)
        .stdout(writer)
        .output()
        .expect("run with a closed stdout");
    (output.status, stderr(&output))
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    run_wordcount(dir.path(), 300);
    let state_dir = dir.path().to_str().expect("utf-8 path");
    let statestore = Path::new(env!("CARGO_BIN_EXE_statestore"));
    let runs: [(&Path, Vec<&str>); 3] = [
        (statestore, vec!["inspect", state_dir]),
        (
            statestore,
            vec!["dump", state_dir, "counts", "--application", "wordcount"],
        ),
        (
            &wordcount(),
            vec!["--state-dir", state_dir, "--lines", "300", "--print-counts"],
        ),
    ];
    for (program, args) in &runs {
        let (status, err) = into_closed_pipe(program, args);
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(status.success(), "{args:?} failed: {err}");
    }
}
