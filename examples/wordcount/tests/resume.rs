//! Kill wordcount with SIGKILL mid-run, run it again to the end, and compare the counts with
//! an uninterrupted run: they must be equal, word for word. Then the same with the tail of
//! its changelog cut at a random byte before each restart, as a power loss that took back
//! unsynced bytes leaves it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const LINES: u64 = 40_000;
/// The windowed and session modes do a read per word: fewer lines keep them to seconds.
const TIMED_LINES: u64 = 8_000;
/// The tail-cut test kills three runs after up to three progress reports each, four a second
/// at most: a run of 40 000 lines takes about five reports here, so its runs count more lines.
const CUT_LINES: u64 = 200_000;

/// A run of `mode` (`words`, `windowed` or `sessions`) over `lines` lines.
#[derive(Clone, Copy)]
struct Run<'a> {
    mode: &'a str,
    backend: &'a str,
    lines: u64,
}

impl<'a> Run<'a> {
    fn new(mode: &'a str, backend: &'a str) -> Self {
        let lines = if mode == "words" { LINES } else { TIMED_LINES };
        Run {
            mode,
            backend,
            lines,
        }
    }
}

fn wordcount(state_dir: &Path, run: Run<'_>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wordcount"));
    let lines = run.lines.to_string();
    command.args([
        "--mode",
        run.mode,
        "--backend",
        run.backend,
        "--lines",
        &lines,
        "--commit-every",
        "100",
        "--seed",
        "7",
    ]);
    command.arg("--state-dir").arg(state_dir);
    command
}

/// Runs to completion and returns stdout (the counts) and stderr.
fn run_to_end(state_dir: &Path, run: Run<'_>) -> (String, String) {
    let output = wordcount(state_dir, run)
        .arg("--print-counts")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "wordcount failed: {stderr}");
    (String::from_utf8(output.stdout).expect("utf-8"), stderr)
}

/// Starts a run, waits for its `progress_lines`-th progress report, and kills it. Returns
/// whether it was killed: `false` if it finished its lines first. A run that fails fails the
/// test, with its exit status and its stderr.
fn run_and_kill(state_dir: &Path, run: Run<'_>, progress_lines: usize) -> bool {
    let mut child = wordcount(state_dir, run)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let mut progress = 0;
    while progress < progress_lines {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => {
                progress += usize::from(line.starts_with("progress:"));
                seen.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().expect("reap");
                let done = seen.iter().any(|line| line.starts_with("done: "));
                assert!(
                    status.success() && done,
                    "wordcount failed ({status}); its stderr:\n{}",
                    seen.join("\n")
                );
                return false;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!(
                    "no progress from wordcount in 120 s; its stderr:\n{}",
                    seen.join("\n")
                );
            }
        }
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("reap");
    // A run that exited on its own between its last report and the kill was not killed.
    assert!(
        status.code().is_none_or(|code| code == 0),
        "wordcount failed ({status}); its stderr:\n{}",
        seen.join("\n")
    );
    status.code().is_none()
}

/// The line a rerun resumed at, from its stderr.
fn resumed_at(stderr: &str) -> Option<u64> {
    let line = stderr
        .lines()
        .find(|line| line.starts_with("resuming at line "))?;
    line["resuming at line ".len()..]
        .split(' ')
        .next()?
        .parse()
        .ok()
}

fn kill_and_resume(backend: &str) {
    kill_and_resume_run(Run::new("words", backend));
}

fn kill_and_resume_run(run: Run<'_>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (expected, _) = run_to_end(&dir.path().join("uninterrupted"), run);
    assert!(
        expected.lines().count() > 50,
        "too few words counted:\n{expected}"
    );

    let state = dir.path().join("interrupted");
    for progress_lines in [1, 2] {
        assert!(
            run_and_kill(&state, run, progress_lines),
            "wordcount finished before it could be killed"
        );
    }
    let (resumed, stderr) = run_to_end(&state, run);
    let at = resumed_at(&stderr).expect("the rerun did not resume");
    assert!(at > 0 && at < run.lines, "resumed at {at}, not mid-run");
    assert_eq!(
        resumed, expected,
        "counts differ after a kill and a resume at line {at}"
    );
}

