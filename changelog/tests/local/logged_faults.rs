//! `LoggedStore` on the file log, over every backend, with I/O faults injected into the store
//! and the log (`statestore_conformance::faults`): thousands of writes, reads, commits and
//! reopens with 1-5% of the calls failing, before or after they took effect, then with faults
//! off. Checked throughout:
//! - every failure is a typed `Io` error carrying the injected fault, never a panic and never
//!   another kind;
//! - reads through the logged store see exactly the writes made (read-your-writes);
//! - a commit that returned `Ok` is never lost, and no commit is ever half applied: each
//!   transaction writes (or deletes) all the keys of one group, and after every reopen (after
//!   a crash, often right after a failed commit, or a close) each group is whole, at a state
//!   written no earlier than its last acknowledged commit;
//! - once faults stop, the store commits, reopens and restores (into an empty store, from the
//!   log alone) to exactly the state written.
//!
//! Sizes: `STATESTORE_FAULT_OPS` operations per run (default 2000), at
//! `STATESTORE_FAULT_RATE` (default 0.03); `STATESTORE_FAULT_SEED` (default 0) varies the
//! random choices.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statestore_changelog::{
    Checkpoint, FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig, SyncPolicy,
};
use statestore_conformance::faults::{
    FaultOp, FaultTiming, Faults, FaultyLog, FaultyStore, INJECTED,
};
use store_api::{Error, ErrorKind, KeyValueStore, WriteBatch};

const TOPIC: &str = "app-faults-changelog";
const GROUPS: u64 = 24;
const KEYS_PER_GROUP: u64 = 4;

/// The state of a group: the transaction whose value all its keys hold, or `None` when all
/// are absent.
type GroupState = Option<u64>;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key(group: u64, k: u64) -> Vec<u8> {
    format!("g/{group:02}/{k}").into_bytes()
}

fn value(txn: u64) -> Vec<u8> {
    format!("{txn:08}").into_bytes()
}

/// Asserts that `err` is an injected fault: a typed `Io` error, not a panic in disguise nor a
/// kind the faults cannot cause.
fn expect_injected(err: &Error, what: &str) {
    assert_eq!(err.kind(), ErrorKind::Io, "{what}: unexpected error {err}");
    assert!(err.to_string().contains(INJECTED), "{what}: {err}");
}

/// A logged store and the pieces it is made of, reopened from the same directory.
struct Harness {
    backend: &'static str,
    root: tempfile::TempDir,
    faults: Faults,
    config: LoggedStoreConfig,
}

impl Harness {
    fn new(backend: &'static str, seed: u64) -> Self {
        Harness {
            backend,
            root: tempfile::tempdir().expect("tempdir"),
            faults: Faults::new(seed),
            // Small enough that writes also commit on their own now and then.
            config: LoggedStoreConfig {
                commit_bytes: 2048,
                ..LoggedStoreConfig::default()
            },
        }
    }

    /// Opens the store; under faults the restore may fail, and is retried.
    fn open(&self) -> LoggedStore {
        for _ in 0..1000 {
            match self.try_open() {
                Ok(store) => return store,
                Err(err) => expect_injected(&err, "open"),
            }
        }
        panic!("{}: could not open in 1000 attempts", self.backend);
    }

    fn try_open(&self) -> store_api::Result<LoggedStore> {
        let store = statestore::open(
            self.backend,
            &self.root.path().join("store"),
            &serde_json::Value::Null,
        )?;
        let log = open_log(&self.root.path().join("log"))?;
        LoggedStore::open(
            Arc::new(FaultyStore::new(Arc::from(store), self.faults.clone())),
            Arc::new(FaultyLog::new(Arc::new(log), self.faults.clone())),
            Arc::new(Checkpoint::open(self.root.path().join(".checkpoint"))?),
            self.config.clone(),
        )
    }

    /// The state held by the log alone: restored into an empty memory store, without faults.
    fn restore_from_log(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let log = open_log(&self.root.path().join("log")).expect("open log");
        let store = LoggedStore::open(
            Arc::from(
                statestore::open("memory", elsewhere.path(), &serde_json::Value::Null)
                    .expect("memory store"),
            ),
            Arc::new(log),
            Arc::new(Checkpoint::open(elsewhere.path().join(".checkpoint")).expect("checkpoint")),
            LoggedStoreConfig::default(),
        )
        .expect("restore from the log");
        scan(&store)
    }
}

