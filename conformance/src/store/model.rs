//! A proptest state machine: random operation sequences checked, after every operation,
//! against a `BTreeMap` model.
//!
//! Keys come from a four-byte alphabet (0x00, 0x7F, 0x80, 0xFF) with lengths 0 to 3, so the
//! empty key, 0x00 and 0xFF are common and operations collide on the same keys. A run is 64
//! sequences of up to 50 operations unless `PROPTEST_CASES` says otherwise; a failure panics
//! with the shrunk, minimal operation sequence.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, any, prop_oneof};
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use store_api::{KeyValueStore, KvPair, WriteBatch};

use super::support::in_range;
use crate::{StoreFactory, StoreFixture};

/// Bytes printed as an escaped byte string, so a failing sequence is readable.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Bytes(Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// One step of a random sequence.
#[derive(Debug, Clone)]
enum Op {
    Put(Bytes, Bytes),
    Delete(Bytes),
    PutIfAbsent(Bytes, Bytes),
    /// `(key, Some(value))` is a put, `(key, None)` a delete.
    Write(Vec<(Bytes, Option<Bytes>)>),
    DeleteRange(Bound<Bytes>, Bound<Bytes>),
    Get(Bytes),
    Range(Bound<Bytes>, Bound<Bytes>),
    ReverseRange(Bound<Bytes>, Bound<Bytes>),
    PrefixScan(Bytes),
    ReversePrefixScan(Bytes),
    Flush,
    /// Close and reopen the directory; nothing happens for a store that is not persistent.
    Reopen,
}

fn key() -> impl Strategy<Value = Bytes> {
    vec(select(vec![0x00_u8, 0x7F, 0x80, 0xFF]), 0..=3).prop_map(Bytes)
}

fn value() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=4).prop_map(Bytes)
}

