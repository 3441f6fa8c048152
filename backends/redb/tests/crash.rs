//! What survives a real crash: a child process (this test binary, running the ignored
//! `crash_child` test) writes, then aborts without closing; the parent reopens the store.

use std::path::Path;
use std::process::Command;

use statestore_redb::{Config, Durability, RedbStore};
use store_api::{KeyValueStore, WriteBatch};

const DIR_VAR: &str = "STATESTORE_REDB_CRASH_DIR";
const MODE_VAR: &str = "STATESTORE_REDB_CRASH_MODE";

fn batch(prefix: &str) -> WriteBatch {
    (0..100)
        .map(|i| store_api::BatchOp::Put {
            key: format!("{prefix}{i:03}").into_bytes(),
            value: vec![7; 64],
        })
        .collect()
}

fn count(store: &RedbStore, prefix: &str) -> usize {
    store.prefix_scan(prefix.as_bytes()).expect("scan").count()
}

fn durability(mode: &str) -> Durability {
    match mode {
        "immediate" => Durability::Immediate,
        _ => Durability::OnFlush,
    }
}

/// The child: batch `a`, flush, batch `b` and a put, then abort with everything still open.
#[test]
#[ignore = "run as a child process by the crash tests"]
fn crash_child() {
    let dir = std::env::var(DIR_VAR).expect("run by the crash tests");
    let mode = std::env::var(MODE_VAR).expect("run by the crash tests");
    let config = Config {
        durability: durability(&mode),
        ..Config::default()
    };
    let store = RedbStore::open(Path::new(&dir), config).unwrap();
    store.write(batch("a")).unwrap();
    store.flush().unwrap();
    store.write(batch("b")).unwrap();
    store.put(b"c", b"last").unwrap();
    std::process::abort();
}

fn crash_and_reopen(mode: &str) -> (tempfile::TempDir, RedbStore) {
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
    let store = RedbStore::open(dir.path(), Config::default()).expect("reopen after crash");
    (dir, store)
}

#[test]
fn on_flush_keeps_flushed_writes_and_whole_batches() {
    let (_dir, store) = crash_and_reopen("on_flush");
    assert_eq!(count(&store, "a"), 100, "flushed batch survives");
    let b = count(&store, "b");
    assert!(
        b == 0 || b == 100,
        "unflushed batch is all or nothing, saw {b}"
    );
}

#[test]
fn immediate_keeps_every_returned_write() {
    let (_dir, store) = crash_and_reopen("immediate");
    assert_eq!(count(&store, "a"), 100);
    assert_eq!(count(&store, "b"), 100);
    assert_eq!(store.get(b"c").unwrap(), Some(b"last".to_vec()));
}
