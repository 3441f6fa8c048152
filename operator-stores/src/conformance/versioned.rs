//! Cases of the versioned store.

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, prop_oneof};
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

use super::support::{check, fail, run_model};
use super::{Mode, OperatorFixture, StoreFactory};
use crate::versioned::{ResultOrder, VersionPut, VersionedRecord, VersionedStore};
use crate::window::PutOutcome;

/// The history retention of the model test, short so that cleaning happens often.
const RETENTION: i64 = 8;

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, u8, i64),
    PutVersion(Vec<u8>, Option<u8>, i64),
    Delete(Vec<u8>, i64),
    Get(Vec<u8>),
    GetAsOf(Vec<u8>, i64),
    GetVersions(Vec<u8>, i64, i64, bool),
    Commit,
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    select(vec![&b""[..], b"\0", b"a", b"a\0", b"ab"]).prop_map(<[u8]>::to_vec)
}

/// Times relative to the stream time: most within the retention, some older.
fn time() -> impl Strategy<Value = i64> {
    -12_i64..4
}

impl Op {
    /// The operation with its times made absolute, relative to `stream_time`.
    fn at(&self, stream_time: Option<i64>) -> Op {
        let t = |delta: &i64| stream_time.unwrap_or(0) + delta;
        match self {
            Op::Put(k, v, d) => Op::Put(k.clone(), *v, t(d)),
            Op::PutVersion(k, v, d) => Op::PutVersion(k.clone(), *v, t(d)),
            Op::GetVersions(k, a, b, asc) => Op::GetVersions(k.clone(), t(a), t(b), *asc),
            Op::Delete(k, d) => Op::Delete(k.clone(), t(d)),
            Op::GetAsOf(k, d) => Op::GetAsOf(k.clone(), t(d)),
            other => other.clone(),
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (key(), 0_u8..8, time()).prop_map(|(k, v, t)| Op::Put(k, v, t)),
        2 => (key(), proptest::option::of(0_u8..8), time())
            .prop_map(|(k, v, t)| Op::PutVersion(k, v, t)),
        3 => (key(), time(), time(), proptest::bool::ANY)
            .prop_map(|(k, a, b, asc)| Op::GetVersions(k, a, b, asc)),
        2 => (key(), time()).prop_map(|(k, t)| Op::Delete(k, t)),
        2 => key().prop_map(Op::Get),
        4 => (key(), time()).prop_map(|(k, t)| Op::GetAsOf(k, t)),
        1 => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

/// Every version ever written (nothing cleaned), by key and timestamp; `None` a tombstone.
#[derive(Debug, Default)]
struct Model {
    versions: BTreeMap<Vec<u8>, BTreeMap<i64, Option<Vec<u8>>>>,
    stream_time: Option<i64>,
    expired: u64,
}

impl Model {
    fn cutoff(&self) -> i64 {
        self.stream_time.map_or(i64::MIN, |t| t - RETENTION)
    }

    fn as_of(&self, key: &[u8], ts: i64) -> Option<VersionedRecord> {
        let versions = self.versions.get(key)?;
        let (at, value) = versions.range(..=ts).next_back()?;
        let valid_to = versions.range(at + 1..).next().map(|(t, _)| *t);
        value.clone().map(|value| VersionedRecord {
            value,
            timestamp: *at,
            valid_to,
        })
    }

    /// The latest version of `key` if it is a value put at or before `ts`: what answers a
    /// read older than the history retention.
    fn latest_before(&self, key: &[u8], ts: i64) -> Option<VersionedRecord> {
        self.as_of(key, i64::MAX)
            .filter(|latest| latest.timestamp <= ts)
    }

    fn get_as_of(&self, key: &[u8], ts: i64) -> Option<VersionedRecord> {
        if ts < self.cutoff() {
            self.latest_before(key, ts)
        } else {
            self.as_of(key, ts)
        }
    }

    /// KIP-968's query, newest first: value versions with `timestamp <= to` still valid after
    /// `max(from, cutoff)`; only the latest when `to` is older than the cutoff.
    fn versions(&self, key: &[u8], from: i64, to: i64) -> Vec<VersionedRecord> {
        if from > to {
            return Vec::new();
        }
        if to < self.cutoff() {
            return self.latest_before(key, to).into_iter().collect();
        }
        let lower = from.max(self.cutoff());
        let Some(versions) = self.versions.get(key) else {
            return Vec::new();
        };
        let mut found: Vec<_> = versions
            .range(..=to)
            .filter_map(|(at, value)| {
                let valid_to = versions.range(at + 1..).next().map(|(t, _)| *t);
                let valid = valid_to.is_none_or(|end| end > lower);
                value
                    .clone()
                    .filter(|_| valid)
                    .map(|value| VersionedRecord {
                        value,
                        timestamp: *at,
                        valid_to,
                    })
            })
            .collect();
        found.reverse();
        found
    }

    fn write(
        &mut self,
        key: &[u8],
        value: Option<Vec<u8>>,
        ts: i64,
    ) -> (PutOutcome, Option<VersionedRecord>, VersionPut) {
        self.stream_time = Some(self.stream_time.map_or(ts, |t| t.max(ts)));
        if ts < self.cutoff() {
            self.expired += 1;
            return (PutOutcome::Expired, None, VersionPut::Expired);
        }
        let before = self.as_of(key, ts);
        let versions = self.versions.entry(key.to_vec()).or_default();
        versions.insert(ts, value);
        let next = versions.range(ts + 1..).next().map(|(t, _)| *t);
        (
            PutOutcome::Written(1),
            before,
            VersionPut::Written { valid_to: next },
        )
    }
}

fn open(fx: &OperatorFixture<'_>) -> VersionedStore {
    VersionedStore::open(fx.store(), RETENTION)
        .unwrap_or_else(|err| panic!("opening the versioned store failed: {err}"))
}

fn step(
    fx: &OperatorFixture<'_>,
    store: &VersionedStore,
    model: &mut Model,
    op: &Op,
) -> Result<(), TestCaseError> {
    match &op.at(model.stream_time) {
        Op::Put(k, v, t) => {
            let got = store.put(k, &[*v], *t).map_err(fail)?;
            check("put", got, model.write(k, Some(vec![*v]), *t).0)?;
        }
        Op::Delete(k, t) => check(
            "delete",
            store.delete(k, *t).map_err(fail)?,
            model.write(k, None, *t).1,
        )?,
        Op::Get(k) => {
            let want = model.as_of(k, i64::MAX);
            check("get", store.get(k).map_err(fail)?, want)?;
        }
        Op::GetAsOf(k, t) => {
            let got = store.get_as_of(k, *t).map_err(fail)?;
            check("get_as_of", got, model.get_as_of(k, *t))?;
        }
        Op::PutVersion(k, v, t) => {
            let value = v.map(|v| vec![v]);
            let got = store.put_version(k, value.as_deref(), *t).map_err(fail)?;
            check("put_version", got, model.write(k, value, *t).2)?;
        }
        Op::GetVersions(k, a, b, ascending) => {
            let order = if *ascending {
                ResultOrder::Ascending
            } else {
                ResultOrder::Descending
            };
            let mut want = model.versions(k, *a, *b);
            if *ascending {
                want.reverse();
            }
            let got = store.get_versions(k, *a, *b, order).map_err(fail)?;
            check("get_versions", got, want)?;
        }
        Op::Commit => fx.commit(),
        Op::Reopen => unreachable!("the model test reopens the store itself"),
    }
    check("stream time", store.stream_time(), model.stream_time)
}

/// Random out-of-order puts (with their validity) and deletes, gets, reads as of a time and
/// over a time range (KIP-968), commits and reopens against a model that keeps every
/// version: cleaning must never change an answer.
pub fn model(factory: &dyn StoreFactory, mode: Mode) {
    run_model("versioned store", mode, vec(op(), 1..50), |ops| {
        let mut fx = OperatorFixture::new(factory, mode);
        let mut store = open(&fx);
        let mut model = Model::default();
        for op in &ops {
            if let Op::Reopen = op {
                check(
                    "expired before reopen",
                    store.expired_writes(),
                    model.expired,
                )?;
                drop(store);
                fx.reopen();
                store = open(&fx);
                model.expired = 0;
            } else {
                step(&fx, &store, &mut model, op)?;
            }
        }
        check("expired", store.expired_writes(), model.expired)
    });
}

fn put(store: &VersionedStore, key: &[u8], value: &[u8], ts: i64) {
    let outcome = store
        .put(key, value, ts)
        .unwrap_or_else(|err| panic!("put failed: {err}"));
    assert_eq!(outcome, PutOutcome::Written(1));
}

fn as_of(store: &VersionedStore, key: &[u8], ts: i64) -> Option<(Vec<u8>, i64, Option<i64>)> {
    store
        .get_as_of(key, ts)
        .unwrap_or_else(|err| panic!("get_as_of failed: {err}"))
        .map(|r| (r.value, r.timestamp, r.valid_to))
}

/// A put between two versions splits the validity of the earlier one; a delete puts a
/// tombstone and returns the record it ends.
pub fn out_of_order_puts_split_validity(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = VersionedStore::open(fx.store(), 30).expect("open");
    put(&store, b"k", b"a", 10);
    put(&store, b"k", b"c", 30);
    put(&store, b"k", b"b", 20);
    assert_eq!(as_of(&store, b"k", 15), Some((b"a".to_vec(), 10, Some(20))));
    assert_eq!(as_of(&store, b"k", 25), Some((b"b".to_vec(), 20, Some(30))));
    assert_eq!(as_of(&store, b"k", 9), None);
    let ended = store.delete(b"k", 25).expect("delete");
    assert_eq!(
        ended.map(|r| (r.value, r.timestamp)),
        Some((b"b".to_vec(), 20))
    );
    assert_eq!(as_of(&store, b"k", 27), None);
    assert_eq!(as_of(&store, b"k", 24), Some((b"b".to_vec(), 20, Some(25))));
    assert_eq!(
        store.get(b"k").expect("get").map(|r| r.value),
        Some(b"c".to_vec())
    );
}

/// Versions that can answer no query any more are deleted from the underlying store when
/// the stream time moves; the latest version always stays.
pub fn history_older_than_retention_is_cleaned(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = VersionedStore::open(fx.store(), 30).expect("open");
    for ts in 0..10 {
        put(&store, b"k", &[ts as u8], ts);
    }
    put(&store, b"gone", b"x", 0);
    assert_eq!(
        store.delete(b"gone", 1).expect("delete").map(|r| r.value),
        Some(b"x".to_vec())
    );
    let stored = || {
        fx.store()
            .prefix_scan(b"")
            .map(Iterator::count)
            .expect("scan")
    };
    // 12 versions, 11 index entries (9 superseded values of k, the value of "gone" ended by
    // its tombstone, the tombstone), the stream time.
    assert_eq!(stored(), 12 + 11 + 1);
    // Stream time 100, cutoff 70: k@9 (now ended at 100, so indexed), k@100, the stream time.
    put(&store, b"k", b"new", 100);
    assert_eq!(stored(), 2 + 1 + 1);
    assert_eq!(store.put(b"late", b"v", 69).ok(), Some(PutOutcome::Expired));
    assert_eq!(as_of(&store, b"k", 70), Some((vec![9], 9, Some(100))));
    assert_eq!(as_of(&store, b"k", 69), None);
    assert_eq!(store.get(b"gone").expect("get"), None);
    assert_eq!(store.expired_writes(), 1);
}

/// Versions that stopped being valid at or before the history cutoff never answer, even while
/// still stored (the one ended by a put at the cutoff is cleaned only when the stream time next
/// moves): the answers do not depend on when cleaning runs.
pub fn history_past_the_cutoff_is_never_answered(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = VersionedStore::open(fx.store(), 10).expect("open");
    put(&store, b"k", b"a", 0);
    // Stream time 20, cutoff 10.
    put(&store, b"other", b"x", 20);
    // Ends k@0 at the cutoff exactly.
    put(&store, b"k", b"b", 10);
    let versions = |from, to| {
        store
            .get_versions(b"k", from, to, ResultOrder::Ascending)
            .expect("get_versions")
            .into_iter()
            .map(|r| (r.value, r.timestamp, r.valid_to))
            .collect::<Vec<_>>()
    };
    assert_eq!(versions(0, 20), vec![(b"b".to_vec(), 10, None)]);
    assert_eq!(versions(0, 9), Vec::new());
    assert_eq!(as_of(&store, b"k", 9), None);
    assert_eq!(as_of(&store, b"k", 10), Some((b"b".to_vec(), 10, None)));
}
