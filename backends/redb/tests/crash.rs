//! What survives a real crash in redb's `Durability::Immediate` mode: every write that
//! returned. The default mode (`OnFlush`) is checked by the conformance suite's crash case.

use std::path::Path;

use statestore_conformance::crash;
use statestore_redb::{Config, Durability, RedbStore};
use store_api::{KeyValueStore, Result};

/// Opens with the durability named by `mode`: `"immediate"` or the default.
fn open(dir: &Path, mode: &str) -> Result<Box<dyn KeyValueStore>> {
    let durability = match mode {
        "immediate" => Durability::Immediate,
        _ => Durability::default(),
    };
    let config = Config {
        durability,
        ..Config::default()
    };
    Ok(Box::new(RedbStore::open(dir, config)?))
}

#[test]
#[ignore = "run as a child process by the crash tests"]
fn redb_crash_child() {
    crash::child(open);
}

#[test]
fn immediate_keeps_every_returned_write() {
    let reopen = |dir: &Path| open(dir, "default");
    crash::run_child_then_reopen("redb_crash_child", "immediate", &reopen)
        .assert_everything_kept("immediate");
}
