//! What users vary in `compare` reaches the store: key and value sizes, threads that really
//! run together against one store, `--state-size` and `--cache-size`; and values out of range
//! are refused, typed, before anything runs.
//!
//! The store under test is a recorder: the memory backend behind a wrapper that notes what
//! each call carried, registered under a name in a registry of the test's own.

use std::collections::{BTreeSet, HashSet};
use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use statestore::{
    BackendFactory, BackendOptions, BatchOp, Capabilities, KeyValueStore, KvIter, PairVisitor,
    Registry, Result, ValueVisitor, WriteBatch,
};
use statestore_benches::compare::{self, ArgsError, CompareArgs};
use statestore_benches::{Workload, data};

/// How long a thread waits at its first read for the others before the test counts the run
/// as not concurrent. Only a broken run waits this long.
const MEETING_TIMEOUT: Duration = Duration::from_secs(30);

/// A store's pairs, in key order.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// What the recorded stores saw.
#[derive(Debug, Default)]
struct Seen {
    key_lens: BTreeSet<usize>,
    value_lens: BTreeSet<usize>,
    options: Vec<BackendOptions>,
    /// Threads that have made their first read of a run, and how many found all the others.
    readers: HashSet<ThreadId>,
    met: usize,
    /// Each store's pairs when it was closed.
    closed: Vec<Pairs>,
}

#[derive(Debug, Default)]
struct Shared {
    seen: Mutex<Seen>,
    arrived: Condvar,
}

/// A factory of recorded memory stores. With `meet` above 1, each thread's first read waits
/// until `meet` threads have made theirs: only threads that run together all get past it
/// without the timeout.
#[derive(Debug)]
struct Recorder {
    name: &'static str,
    meet: usize,
    shared: Arc<Shared>,
}

fn recorder(name: &'static str, meet: usize) -> (&'static Recorder, Arc<Shared>) {
    let shared = Arc::new(Shared::default());
    let factory = Box::leak(Box::new(Recorder {
        name,
        meet,
        shared: Arc::clone(&shared),
    }));
    (factory, shared)
}

impl BackendFactory for Recorder {
    fn name(&self) -> &'static str {
        self.name
    }

    fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
        self.shared.seen.lock().options.push(options.clone());
        let inner = Registry::with_builtins().open("memory", dir, &BackendOptions::Null)?;
        Ok(Box::new(Recorded {
            inner,
            meet: self.meet,
            shared: Arc::clone(&self.shared),
        }))
    }
}

#[derive(Debug)]
struct Recorded {
    inner: Box<dyn KeyValueStore>,
    meet: usize,
    shared: Arc<Shared>,
}

impl Recorded {
    fn key(&self, key: &[u8]) {
        self.shared.seen.lock().key_lens.insert(key.len());
    }

    fn pair(&self, key: &[u8], value: &[u8]) {
        let mut seen = self.shared.seen.lock();
        seen.key_lens.insert(key.len());
        seen.value_lens.insert(value.len());
    }

    /// A thread's first read waits for `meet` threads to have made theirs.
    fn first_read(&self) {
        let mut seen = self.shared.seen.lock();
        if self.meet <= 1 || !seen.readers.insert(std::thread::current().id()) {
            return;
        }
        self.shared.arrived.notify_all();
        let timed_out = self
            .shared
            .arrived
            .wait_while_for(
                &mut seen,
                |seen| seen.readers.len() < self.meet,
                MEETING_TIMEOUT,
            )
            .timed_out();
        if !timed_out {
            seen.met += 1;
        }
    }
}

impl KeyValueStore for Recorded {
    fn name(&self) -> &str {
        "recorder"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.key(key);
        self.first_read();
        self.inner.get(key)
    }
    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        self.key(key);
        self.first_read();
        self.inner.get_with(key, f)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.pair(key, value);
        self.inner.put(key, value)
    }
    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.pair(key, value);
        self.inner.put_if_absent(key, value)
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        self.key(key);
        self.inner.delete(key)
    }
    fn write(&self, batch: WriteBatch) -> Result<()> {
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } => self.pair(key, value),
                BatchOp::Delete { key } => self.key(key),
            }
        }
        self.inner.write(batch)
    }
    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.inner.range(from, to)
    }
    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.inner.reverse_range(from, to)
    }
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        f: &mut PairVisitor<'_>,
    ) -> Result<()> {
        if let Bound::Included(key) | Bound::Excluded(key) = from {
            self.key(key);
        }
        self.inner.scan(from, to, reverse, f)
    }
    fn approximate_len(&self) -> Result<u64> {
        self.inner.approximate_len()
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn close(&self) -> Result<()> {
        let mut pairs = Vec::new();
        self.inner.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            false,
            &mut |key, value| {
                pairs.push((key.to_vec(), value.to_vec()));
                ControlFlow::Continue(())
            },
        )?;
        self.shared.seen.lock().closed.push(pairs);
        self.inner.close()
    }
}

