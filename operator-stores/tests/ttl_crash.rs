//! Kill -9 around expiry: a writer process runs a TTL store over a `LoggedStore` on a `FileLog`
//! into RocksDB, one commit per step, and every step advances stream time, which expires
//! entries written ten steps before. The test kills it with SIGKILL at random moments, then
//! reopens and restores the store, and checks that
//! - the restored store holds the last acknowledged step or the one in flight, whole;
//! - it answers as a live store that ran the same steps and never crashed: the same entries,
//!   none expired, and the same stream time;
//! - its bytes (entries, expiry index, stream time) equal a replay of the changelog into a
//!   fresh memory store, so every expiry reached the log as a tombstone with its commit.
//!
//! The writer is this test binary, re-run with `--ignored --exact ttl_crash_writer_child`.
//! `STATESTORE_TTL_CRASH_KILLS` sets the kills (default 12).

#![cfg(unix)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::Bound;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use statestore_changelog::{
    Checkpoint, CheckpointPolicy, FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig,
    StateDirectory, SyncPolicy, TaskDirectory, TaskId,
};
use statestore_memory::{Config, MemoryStore};
use statestore_operator_stores::{TtlClock, TtlConfig, TtlStore};
use store_api::KeyValueStore;

const DIR_ENV: &str = "STATESTORE_TTL_CRASH_DIR";
const STEP_KEY: &[u8] = b"step";
/// Stream time per step, and the store's TTL: an entry lives ten steps.
const TICK: i64 = 10;
const TTL: i64 = 100;

fn ttl_config() -> TtlConfig {
    TtlConfig {
        sweep_interval_ms: 1,
        ..TtlConfig::new(TTL, TtlClock::StreamTime)
    }
}

/// The writes of `step`, the same in the writer and the model.
fn run_step(store: &TtlStore, step: u64) {
    store
        .advance_stream_time(step as i64 * TICK)
        .expect("advance stream time");
    store
        .put(
            format!("k{:02}", (step * 7) % 40).as_bytes(),
            &step.to_be_bytes(),
        )
        .expect("put");
    if step.is_multiple_of(3) {
        store
            .put_with_ttl(format!("p{:02}", step % 13).as_bytes(), b"own", Some(25))
            .expect("put with ttl");
    }
    if step.is_multiple_of(5) {
        store
            .delete(format!("k{:02}", (step * 3) % 40).as_bytes())
            .expect("delete");
    }
    store
        .put_with_ttl(STEP_KEY, &step.to_be_bytes(), None)
        .expect("put step");
}

/// The state directory, log and logged RocksDB store under `root`. Fields drop in order.
struct Stack {
    logged: Arc<LoggedStore>,
    log: Arc<FileLog>,
    _task: TaskDirectory,
    _state: StateDirectory,
}

fn open_stack(root: &Path) -> Stack {
    let state = StateDirectory::open(&root.join("state"), "ttl-crash").expect("state dir");
    let task = state.task(TaskId::new(0, 0)).expect("task dir");
    let (inner, _) = task
        .open_logged_store(&statestore_rocksdb::RocksDbFactory, "kv", &Value::Null)
        .expect("open store");
    let topic = state.changelog_topic("kv").expect("topic");
    let log_config = FileLogConfig {
        sync: SyncPolicy::EveryCommit,
        ..FileLogConfig::default()
    };
    let log = Arc::new(FileLog::open(&root.join("log"), &topic, 0, log_config).expect("log"));
    let config = LoggedStoreConfig {
        commit_bytes: usize::MAX,
        // Most kills land after commits the checkpoint file does not name yet.
        checkpoint_policy: CheckpointPolicy::AfterBytes(1024),
        ..LoggedStoreConfig::default()
    };
    let logged = LoggedStore::open(inner, log.clone(), Arc::clone(task.checkpoint()), config)
        .expect("open and restore");
    Stack {
        logged: Arc::new(logged),
        log,
        _task: task,
        _state: state,
    }
}

fn stored_step(store: &TtlStore) -> u64 {
    store.get(STEP_KEY).expect("step").map_or(0, |bytes| {
        u64::from_be_bytes(bytes.try_into().expect("an 8-byte step"))
    })
}

fn scan(store: &dyn KeyValueStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    store
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .collect::<Result<_, _>>()
        .expect("range item")
}

