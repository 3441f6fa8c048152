//! What survives a real crash in sled with background flushing off (`flush_every_ms: null`),
//! when only `flush` writes to disk. The default (flushing every 500 ms) is checked by the
//! conformance suite's crash case.

use std::path::Path;

use statestore_conformance::crash;
use statestore_sled::{Config, SledStore};
use store_api::{KeyValueStore, Result};

/// Opens with background flushing off for `"manual"`, with the defaults otherwise.
fn open(dir: &Path, mode: &str) -> Result<Box<dyn KeyValueStore>> {
    let mut config = Config::default();
    if mode == "manual" {
        config.flush_every_ms = None;
    }
    Ok(Box::new(SledStore::open(dir, config)?))
}

#[test]
#[ignore = "run as a child process by the crash tests"]
fn sled_crash_child() {
    crash::child(open);
}

#[test]
fn manual_flush_keeps_flushed_writes_and_whole_batches() {
    let reopen = |dir: &Path| open(dir, "default");
    crash::run_child_then_reopen("sled_crash_child", "manual", &reopen)
        .assert_flushed_kept_and_batches_whole("manual");
}
