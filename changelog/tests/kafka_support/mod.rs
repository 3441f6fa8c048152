//! Shared by the Kafka integration tests: finding the broker, unique topic names, and a private
//! broker that a test can stop and restart (`Cluster`).
//!
//! The tests run against the broker named by `STATESTORE_KAFKA_BOOTSTRAP` (start one with
//! `export STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)`); without it they pass
//! without running, after one SKIP line (see `statestore_test_support`).

#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different part of this module"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use statestore_changelog::KafkaConfig;
pub use statestore_test_support::{Cluster, announce, kafka_bootstrap as bootstrap};

/// A name no other test run has used: `<prefix>-<pid>-<time>-<counter>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// A config for `store_name` of a fresh application on `bootstrap`, with short timeouts.
pub fn config(bootstrap: &str, store_name: &str) -> KafkaConfig {
    KafkaConfig {
        bootstrap_servers: bootstrap.to_owned(),
        application_id: unique("test"),
        store_name: store_name.to_owned(),
        produce_timeout_ms: 10_000,
        admin_timeout_ms: 10_000,
        ..KafkaConfig::default()
    }
}