fn registry_with(factories: &[&'static Recorder]) -> Registry {
    let registry = Registry::with_builtins();
    for factory in factories {
        registry.register(*factory).expect("register");
    }
    registry
}

fn results(dir: &Path) -> serde_json::Value {
    let bytes = std::fs::read(dir.join("results.json")).expect("results.json");
    serde_json::from_slice(&bytes).expect("json")
}

fn tiny(backends: &[&str], out: &Path) -> CompareArgs {
    CompareArgs {
        backends: backends.iter().map(|name| name.to_string()).collect(),
        records: 300,
        duration: 0.02,
        out: out.to_path_buf(),
        ..CompareArgs::default()
    }
}

#[test]
fn key_and_value_sizes_reach_every_operation() {
    let (factory, shared) = recorder("recorder", 1);
    let registry = registry_with(&[factory]);
    let out = tempfile::tempdir().expect("tempdir");
    let args = CompareArgs {
        workloads: vec![
            Workload::LoadSeq,
            Workload::PutRandom,
            Workload::GetHit,
            Workload::GetMiss,
            Workload::Range10,
            Workload::YcsbE,
            Workload::YcsbF,
        ],
        key_size: Some(40),
        value_size: Some(64),
        ..tiny(&["recorder"], out.path())
    };
    compare::run(&args, &registry).expect("compare");
    let seen = shared.seen.lock();
    assert_eq!(seen.key_lens, BTreeSet::from([40]), "every key is 40 bytes");
    assert_eq!(
        seen.value_lens,
        BTreeSet::from([64]),
        "every value is 64 bytes"
    );
    assert_eq!(results(out.path())["settings"]["key_len"], 40);
}

/// The pairs `load_random` leaves with `threads` threads, and how many threads met.
fn load_with_threads(threads: u64) -> (Pairs, usize) {
    let (factory, shared) = recorder("recorder", threads as usize);
    let registry = registry_with(&[factory]);
    let out = tempfile::tempdir().expect("tempdir");
    let args = CompareArgs {
        workloads: vec![Workload::LoadRandom, Workload::GetHit],
        // Six batches, the last one short: the shards do not split them evenly.
        records: 5_500,
        threads,
        ..tiny(&["recorder"], out.path())
    };
    compare::run(&args, &registry).expect("compare");
    let json = results(out.path());
    assert_eq!(json["settings"]["threads"], threads);
    let get_hit = &json["results"][1];
    assert!(get_hit["operations"].as_u64() > Some(threads), "{get_hit}");
    let mut seen = shared.seen.lock();
    assert_eq!(seen.closed.len(), 2, "one store per workload");
    (seen.closed.swap_remove(0), seen.met)
}

#[test]
fn threads_run_together_and_load_the_same_state_as_one() {
    let (alone, _) = load_with_threads(1);
    let (together, met) = load_with_threads(4);
    assert_eq!(met, 4, "each of the 4 threads found the other 3 reading");
    assert_eq!(alone.len(), 5_500);
    assert!(alone == together, "4 threads loaded other pairs than 1");
}

#[test]
fn state_size_sets_the_records_and_cache_size_the_engines_caches() {
    // Recorders under the built-ins' names: what compare hands each engine, seen as is.
    let (rocksdb, rocksdb_seen) = recorder("rocksdb", 1);
    let (mine, mine_seen) = recorder("mine", 1);
    let registry = Registry::new();
    for factory in [rocksdb, mine] {
        registry.register(factory).expect("register");
    }
    let out = tempfile::tempdir().expect("tempdir");
    let args = CompareArgs {
        workloads: vec![Workload::GetHit],
        state_size: Some(64 << 10),
        cache_size: Some(1 << 20),
        options: Some([("mine".to_string(), serde_json::json!({ "x": 1 }))].into()),
        ..tiny(&["rocksdb", "mine"], out.path())
    };
    compare::run(&args, &registry).expect("compare");
    let json = results(out.path());
    let record = (data::KEY_LEN + data::VALUE_LEN) as u64;
    assert_eq!(json["records"], (64 << 10) / record);
    assert_eq!(json["settings"]["cache_size"], 1 << 20);
    assert_eq!(
        rocksdb_seen.seen.lock().options,
        [serde_json::json!({ "block_cache_size": 1 << 20 })]
    );
    assert_eq!(
        mine_seen.seen.lock().options,
        [serde_json::json!({ "x": 1 })]
    );
}

#[test]
fn the_disk_engines_accept_the_cache_size_compare_gives_them() {
    let out = tempfile::tempdir().expect("tempdir");
    let args = CompareArgs {
        workloads: vec![Workload::GetHit],
        cache_size: Some(1 << 20),
        threads: 2,
        ..tiny(&["rocksdb", "redb", "sled"], out.path())
    };
    compare::run(&args, &Registry::with_builtins()).expect("every engine opened");
    let json = results(out.path());
    assert_eq!(json["results"].as_array().map(Vec::len), Some(3));
}

#[test]
fn values_out_of_range_are_typed_errors_before_anything_runs() {
    let out = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            CompareArgs {
                key_size: Some(8),
                ..tiny(&["memory"], out.path())
            },
            ArgsError::KeySize(8),
        ),
        (
            CompareArgs {
                threads: 0,
                ..tiny(&["memory"], out.path())
            },
            ArgsError::Threads(0),
        ),
        (
            CompareArgs {
                state_size: Some(1),
                ..tiny(&["memory"], out.path())
            },
            ArgsError::StateSize {
                state: 1,
                record_bytes: 174,
                records: 0,
            },
        ),
        (
            CompareArgs {
                duration: f64::NAN,
                ..tiny(&["memory"], out.path())
            },
            ArgsError::Duration(f64::NAN),
        ),
    ];
    for (args, expected) in cases {
        let err = compare::run(&args, &Registry::with_builtins()).expect_err("refused");
        let typed = err.downcast_ref::<ArgsError>().expect("an ArgsError");
        // NaN is not equal to itself: compare the messages.
        assert_eq!(typed.to_string(), expected.to_string());
        assert!(!out.path().join("results.json").exists(), "nothing ran");
    }
}
