//! Kill -9 during a bulk restore: a child process restores a RocksDB store from empty (so
//! through SST ingestion, in chunks of 256 KiB) from a file changelog of 60k updates, and is
//! killed with SIGKILL once it has applied a random number of batches, one to three times in
//! a row over the same store. Then this process opens the store and checks that
//! - the killed load left no checkpoint vouching for it, and no file of its own behind once
//!   the store is open again;
//! - the next restore wipes the store and loads it in bulk again, and the store then equals
//!   a replay of the log into a memory store.
//!
//! `STATESTORE_BULK_KILLS` sets the rounds (default 6).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use statestore_changelog::{
    Changelog, Checkpoint, FileLog, FileLogConfig, Framing, RestoreListener, RestoreOutcome,
    restore,
};
use store_api::{BatchOp, KeyValueStore};

use crate::logged_common::{replay, scan};
use crate::{Writer, env_number, spawning};

const TOPIC: &str = "bulk-restore-changelog";
const DIR_ENV: &str = "STATESTORE_BULK_CHILD_DIR";
/// Records per restore batch: 120 batches for the whole log.
const BATCH: usize = 500;
const COMMITS: u32 = 600;
const PER_COMMIT: u32 = 100;

/// The store's options: bulk loads of 256 KiB chunks, so a load is many ingestions.
fn options() -> serde_json::Value {
    json!({ "bulk_load_bytes": 256 << 10 })
}

fn open_store(root: &Path) -> Box<dyn KeyValueStore> {
    statestore::factory("rocksdb")
        .expect("rocksdb compiled in")
        .open(&root.join("store"), &options())
        .expect("open the store")
}

fn open_log(root: &Path) -> FileLog {
    FileLog::open(&root.join("log"), TOPIC, 0, FileLogConfig::default()).expect("open the log")
}

fn checkpoint(root: &Path) -> Checkpoint {
    Checkpoint::open(root.join(".checkpoint")).expect("checkpoint")
}

/// A log of overwrites and deletes over 20k keys, in framed commits.
fn write_log(root: &Path) {
    let log = open_log(root);
    let mut rng = StdRng::seed_from_u64(0xb01c);
    for commit in 0..COMMITS {
        let ops: Vec<BatchOp> = (0..PER_COMMIT)
            .map(|_| {
                let key = format!("key{:06}", rng.random_range(0..20_000u32)).into_bytes();
                if rng.random_bool(0.1) {
                    BatchOp::Delete { key }
                } else {
                    let value = format!("commit {commit} {}", "v".repeat(rng.random_range(0..150)));
                    BatchOp::Put {
                        key,
                        value: value.into_bytes(),
                    }
                }
            })
            .collect();
        // One key once per commit, as a logged store commits.
        let mut seen = std::collections::BTreeSet::new();
        let ops: Vec<BatchOp> = ops
            .into_iter()
            .rev()
            .filter(|op| seen.insert(op.key().to_vec()))
            .collect();
        log.append_framed(&ops, Framing::Commit).expect("append");
    }
    log.sync().expect("sync");
}

/// Appends one byte to the progress file per batch restored.
struct Progress(File);

impl RestoreListener for Progress {
    fn on_batch(&mut self, _topic: &str, _partition: u32, _end: u64, _records: usize) {
        self.0.write_all(b".").expect("progress");
    }
}

/// The child: restores the store under the directory in [`DIR_ENV`], then exits.
#[test]
#[ignore = "the restoring process of bulk_restore_killed_halfway_restores_again"]
fn bulk_restore_child() {
    let root = std::env::var(DIR_ENV).expect("started by the bulk crash test");
    let root = Path::new(&root);
    let progress = File::options()
        .create(true)
        .append(true)
        .open(root.join("progress"))
        .expect("progress file");
    let store = open_store(root);
    // What the restore did is checked by the parent, from what it left behind.
    restore(
        store.as_ref(),
        &open_log(root),
        &checkpoint(root),
        BATCH,
        &mut Progress(progress),
    )
    .expect("restore");
}

/// Starts a child and kills it once it restored `batches` batches; false when it finished
/// first.
fn kill_after(root: &Path, batches: u64, extra: Duration) -> bool {
    let progress = root.join("progress");
    let _ = std::fs::remove_file(&progress);
    let spawning = spawning();
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "bulk::bulk_restore_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the restoring child");
    drop(spawning);
    let mut child = Writer(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::metadata(&progress).map_or(0, |meta| meta.len()) < batches {
        if let Ok(Some(status)) = child.0.try_wait() {
            assert!(status.success(), "the child failed: {status}");
            return false;
        }
        assert!(Instant::now() < deadline, "no progress in 120 s");
        sleep(Duration::from_millis(1));
    }
    sleep(extra);
    if let Ok(Some(_)) = child.0.try_wait() {
        return false;
    }
    child.0.kill().expect("SIGKILL");
    child.0.wait().expect("reap");
    true
}

#[test]
fn bulk_restore_killed_halfway_restores_again() {
    let rounds = env_number("STATESTORE_BULK_KILLS", 6);
    let root = tempfile::tempdir().expect("tempdir");
    let root = root.path();
    write_log(root);
    let expected = replay(&open_log(root));
    let total_batches = u64::from(COMMITS * (PER_COMMIT + 1)) / BATCH as u64;
    let mut rng = StdRng::seed_from_u64(0x6b11);
    let (mut kills, mut partial) = (0, 0);
    for round in 0..rounds {
        for _ in 0..rng.random_range(1..=3) {
            let batches = rng.random_range(1..total_batches);
            let extra = Duration::from_micros(rng.random_range(0..5_000));
            kills += u32::from(kill_after(root, batches, extra));
        }
        assert_eq!(
            checkpoint(root).get(TOPIC, 0),
            None,
            "round {round}: a killed bulk load left a checkpoint"
        );
        let store = open_store(root);
        assert!(
            !root.join("store").join("bulk-load").exists(),
            "round {round}: the killed load's files outlived the open"
        );
        let held = scan(store.as_ref());
        partial += u32::from(!held.is_empty() && held != expected);
        let outcome: RestoreOutcome = restore(
            store.as_ref(),
            &open_log(root),
            &checkpoint(root),
            BATCH,
            &mut statestore_changelog::NoopRestoreListener,
        )
        .expect("restore after the kill");
        assert!(
            outcome.wiped && outcome.bulk_loaded,
            "round {round}: {outcome:?}"
        );
        assert!(
            scan(store.as_ref()) == expected,
            "round {round}: the store differs from a replay of its log"
        );
        drop(store);
        // The next round starts from no checkpoint again, over this full store.
        checkpoint(root)
            .remove(TOPIC, 0)
            .expect("remove the checkpoint");
    }
    let _ = writeln!(
        std::io::stderr(),
        "bulk_restore_killed_halfway: {rounds} rounds, {kills} kills, {partial} stores found \
         part-loaded"
    );
    assert!(kills >= rounds as u32, "too few kills landed during a load");
    assert!(
        partial > 0,
        "no kill left a part-loaded store: the test kills too late"
    );
}
