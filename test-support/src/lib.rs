//! What the workspace's Kafka integration tests share: the broker they run against, or one line
//! saying there is none.
//!
//! Every Kafka test starts with [`kafka_bootstrap`]. With `STATESTORE_KAFKA_BOOTSTRAP` set, it
//! returns the broker's address. Without it, the test returns at once and passes, and the test
//! binary prints one line saying how to run its Kafka tests: a newcomer's plain `cargo test
//! --workspace` passes and says what it left out. `scripts/test.sh` sets
//! `STATESTORE_REQUIRE_KAFKA=1`, under which a Kafka test without a broker fails instead, so
//! there none passes without running.

mod cluster;
mod java_producer;
mod netns;
pub mod proxy;

pub use cluster::Cluster;
pub use java_producer::{java_produce, kafka_classpath};
pub use netns::NetNamespace;
pub use proxy::FaultProxy;

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The broker's `host:port`.
pub const BOOTSTRAP_ENV: &str = "STATESTORE_KAFKA_BOOTSTRAP";
/// Set to `1` to make a Kafka test without a broker fail instead of passing without running.
pub const REQUIRE_ENV: &str = "STATESTORE_REQUIRE_KAFKA";
/// How to give the Kafka tests a broker.
pub const HOW_TO_RUN: &str = "start one with \
    `export STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)`, or run scripts/test.sh";

/// The broker's address for Kafka test `test`, or `None` when there is none and the test is
/// to return at once. The first call of a test binary prints one line: the broker used, or
/// that its Kafka tests are skipped and how to run them.
///
/// # Panics
/// Without a broker under `STATESTORE_REQUIRE_KAFKA=1`, naming `test` and saying how to start
/// one.
pub fn kafka_bootstrap(test: &str) -> Option<String> {
    let env = |name| std::env::var(name).ok();
    match decide(env(BOOTSTRAP_ENV), env(REQUIRE_ENV)) {
        Broker::Run(addr) => {
            announce_once(&format!(
                "{}: the Kafka tests run against the broker at {addr}",
                binary_name()
            ));
            Some(addr)
        }
        Broker::Skip => {
            announce_once(&format!(
                "SKIP (no broker) the Kafka tests of {}: {HOW_TO_RUN}",
                binary_name()
            ));
            None
        }
        Broker::Fail => panic!(
            "{test} needs a Kafka broker ({REQUIRE_ENV}=1) and {BOOTSTRAP_ENV} is not set: \
             {HOW_TO_RUN}"
        ),
    }
}

/// Writes `line` to the real stdout, past the test harness's capture, so `cargo test` shows it
/// for a test that passes.
pub fn announce(line: &str) {
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(format!("{line}\n").as_bytes());
    let _ = stdout.flush();
}

/// [`announce`], once per process: a test binary's tests all see the same environment.
fn announce_once(line: &str) {
    static ANNOUNCED: AtomicBool = AtomicBool::new(false);
    if !ANNOUNCED.swap(true, Ordering::Relaxed) {
        announce(line);
    }
}

/// What a Kafka test does.
#[derive(Debug, PartialEq, Eq)]
enum Broker {
    /// Runs against the broker at this address.
    Run(String),
    /// Returns at once: no broker, none required.
    Skip,
    /// Fails: no broker, and one is required.
    Fail,
}

/// What a Kafka test does, given the values of [`BOOTSTRAP_ENV`] and [`REQUIRE_ENV`].
fn decide(bootstrap: Option<String>, require: Option<String>) -> Broker {
    match bootstrap {
        Some(addr) if !addr.trim().is_empty() => Broker::Run(addr),
        _ if require.is_some_and(|v| v == "1") => Broker::Fail,
        _ => Broker::Skip,
    }
}

/// The running test binary's target name (`kafka_log` for `kafka_log-<hash>`).
fn binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe
        .as_deref()
        .and_then(Path::file_stem)
        .and_then(OsStr::to_str);
    stem.map_or_else(
        || "this test binary".to_owned(),
        |s| target_name(s).to_owned(),
    )
}

/// `stem` without the `-<16 hex digits>` cargo appends to a test binary's name.
fn target_name(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name
        }
        _ => stem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn a_named_broker_is_used_whether_required_or_not() {
        let addr = "127.0.0.1:19092";
        for require in [None, some("1"), some("0")] {
            assert_eq!(decide(some(addr), require), Broker::Run(addr.to_owned()));
        }
    }

    #[test]
    fn without_a_broker_tests_skip_unless_one_is_required() {
        for bootstrap in [None, some(""), some("  ")] {
            assert_eq!(decide(bootstrap.clone(), None), Broker::Skip);
            assert_eq!(decide(bootstrap.clone(), some("0")), Broker::Skip);
            assert_eq!(decide(bootstrap, some("1")), Broker::Fail);
        }
    }

    #[test]
    fn the_target_name_drops_cargos_hash() {
        assert_eq!(target_name("kafka_log-0123456789abcdef"), "kafka_log");
        assert_eq!(target_name("tasks_kafka-deadbeefdeadbeef"), "tasks_kafka");
        assert_eq!(target_name("failover"), "failover");
        assert_eq!(
            target_name("partitioned-wordcount"),
            "partitioned-wordcount"
        );
    }
}