fn open_log(dir: &Path) -> store_api::Result<FileLog> {
    // Small segments, so commits span segment rolls; no fsync, which would only make the
    // test slower here (a crash of the machine is not simulated).
    let config = FileLogConfig {
        segment_bytes: 16 * 1024,
        sync: SyncPolicy::Never,
        ..FileLogConfig::default()
    };
    FileLog::open(dir, TOPIC, 0, config)
}

fn scan(store: &dyn KeyValueStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    store
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .collect::<Result<_, _>>()
        .expect("scan")
}

/// What the test knows of each group.
#[derive(Debug, Clone)]
struct Model {
    /// Per group: the states written since (and including) the last state known durable.
    /// The last one is what reads must see; after a reopen, any of them may be what survived.
    history: Vec<Vec<GroupState>>,
}

impl Model {
    fn new() -> Self {
        Model {
            history: vec![vec![None]; GROUPS as usize],
        }
    }

    fn latest(&self, group: u64) -> GroupState {
        *self.history[group as usize].last().expect("history")
    }

    fn write(&mut self, group: u64, state: GroupState) {
        self.history[group as usize].push(state);
    }

    /// A commit returned `Ok`: every group's latest state is durable.
    fn acknowledge(&mut self) {
        for history in &mut self.history {
            let latest = *history.last().expect("history");
            *history = vec![latest];
        }
    }

    /// The store was reopened and `group` found at `state`, which becomes the durable one.
    fn settle(&mut self, group: u64, state: GroupState) {
        self.history[group as usize] = vec![state];
    }

    /// Every key the latest states hold, with its value.
    fn expected(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut out = BTreeMap::new();
        for group in 0..GROUPS {
            if let Some(txn) = self.latest(group) {
                for k in 0..KEYS_PER_GROUP {
                    out.insert(key(group, k), value(txn));
                }
            }
        }
        out
    }
}

/// The state of `group` in `store`, or a description of how it is torn.
fn group_state(
    store: &dyn KeyValueStore,
    group: u64,
) -> store_api::Result<Result<GroupState, String>> {
    let mut values = Vec::new();
    for k in 0..KEYS_PER_GROUP {
        values.push(store.get(&key(group, k))?);
    }
    let first = values[0].clone();
    if values.iter().any(|v| *v != first) {
        return Ok(Err(format!("group {group} is half applied: {values:?}")));
    }
    let txn = first.map(|v| {
        String::from_utf8(v)
            .ok()
            .and_then(|s| s.parse().ok())
            .expect("a value written by this test")
    });
    Ok(Ok(txn))
}

/// One write transaction: all the keys of `group` to `state`, as one batch.
fn write_group(store: &LoggedStore, group: u64, state: GroupState) -> store_api::Result<()> {
    let mut batch = WriteBatch::new();
    for k in 0..KEYS_PER_GROUP {
        match state {
            Some(txn) => batch.put(key(group, k), value(txn)),
            None => batch.delete(key(group, k)),
        };
    }
    store.write(batch)
}

/// Reads through the logged store must see the latest writes, whole.
fn check_reads(store: &LoggedStore, model: &Model, rng: &mut StdRng) {
    let group = rng.random_range(0..GROUPS);
    if rng.random_bool(0.5) {
        match group_state(store, group) {
            Ok(found) => assert_eq!(found, Ok(model.latest(group)), "read of group {group}"),
            Err(err) => expect_injected(&err, "get"),
        }
        return;
    }
    let prefix = format!("g/{group:02}/").into_bytes();
    let iter = match store.prefix_scan(&prefix) {
        Ok(iter) => iter,
        Err(err) => return expect_injected(&err, "prefix scan"),
    };
    let mut pairs = Vec::new();
    for item in iter {
        match item {
            Ok(pair) => pairs.push(pair),
            Err(err) => return expect_injected(&err, "prefix scan item"),
        }
    }
    let expected: Vec<_> = model
        .expected()
        .into_iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .collect();
    assert_eq!(pairs, expected, "scan of group {group}");
}

/// Ends `store` with a crash (`crash`: its closing commit fails before writing anything,
/// so whatever it buffered is lost and whatever a failed commit left in the log stays there)
/// or a close under faults (the closing commit may fail too), reopens it (the restore may
/// fail and is retried), and checks that every group is whole and no older than its last
/// acknowledged commit.
fn reopen(harness: &Harness, store: LoggedStore, model: &mut Model, crash: bool) -> LoggedStore {
    if crash {
        harness.faults.set_ops(&[FaultOp::Append]);
        harness.faults.set_timing(FaultTiming::Before);
        harness.faults.fail_nth(1);
    }
    drop(store);
    harness.faults.fail_nth(0);
    harness.faults.set_ops(&FaultOp::ALL);
    harness.faults.set_timing(FaultTiming::Any);
    let store = harness.open();
    settle_groups(&store, model);
    store
}