fn bound() -> impl Strategy<Value = Bound<Bytes>> {
    prop_oneof![
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
        Just(Bound::Unbounded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => key().prop_map(Op::Delete),
        2 => (key(), value()).prop_map(|(k, v)| Op::PutIfAbsent(k, v)),
        2 => vec((key(), proptest::option::of(value())), 0..=5).prop_map(Op::Write),
        1 => (bound(), bound()).prop_map(|(from, to)| Op::DeleteRange(from, to)),
        2 => key().prop_map(Op::Get),
        1 => (bound(), bound()).prop_map(|(from, to)| Op::Range(from, to)),
        1 => (bound(), bound()).prop_map(|(from, to)| Op::ReverseRange(from, to)),
        1 => key().prop_map(Op::PrefixScan),
        1 => key().prop_map(Op::ReversePrefixScan),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn fail(what: impl fmt::Display) -> TestCaseError {
    TestCaseError::fail(what.to_string())
}

fn collect(made: store_api::Result<store_api::KvIter>) -> Result<Vec<KvPair>, TestCaseError> {
    made.map_err(fail)?.map(|item| item.map_err(fail)).collect()
}

fn as_ref(bound: &Bound<Bytes>) -> Bound<&[u8]> {
    bound.as_ref().map(|bytes| bytes.0.as_slice())
}

/// The model's answer to a range scan.
fn model_range(model: &Model, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Vec<KvPair> {
    let selected = model.iter().filter(|(key, _)| in_range(from, to, key));
    selected.map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn model_prefix(model: &Model, prefix: &[u8]) -> Vec<KvPair> {
    let selected = model.iter().filter(|(key, _)| key.starts_with(prefix));
    selected.map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn reversed(mut entries: Vec<KvPair>) -> Vec<KvPair> {
    entries.reverse();
    entries
}

/// Applies a write to the store and the model; returns an error when the store disagrees.
fn apply_write(fx: &mut StoreFixture<'_>, model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let store = fx.store();
    match op {
        Op::Put(k, v) => {
            store.put(&k.0, &v.0).map_err(fail)?;
            model.insert(k.0.clone(), v.0.clone());
        }
        Op::Delete(k) => {
            store.delete(&k.0).map_err(fail)?;
            model.remove(&k.0);
        }
        Op::PutIfAbsent(k, v) => {
            let previous = store.put_if_absent(&k.0, &v.0).map_err(fail)?;
            if previous.as_ref() != model.get(&k.0) {
                return Err(fail(format!("put_if_absent returned {previous:?}")));
            }
            model.entry(k.0.clone()).or_insert_with(|| v.0.clone());
        }
        Op::Write(ops) => {
            let mut batch = WriteBatch::new();
            for (k, v) in ops {
                match v {
                    Some(v) => batch.put(k.0.clone(), v.0.clone()),
                    None => batch.delete(k.0.clone()),
                };
                match v {
                    Some(v) => model.insert(k.0.clone(), v.0.clone()),
                    None => model.remove(&k.0),
                };
            }
            store.write(batch).map_err(fail)?;
        }
        Op::DeleteRange(from, to) => {
            let (from, to) = (as_ref(from), as_ref(to));
            store.delete_range(from, to).map_err(fail)?;
            model.retain(|key, _| !in_range(from, to, key));
        }
        Op::Flush => store.flush().map_err(fail)?,
        Op::Reopen if store.capabilities().persistent => fx.reopen(),
        _ => {}
    }
    Ok(())
}

/// Checks a read against the model.
fn check_read(store: &dyn KeyValueStore, model: &Model, op: &Op) -> Result<(), TestCaseError> {
    let (actual, expected) = match op {
        Op::Get(k) => {
            let value = store.get(&k.0).map_err(fail)?;
            let expected = model.get(&k.0).cloned();
            return if value == expected {
                Ok(())
            } else {
                Err(fail(format!(
                    "get returned {value:?}, model has {expected:?}"
                )))
            };
        }
        Op::Range(from, to) => {
            let (from, to) = (as_ref(from), as_ref(to));
            (
                collect(store.range(from, to))?,
                model_range(model, from, to),
            )
        }
        Op::ReverseRange(from, to) => {
            let (from, to) = (as_ref(from), as_ref(to));
            let expected = reversed(model_range(model, from, to));
            (collect(store.reverse_range(from, to))?, expected)
        }
        Op::PrefixScan(p) => (collect(store.prefix_scan(&p.0))?, model_prefix(model, &p.0)),
        Op::ReversePrefixScan(p) => {
            let expected = reversed(model_prefix(model, &p.0));
            (collect(store.reverse_prefix_scan(&p.0))?, expected)
        }
        _ => return Ok(()),
    };
    if actual == expected {
        Ok(())
    } else {
        Err(fail(format!(
            "scan returned {actual:?}, model has {expected:?}"
        )))
    }
}

/// Runs one sequence from a new store, checking each result and the full contents after
/// every operation.
fn run_sequence(factory: &dyn StoreFactory, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut fx = StoreFixture::new(factory);
    let mut model = Model::new();
    for (step, op) in ops.iter().enumerate() {
        let at = |err: TestCaseError| fail(format!("step {step} ({op:?}): {err}"));
        apply_write(&mut fx, &mut model, op).map_err(at)?;
        check_read(fx.store(), &model, op).map_err(at)?;
        let contents = collect(fx.store().range(Bound::Unbounded, Bound::Unbounded)).map_err(at)?;
        if contents != model_range(&model, Bound::Unbounded, Bound::Unbounded) {
            return Err(at(fail(format!(
                "contents {contents:?} differ from the model {model:?}"
            ))));
        }
    }
    Ok(())
}

/// The number of sequences: `PROPTEST_CASES` when set, else 64.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(64)
}

/// Random sequences of put, delete, put_if_absent, batch writes, gets, ranges and reverse
/// ranges, prefix scans, flushes and reopens (reopen only when `persistent`) agree with a
/// `BTreeMap` model after every operation. On failure the panic message holds the minimal
/// failing sequence.
pub fn random_operations_match_model(factory: &dyn StoreFactory) {
    let config = Config {
        cases: cases(),
        // Failures are reported in the panic message; a library has no source file to
        // persist regressions next to.
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&vec(op(), 1..=50), |ops| run_sequence(factory, &ops));
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => panic!(
            "the store disagrees with the model: {reason}\nminimal failing sequence ({} ops):\n{ops:#?}",
            ops.len()
        ),
        Err(TestError::Abort(reason)) => panic!("the model test aborted: {reason}"),
    }
}
