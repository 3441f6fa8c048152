//! What survives a real crash: a child process (this test binary, running the ignored
//! `crash_child` test) writes, then aborts without closing; the parent reopens the store.

use std::path::Path;
use std::process::Command;

use statestore_sled::{Config, SledStore};
use store_api::{KeyValueStore, WriteBatch};

const DIR_VAR: &str = "STATESTORE_SLED_CRASH_DIR";
const MODE_VAR: &str = "STATESTORE_SLED_CRASH_MODE";

fn batch(prefix: &str) -> WriteBatch {
    (0..100)
        .map(|i| store_api::BatchOp::Put {
            key: format!("{prefix}{i:03}").into_bytes(),
            value: vec![7; 64],
        })
        .collect()
}

fn count(store: &SledStore, prefix: &str) -> usize {
    store.prefix_scan(prefix.as_bytes()).expect("scan").count()
}

/// `manual`: no background flushing, so only `flush` writes to disk.
fn flush_every_ms(mode: &str) -> Option<u64> {
    match mode {
        "manual" => None,
        _ => Some(500),
    }
}

/// The child: batch `a`, flush, batch `b` and a put, then abort with everything still open.
#[test]
#[ignore = "run as a child process by the crash tests"]
fn crash_child() {
    let dir = std::env::var(DIR_VAR).expect("run by the crash tests");
    let mode = std::env::var(MODE_VAR).expect("run by the crash tests");
    let config = Config {
        flush_every_ms: flush_every_ms(&mode),
        ..Config::default()
    };
    let store = SledStore::open(Path::new(&dir), config).unwrap();
    store.write(batch("a")).unwrap();
    store.flush().unwrap();
    store.write(batch("b")).unwrap();
    store.put(b"c", b"last").unwrap();
    std::process::abort();
}

fn crash_and_reopen(mode: &str) -> (tempfile::TempDir, SledStore) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let status = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, dir.path())
        .env(MODE_VAR, mode)
        .status()
        .expect("run the child");
    assert!(!status.success(), "the child must die by abort");
    let store = SledStore::open(dir.path(), Config::default()).expect("reopen after crash");
    (dir, store)
}

#[test]
fn flushed_writes_survive_and_unflushed_batches_are_whole() {
    for mode in ["manual", "background"] {
        let (_dir, store) = crash_and_reopen(mode);
        assert_eq!(count(&store, "a"), 100, "{mode}: flushed batch survives");
        let b = count(&store, "b");
        assert!(
            b == 0 || b == 100,
            "{mode}: unflushed batch is all or nothing, saw {b}"
        );
    }
}
