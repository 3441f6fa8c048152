//! Cases of the LRU store.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Bound;
use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, prop_oneof};
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use statestore_changelog::Changelog;
use store_api::{BatchOp, KeyValueStore, WriteBatch};

use super::support::{fail, run_model};
use super::{Mode, OperatorFixture, StoreFactory};
use crate::LruStore;

const CAPACITY: usize = 3;

/// What an LRU store of [`CAPACITY`] must hold.
#[derive(Debug, Default)]
struct Model {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Least recently used first.
    order: Vec<Vec<u8>>,
}

impl Model {
    fn touch(&mut self, key: &[u8]) {
        self.order.retain(|k| k != key);
        self.order.push(key.to_vec());
    }

    fn apply(&mut self, op: &BatchOp) {
        match op {
            BatchOp::Put { key, value } => {
                self.entries.insert(key.clone(), value.clone());
                self.touch(key);
            }
            BatchOp::Delete { key } => {
                self.entries.remove(key);
                self.order.retain(|k| k != key);
            }
        }
    }

    fn evict(&mut self) {
        while self.entries.len() > CAPACITY {
            let oldest = self.order.remove(0);
            self.entries.remove(&oldest);
        }
    }

    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let value = self.entries.get(key).cloned();
        if value.is_some() {
            self.touch(key);
        }
        value
    }

    /// After a reopen recency is the key order.
    fn reopened(&mut self) {
        self.order = self.entries.keys().cloned().collect();
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    PutIfAbsent(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Write(Vec<BatchOp>),
    Get(Vec<u8>),
    Commit,
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    select(vec![&b""[..], b"\0", b"a", b"b", b"c", b"d", b"\xFF"]).prop_map(<[u8]>::to_vec)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    vec(0_u8..3, 0..3)
}

fn op() -> impl Strategy<Value = Op> {
    let batch_op = prop_oneof![
        3 => (key(), value()).prop_map(|(key, value)| BatchOp::Put { key, value }),
        1 => key().prop_map(|key| BatchOp::Delete { key }),
    ];
    prop_oneof![
        4 => (key(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        1 => (key(), value()).prop_map(|(k, v)| Op::PutIfAbsent(k, v)),
        1 => key().prop_map(Op::Delete),
        1 => vec(batch_op, 0..6).prop_map(Op::Write),
        4 => key().prop_map(Op::Get),
        1 => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

fn open(fx: &OperatorFixture<'_>) -> LruStore {
    LruStore::new(fx.store(), CAPACITY).expect("opening the LRU store")
}

fn contents(store: &dyn KeyValueStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    let scan = store
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("scan");
    scan.map(|entry| entry.expect("entry")).collect()
}

fn step(
    fx: &mut OperatorFixture<'_>,
    lru: &mut Option<LruStore>,
    model: &mut Model,
    op: &Op,
) -> Result<(), TestCaseError> {
    let store = lru.as_ref().ok_or_else(|| fail("no store"))?;
    match op {
        Op::Put(k, v) => {
            store.put(k, v).map_err(fail)?;
            model.apply(&BatchOp::Put {
                key: k.clone(),
                value: v.clone(),
            });
            model.evict();
        }
        Op::PutIfAbsent(k, v) => {
            let existing = store.put_if_absent(k, v).map_err(fail)?;
            let want = model.get(k);
            if want.is_none() {
                model.apply(&BatchOp::Put {
                    key: k.clone(),
                    value: v.clone(),
                });
                model.evict();
            }
            if existing != want {
                return Err(fail(format!(
                    "put_if_absent returned {existing:?}, want {want:?}"
                )));
            }
        }
        Op::Delete(k) => {
            store.delete(k).map_err(fail)?;
            model.apply(&BatchOp::Delete { key: k.clone() });
        }
        Op::Write(ops) => {
            store
                .write(ops.iter().cloned().collect::<WriteBatch>())
                .map_err(fail)?;
            ops.iter().for_each(|op| model.apply(op));
            model.evict();
        }
        Op::Get(k) => {
            let got = store.get(k).map_err(fail)?;
            let want = model.get(k);
            if got != want {
                return Err(fail(format!("get {k:?} returned {got:?}, want {want:?}")));
            }
        }
        Op::Commit => fx.commit(),
        Op::Reopen if fx.survives_reopen() => {
            *lru = None;
            fx.reopen();
            *lru = Some(open(fx));
            model.reopened();
        }
        Op::Reopen => {}
    }
    let store = lru.as_ref().ok_or_else(|| fail("no store"))?;
    let want: Vec<_> = model.entries.clone().into_iter().collect();
    if contents(store) != want {
        return Err(fail(format!("holds {:?}, want {want:?}", contents(store))));
    }
    if store.approximate_len().map_err(fail)? != want.len() as u64 {
        return Err(fail("approximate_len is not the number of entries"));
    }
    Ok(())
}

/// Random sequences of writes and reads on an LRU store of capacity 3, checked after each
/// against a model that evicts the least recently used key: the entries held, the answers of
/// `get` and `put_if_absent`, the exact length, and the same after a reopen or a restore
/// (where recency restarts in key order).
pub fn model(factory: &dyn StoreFactory, mode: Mode) {
    run_model("LRU store", mode, vec(op(), 1..40), |ops| {
        let mut fx = OperatorFixture::new(factory, mode);
        let mut lru = Some(open(&fx));
        let mut model = Model::default();
        for op in &ops {
            step(&mut fx, &mut lru, &mut model, op)?;
        }
        Ok(())
    });
}

/// Filling past the capacity evicts the oldest write, and overwriting refreshes a key.
pub fn evicts_least_recently_used(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let lru = open(&fx);
    for key in [b"a", b"b", b"c"] {
        lru.put(key, b"1").expect("put");
    }
    lru.put(b"a", b"2").expect("overwrite"); // "b" is now the oldest
    lru.put(b"d", b"1").expect("put");
    let keys: Vec<_> = contents(&lru).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [b"a".to_vec(), b"c".to_vec(), b"d".to_vec()]);
    assert_eq!(lru.get(b"a").expect("get"), Some(b"2".to_vec()));
}

/// A `get` that finds its key makes it the most recently used; a miss changes nothing.
pub fn get_counts_as_use(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let lru = open(&fx);
    for key in [b"a", b"b", b"c"] {
        lru.put(key, b"1").expect("put");
    }
    assert!(lru.get(b"a").expect("get").is_some());
    assert!(lru.get(b"zz").expect("get").is_none());
    lru.put(b"d", b"1").expect("put"); // evicts "b", not "a"
    assert!(lru.get(b"b").expect("get").is_none());
    assert!(lru.get(b"a").expect("get").is_some());
    lru.put(b"e", b"1").expect("put"); // evicts "c"
    assert!(lru.get(b"c").expect("get").is_none());
}

/// Evictions reach the wrapped store as deletes: plain, the evicted key is gone from the
/// backend; logged, the changelog holds a tombstone for it in the commit of the write that
/// evicted it, and a store restored from the changelog holds exactly the survivors.
pub fn evictions_are_logged_deletes(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let lru = open(&fx);
    for key in [b"a", b"b", b"c", b"d", b"e"] {
        lru.put(key, b"v").expect("put");
    }
    fx.commit();
    let survivors = contents(&lru);
    assert_eq!(survivors.len(), CAPACITY);
    for evicted in [b"a", b"b"] {
        assert_eq!(
            lru.inner().get(evicted).expect("get"),
            None,
            "evicted from the backend"
        );
    }
    drop(lru);
    if mode == Mode::Logged {
        let log = fx.changelog();
        let records = log.read(0, usize::MAX).expect("reading the changelog");
        let tombstones: Vec<_> = records
            .iter()
            .filter(|record| record.op.value().is_none())
            .map(|record| record.op.key().to_vec())
            .collect();
        assert_eq!(
            tombstones,
            [b"a".to_vec(), b"b".to_vec()],
            "evictions in the changelog"
        );
        fx.reopen();
        assert_eq!(
            contents(fx.store().as_ref()),
            survivors,
            "restored from the changelog"
        );
    }
}

/// One batch writing more keys than the capacity keeps only its last writes, atomically.
pub fn capacity_holds_under_batches(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let lru = Arc::new(open(&fx));
    lru.put(b"old", b"1").expect("put");
    let mut batch = WriteBatch::new();
    for key in [b"k1", b"k2", b"k3", b"k4", b"k5"] {
        batch.put(key.to_vec(), b"v".to_vec());
    }
    batch.delete(b"k5".to_vec());
    lru.write(batch).expect("write");
    let keys: Vec<_> = contents(lru.as_ref()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [b"k2".to_vec(), b"k3".to_vec(), b"k4".to_vec()]);
    assert_eq!(lru.approximate_len().expect("len"), 3);
}