#[test]
fn kill_and_resume_rocksdb() {
    kill_and_resume("rocksdb");
}

#[test]
fn kill_and_resume_redb() {
    kill_and_resume("redb");
}

#[test]
fn kill_and_resume_sled() {
    kill_and_resume("sled");
}

/// Nothing of a memory store survives the process: every run rebuilds it from the log.
#[test]
fn kill_and_resume_memory() {
    kill_and_resume("memory");
}

/// The segment files of the run's changelog, oldest first.
fn segments(state_dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for partition in std::fs::read_dir(state_dir.join("changelog")).expect("changelog dir") {
        for file in std::fs::read_dir(partition.expect("entry").path()).expect("partition") {
            let path = file.expect("entry").path();
            if path.extension().is_some_and(|ext| ext == "log") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Cuts the last segment at a random byte of its last `span` bytes (after its header).
fn cut_tail(state_dir: &Path, rng: &mut impl rand::Rng, span: u64) -> u64 {
    let last = segments(state_dir).pop().expect("a segment");
    let len = std::fs::metadata(&last).expect("segment size").len();
    let cut = rng.random_range(len.saturating_sub(span).max(16)..=len);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .expect("open the segment");
    file.set_len(cut).expect("truncate");
    len - cut
}

/// Kills the run at random moments and cuts its changelog's tail at a random byte before
/// each restart: a cut into the last commits takes back commits the store may already hold
/// (the restore then wipes and replays), a cut into a commit being written leaves a torn
/// commit that no restore may apply. Either way the final counts must be exact.
fn kill_cut_and_resume(backend: &str) {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("WORDCOUNT_CUT_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    // Printed first, so that a failure anywhere below names the seed that reproduces it.
    println!("{backend}: WORDCOUNT_CUT_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let run = Run {
        lines: CUT_LINES,
        ..Run::new("words", backend)
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (expected, _) = run_to_end(&dir.path().join("uninterrupted"), run);
    let state = dir.path().join("interrupted");
    let mut cuts = Vec::new();
    let mut killed = 0;
    for _ in 0..3 {
        // A run that finishes first is a valid case too: the cut then takes back its last
        // commits, and the next run must count those lines again.
        killed += usize::from(run_and_kill(&state, run, rng.random_range(1..=3)));
        cuts.push(cut_tail(&state, &mut rng, 4000));
    }
    assert!(killed > 0, "no run was killed mid-run");
    let (resumed, stderr) = run_to_end(&state, run);
    assert_eq!(
        resumed, expected,
        "{backend}: counts differ after kills and tail cuts of {cuts:?} bytes \
         (WORDCOUNT_CUT_SEED={seed}); last run:\n{stderr}"
    );
    println!("{backend}: exact after kills and tail cuts of {cuts:?} bytes, seed {seed}");
}

#[test]
fn kill_cut_the_log_tail_and_resume_rocksdb() {
    kill_cut_and_resume("rocksdb");
}

#[test]
fn kill_cut_the_log_tail_and_resume_memory() {
    kill_cut_and_resume("memory");
}

/// Tumbling one-minute windows of event time on a window store over RocksDB.
#[test]
fn kill_and_resume_windowed_rocksdb() {
    kill_and_resume_run(Run::new("windowed", "rocksdb"));
}

/// Activity sessions on a session store over a memory store, rebuilt from the log each run.
#[test]
fn kill_and_resume_sessions_memory() {
    kill_and_resume_run(Run::new("sessions", "memory"));
}

#[test]
fn bad_arguments_fail_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new("words", "nosuchengine");
    let output = wordcount(dir.path(), run).output().expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown backend"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