/// The writer process: steps after the stored one until killed, each acknowledged once its
/// commit returned.
#[test]
#[ignore = "the writer process of the TTL crash test, started by it"]
fn ttl_crash_writer_child() {
    let root = std::env::var(DIR_ENV).expect("started by the crash test");
    let root = Path::new(&root);
    let stack = open_stack(root);
    let store = TtlStore::open(stack.logged.clone(), ttl_config()).expect("ttl store");
    let mut acks = OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join("acks"))
        .expect("acks");
    let started = Instant::now();
    let mut step = stored_step(&store);
    while started.elapsed() < Duration::from_secs(120) {
        step += 1;
        run_step(&store, step);
        stack.logged.commit().expect("commit");
        acks.write_all(format!("{step:020}\n").as_bytes())
            .expect("ack");
        acks.sync_data().expect("sync ack");
    }
}

/// Kills the writer if the test fails while it runs.
struct Writer(Child);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn last_ack(root: &Path) -> u64 {
    let text = std::fs::read_to_string(root.join("acks")).unwrap_or_default();
    text.lines()
        .rfind(|line| line.len() == 20)
        .map_or(0, |line| line.parse().expect("an ack"))
}

#[test]
fn kill9_around_expiry_restores_the_live_store() {
    let kills: u64 = std::env::var("STATESTORE_TTL_CRASH_KILLS")
        .ok()
        .map_or(12, |text| text.parse().expect("a number"));
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // The live store: the same steps, never crashed.
    let live =
        TtlStore::open(Arc::new(MemoryStore::new(Config::default())), ttl_config()).expect("model");
    let mut live_step = 0;
    let mut timing: u64 = 0x7171;
    let mut expired_seen = 0;
    for round in 0..kills {
        let before = last_ack(root);
        let log = File::create(root.join("writer.log")).expect("writer log");
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "ttl_crash_writer_child",
                "--ignored",
                "--nocapture",
            ])
            .env(DIR_ENV, root)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn the writer");
        let mut writer = Writer(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while last_ack(root) <= before {
            assert!(Instant::now() < deadline, "no commit in 60 s");
            assert!(
                writer.0.try_wait().expect("wait").is_none(),
                "the writer exited: {}",
                std::fs::read_to_string(root.join("writer.log")).unwrap_or_default()
            );
            sleep(Duration::from_millis(2));
        }
        timing = timing
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        sleep(Duration::from_micros((timing >> 33) % 60_000));
        writer.0.kill().expect("SIGKILL");
        writer.0.wait().expect("reap");
        let acked = last_ack(root);

        let stack = open_stack(root);
        let store = TtlStore::open(stack.logged.clone(), ttl_config()).expect("ttl store");
        let step = stored_step(&store);
        assert!(
            step >= acked && step <= acked + 1,
            "round {round}: the store holds step {step}, {acked} was acknowledged"
        );
        while live_step < step {
            live_step += 1;
            run_step(&live, live_step);
        }
        assert_eq!(store.now(), live.now(), "round {round}: stream time");
        assert_eq!(
            scan(&store),
            scan(&live),
            "round {round}: the restored store answers as the live one"
        );
        let now = store.now();
        expired_seen += scan(live.inner().as_ref())
            .values()
            .filter(|value| value.len() >= 9 && value[0] == 1)
            .filter(|value| {
                let expiry = i64::from_be_bytes(value[1..9].try_into().expect("8 bytes"));
                (expiry ^ i64::MIN) <= now
            })
            .count();
        // Every byte of the store, expiry index and stream time included, is what the
        // changelog holds: the expiries reached it as tombstones in their commits.
        let replayed = LoggedStore::open(
            Arc::new(MemoryStore::new(Config::default())),
            stack.log.clone(),
            Arc::new(Checkpoint::open(root.join(format!("replay-{round}"))).expect("checkpoint")),
            LoggedStoreConfig::default(),
        )
        .expect("replay");
        assert_eq!(
            scan(stack.logged.inner().as_ref()),
            scan(replayed.inner().as_ref()),
            "round {round}: the store differs from a replay of its changelog"
        );
        assert_eq!(
            scan(stack.logged.inner().as_ref()),
            scan(live.inner().as_ref()),
            "round {round}: the store's bytes differ from the live store's"
        );
        replayed.close().expect("close replay");
        drop(store);
        drop(stack);
    }
    // Sweeps run at every step: nothing expired stays behind in the live store either.
    assert_eq!(expired_seen, 0, "expired entries left unswept");
    assert!(live_step > kills, "too few steps: {live_step}");
}
