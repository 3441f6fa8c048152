//! What the example's process tests share: the binary, unique names, one-shot commands.

pub mod instances;
pub mod outputs;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// The example binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_partitioned-wordcount");

/// A name no other run has used: `<prefix>-<pid>-<time>`.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Runs the binary to completion and returns its stdout.
pub fn output(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8")
}
