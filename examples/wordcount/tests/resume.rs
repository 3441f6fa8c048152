//! Kill wordcount with SIGKILL mid-run, run it again to the end, and compare the counts with
//! an uninterrupted run: they must be equal, word for word.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const LINES: &str = "40000";

fn wordcount(state_dir: &Path, backend: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wordcount"));
    command.args([
        "--backend",
        backend,
        "--lines",
        LINES,
        "--commit-every",
        "100",
        "--seed",
        "7",
    ]);
    command.arg("--state-dir").arg(state_dir);
    command
}

/// Runs to completion and returns stdout (the counts) and stderr.
fn run_to_end(state_dir: &Path, backend: &str) -> (String, String) {
    let output = wordcount(state_dir, backend)
        .arg("--print-counts")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "wordcount failed: {stderr}");
    (String::from_utf8(output.stdout).expect("utf-8"), stderr)
}

/// Starts a run, waits for its `progress_lines`-th progress report, and kills it.
fn run_and_kill(state_dir: &Path, backend: &str, progress_lines: usize) {
    let mut child = wordcount(state_dir, backend)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.starts_with("progress:") && tx.send(line).is_err() {
                return;
            }
        }
    });
    for _ in 0..progress_lines {
        let line = rx.recv_timeout(Duration::from_secs(120));
        assert!(line.is_ok(), "no progress from wordcount");
    }
    let finished = child.try_wait().expect("try_wait");
    assert!(
        finished.is_none(),
        "wordcount finished before it could be killed"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
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
    let dir = tempfile::tempdir().expect("tempdir");
    let (expected, _) = run_to_end(&dir.path().join("uninterrupted"), backend);
    assert!(
        expected.lines().count() > 50,
        "too few words counted:\n{expected}"
    );

    let state = dir.path().join("interrupted");
    run_and_kill(&state, backend, 1);
    run_and_kill(&state, backend, 2);
    let (resumed, stderr) = run_to_end(&state, backend);
    let at = resumed_at(&stderr).expect("the rerun did not resume");
    assert!(at > 0 && at < 40_000, "resumed at {at}, not mid-run");
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

#[test]
fn bad_arguments_fail_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = wordcount(dir.path(), "nosuchengine").output().expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown backend"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
