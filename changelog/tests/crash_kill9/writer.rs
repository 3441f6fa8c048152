//! The writer process: random updates through a `LoggedStore` on a `FileLog` into a
//! persistent backend, one commit per step, each acknowledged in a side file once `commit()`
//! returned. Also the code both processes use to open the state.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use statestore_changelog::{
    CheckpointPolicy, FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig, RestoreListener,
    StateDirectory, SyncPolicy, TaskDirectory, TaskId,
};
use store_api::KeyValueStore;

use crate::workload::{STEP_KEY, step_updates};

/// The application id in the state directory.
const APPLICATION: &str = "crash";
/// The store's name.
const STORE: &str = "kv";
/// A writer left alone stops after this long, so a dead parent leaves no process behind.
const MAX_RUN: Duration = Duration::from_secs(180);

/// An open logged store with everything it stands on. Fields drop in order: the store
/// (committing and closing the engine) before the log, the task and the state directory.
pub struct Stack {
    pub store: LoggedStore,
    pub log: Arc<FileLog>,
    /// The backend found the store damaged: it was wiped and restored from the log.
    pub wiped: bool,
    _task: TaskDirectory,
    _state: StateDirectory,
}

/// Opens and restores the store kept under `root` on `backend`.
pub fn open_stack(root: &Path, backend: &str, listener: &mut dyn RestoreListener) -> Stack {
    let state = StateDirectory::open(&root.join("state"), APPLICATION).expect("state dir");
    let task = state.task(TaskId::new(0, 0)).expect("task dir");
    let factory = statestore::factory(backend).expect("backend compiled in");
    // A store the backend finds damaged is wiped and restored whole from the log.
    let (inner, wiped) = task
        .open_logged_store(factory, STORE, &Value::Null)
        .expect("open store");
    let topic = state.changelog_topic(STORE).expect("topic");
    let config = FileLogConfig {
        sync: SyncPolicy::EveryCommit,
        ..FileLogConfig::default()
    };
    let log = Arc::new(FileLog::open(&root.join("log"), &topic, 0, config).expect("open log"));
    let config = LoggedStoreConfig {
        // Only the explicit per-step commits: a commit is exactly one step.
        commit_bytes: usize::MAX,
        restore_batch_records: 500,
        // A checkpoint every two steps or so: most kills land after commits that left the
        // store unflushed, the file naming an older, flushed one.
        checkpoint_policy: CheckpointPolicy::AfterBytes(2048),
        ..LoggedStoreConfig::default()
    };
    let checkpoint = Arc::clone(task.checkpoint());
    let store = LoggedStore::open_with_listener(inner, log.clone(), checkpoint, config, listener)
        .expect("open and restore the logged store");
    Stack {
        store,
        log,
        wiped,
        _task: task,
        _state: state,
    }
}

/// The last step the store holds (0 for none).
pub fn stored_step(store: &dyn KeyValueStore) -> u64 {
    store
        .get(STEP_KEY)
        .expect("read the step")
        .map_or(0, |bytes| {
            u64::from_be_bytes(bytes.try_into().expect("an 8-byte step"))
        })
}

/// Digits of a step number in the ack file.
pub const ACK_WIDTH: usize = 20;

/// Ends a line the previous writer was killed in the middle of, so the next ack starts a line.
fn end_torn_ack(acks: &mut File) {
    let len = acks.metadata().expect("ack file size").len();
    if len == 0 {
        return;
    }
    let mut last = [0u8; 1];
    acks.read_exact_at(&mut last, len - 1)
        .expect("read the ack file");
    if last[0] != b'\n' {
        acks.write_all(b"\n").expect("end a torn ack");
    }
}

/// Writes steps after the stored one until killed, appending each step number to `acks`
/// with an fsync after its commit returned.
pub fn run(root: &Path, backend: &str, seed: u64) {
    let stack = open_stack(
        root,
        backend,
        &mut statestore_changelog::NoopRestoreListener,
    );
    let store = &stack.store;
    let mut acks = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(root.join("acks"))
        .expect("open the ack file");
    end_torn_ack(&mut acks);
    let started = Instant::now();
    let mut step = stored_step(store);
    while started.elapsed() < MAX_RUN {
        step += 1;
        for (key, value) in step_updates(seed, step) {
            match value {
                Some(value) => store.put(&key, &value).expect("put"),
                None => store.delete(&key).expect("delete"),
            }
        }
        store.put(STEP_KEY, &step.to_be_bytes()).expect("put step");
        store.commit().expect("commit");
        // One write of a fixed-width line: a kill leaves a whole ack, none, or a short line
        // the parent ignores.
        acks.write_all(format!("{step:0ACK_WIDTH$}\n").as_bytes())
            .expect("write ack");
        acks.sync_data().expect("sync ack");
    }
}