fn settle_groups(store: &LoggedStore, model: &mut Model) {
    for group in 0..GROUPS {
        let found = loop {
            match group_state(store, group) {
                Ok(found) => break found,
                Err(err) => expect_injected(&err, "get after reopen"),
            }
        };
        let state = found.unwrap_or_else(|torn| panic!("after reopen: {torn}"));
        let allowed = &model.history[group as usize];
        assert!(
            allowed.contains(&state),
            "after reopen group {group} holds {state:?}, not one of {allowed:?} (a lost \
             acknowledged commit)"
        );
        model.settle(group, state);
    }
}

/// The faulty phase: `ops` random operations at `rate`, then faults off and every check.
fn run(backend: &'static str, seed: u64) {
    let ops: u64 = env_or("STATESTORE_FAULT_OPS", 2000);
    let rate: f64 = env_or("STATESTORE_FAULT_RATE", 0.03);
    let seed = seed + env_or("STATESTORE_FAULT_SEED", 0u64) * 100;
    let harness = Harness::new(backend, seed);
    harness.faults.set_timing(FaultTiming::Any);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut store = harness.open();
    harness.faults.set_rate(rate);
    let mut failures = 0u64;
    let mut commits = 0u64;
    for txn in 1..=ops {
        match rng.random_range(0..100) {
            0..55 => {
                let group = rng.random_range(0..GROUPS);
                let state = (!rng.random_bool(0.1)).then_some(txn);
                match write_group(&store, group, state) {
                    Ok(()) => model.write(group, state),
                    Err(err) => {
                        expect_injected(&err, "write (its automatic commit)");
                        failures += 1;
                    }
                }
            }
            55..80 => match store.commit() {
                Ok(()) => {
                    model.acknowledge();
                    commits += 1;
                }
                Err(err) => {
                    expect_injected(&err, "commit");
                    failures += 1;
                    // A crash right after a failed commit finds what it left in the log.
                    if rng.random_bool(0.3) {
                        store = reopen(&harness, store, &mut model, true);
                    }
                }
            },
            80..99 => check_reads(&store, &model, &mut rng),
            _ => store = reopen(&harness, store, &mut model, rng.random_bool(0.5)),
        }
    }
    assert!(harness.faults.injected() > 0, "no fault was injected");
    assert!(
        failures > 0 && commits > 0,
        "{failures} failures, {commits} commits"
    );

    // Faults off: everything written commits, and survives reopening and a restore from the
    // log alone.
    harness.faults.off();
    store.commit().expect("commit after the faults stopped");
    model.acknowledge();
    assert_eq!(scan(&store), model.expected(), "after the last commit");
    drop(store);
    let store = harness.open();
    assert_eq!(scan(&store), model.expected(), "after reopening");
    drop(store);
    assert_eq!(
        harness.restore_from_log(),
        model.expected(),
        "restored from the log"
    );
    let store = harness.open();

    // And it keeps working.
    for txn in ops + 1..=ops + 200 {
        let group = rng.random_range(0..GROUPS);
        write_group(&store, group, Some(txn)).expect("write without faults");
        model.write(group, Some(txn));
        if txn % 10 == 0 {
            store.commit().expect("commit without faults");
            model.acknowledge();
        }
    }
    store.commit().expect("commit without faults");
    model.acknowledge();
    drop(store);
    let store = harness.open();
    assert_eq!(
        scan(&store),
        model.expected(),
        "after more commits and a reopen"
    );
    drop(store);
    assert_eq!(
        harness.restore_from_log(),
        model.expected(),
        "restored from the log"
    );
    eprintln!(
        "{backend}: {ops} operations, {commits} commits acknowledged, {} faults injected \
         ({} after the operation, {} torn appends and store writes), {failures} failed writes and \
         commits",
        harness.faults.injected(),
        harness.faults.injected_after(),
        harness.faults.injected_torn()
    );
}

// Faults strike before or after an operation, and an append may also be torn: a prefix of a
// commit's records written without its marker, then the error.

#[test]
fn memory_survives_faults() {
    run("memory", 1);
}

#[test]
fn rocksdb_survives_faults() {
    run("rocksdb", 2);
}

#[test]
fn sled_survives_faults() {
    run("sled", 3);
}

#[test]
fn redb_survives_faults() {
    run("redb", 4);
}
