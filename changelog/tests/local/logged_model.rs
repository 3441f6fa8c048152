//! A `LoggedStore` against a `BTreeMap` model: random writes, reads, commits (explicit and
//! automatic) and crashes followed by a restore.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::logged_common::{TOPIC, checkpoint, collect, memory_store, replay, scan};
use proptest::prelude::*;
use statestore_changelog::{LoggedStore, LoggedStoreConfig, MemoryLog};
use store_api::bounds::as_ref_bound as as_ref;
use store_api::{KeyValueStore, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    PutIfAbsent(Vec<u8>, Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
    Prefix(Vec<u8>, bool),
    Commit,
    /// Lose the buffer without committing, then reopen and restore.
    Crash,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', b'b', 0xff]), 0..3)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..24)
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => key().prop_map(Op::Delete),
        1 => (key(), value()).prop_map(|(k, v)| Op::PutIfAbsent(k, v)),
        1 => prop::collection::vec((key(), prop::option::of(value())), 0..5).prop_map(Op::Batch),
        2 => (bound(), bound(), any::<bool>()).prop_map(|(f, t, r)| Op::Range(f, t, r)),
        1 => (key(), any::<bool>()).prop_map(|(p, r)| Op::Prefix(p, r)),
        2 => Just(Op::Commit),
        1 => Just(Op::Crash),
    ]
}

/// The store under test and what it is built from, so a crash can rebuild it.
struct Harness {
    dir: tempfile::TempDir,
    inner: Arc<dyn KeyValueStore>,
    log: MemoryLog,
    store: LoggedStore,
    /// The model after each write since the last explicit commit: an automatic commit may
    /// have persisted any of them, the last one included.
    since_commit: Vec<Model>,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let inner = memory_store();
        let log = MemoryLog::new(TOPIC, 0);
        let store = open(&dir, &inner, &log);
        Harness {
            dir,
            inner,
            log,
            store,
            since_commit: vec![Model::new()],
        }
    }

    fn crash(&mut self, model: &mut Model) {
        let reopened = open(&self.dir, &self.inner, &self.log);
        // Dropping would commit; a crash does not.
        std::mem::forget(std::mem::replace(&mut self.store, reopened));
        let restored = scan(&self.store);
        assert_eq!(
            restored,
            replay(&self.log),
            "the store is not the log's state"
        );
        assert!(
            self.since_commit.contains(&restored),
            "restored a state that was never committed: {restored:?}"
        );
        *model = restored.clone();
        self.since_commit = vec![restored];
    }
}

fn open(dir: &tempfile::TempDir, inner: &Arc<dyn KeyValueStore>, log: &MemoryLog) -> LoggedStore {
    let config = LoggedStoreConfig {
        commit_bytes: 400,
        restore_batch_records: 3,
        ..LoggedStoreConfig::default()
    };
    let log = Arc::new(log.clone());
    LoggedStore::open(Arc::clone(inner), log, checkpoint(dir.path()), config).expect("open")
}

fn model_range(
    model: &Model,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
    rev: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pairs: Vec<_> = model
        .iter()
        .filter(|(k, _)| store_api::bounds::contains(as_ref(from), as_ref(to), k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if rev {
        pairs.reverse();
    }
    pairs
}

fn apply(h: &mut Harness, model: &mut Model, op: Op) {
    let store = &h.store;
    match op {
        Op::Put(k, v) => {
            store.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        Op::Delete(k) => {
            store.delete(&k).expect("delete");
            model.remove(&k);
        }
        Op::PutIfAbsent(k, v) => {
            let got = store.put_if_absent(&k, &v).expect("put_if_absent");
            assert_eq!(got, model.get(&k).cloned());
            model.entry(k).or_insert(v);
        }
        Op::Batch(ops) => {
            let mut batch = WriteBatch::new();
            for (k, v) in ops {
                match v {
                    Some(v) => {
                        batch.put(k.clone(), v.clone());
                        model.insert(k, v);
                    }
                    None => {
                        batch.delete(k.clone());
                        model.remove(&k);
                    }
                }
            }
            store.write(batch).expect("write");
        }
        Op::Range(from, to, rev) => {
            let iter = if rev {
                store.reverse_range(as_ref(&from), as_ref(&to))
            } else {
                store.range(as_ref(&from), as_ref(&to))
            };
            assert_eq!(
                collect(iter.expect("range")),
                model_range(model, &from, &to, rev)
            );
        }
        Op::Prefix(prefix, rev) => {
            let iter = if rev {
                store.reverse_prefix_scan(&prefix)
            } else {
                store.prefix_scan(&prefix)
            };
            let expected: Vec<_> = model_range(model, &Bound::Unbounded, &Bound::Unbounded, rev)
                .into_iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .collect();
            assert_eq!(collect(iter.expect("prefix scan")), expected);
        }
        Op::Commit => {
            store.commit().expect("commit");
            h.since_commit = vec![model.clone()];
        }
        Op::Crash => h.crash(model),
    }
    if !matches!(h.since_commit.last(), Some(last) if last == model) {
        h.since_commit.push(model.clone());
    }
    assert_eq!(&scan(&h.store), model);
    for (k, v) in model.iter() {
        assert_eq!(h.store.get(k).expect("get").as_ref(), Some(v));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn logged_store_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut harness = Harness::new();
        let mut model = Model::new();
        for op in ops {
            apply(&mut harness, &mut model, op);
        }
        harness.crash(&mut model);
    }
}
