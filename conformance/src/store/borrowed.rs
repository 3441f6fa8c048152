//! The borrowing methods held to the contract of the owned ones. The reads, `get_with` and
//! `scan`: the same answers, bounds, order and consistency, plus early stop, the visitor's call
//! count, closed stores, and a visitor that calls back into the store. `write_ops` and
//! `write_ops_non_atomic`: the semantics of `write`, as one thread sees them.

use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::ops::ControlFlow;
use std::sync::mpsc;
use std::time::Duration;

use store_api::{BatchOp, ErrorKind, KeyValueStore, KvPair, Result};

use super::support::{assert_kind, get, in_range, put_all, put_keys, reverse_scan, scan};
use crate::{StoreFactory, StoreFixture};

/// The value `get_with` lends, and how many times it called the visitor.
fn lent_value(store: &dyn KeyValueStore, key: &[u8]) -> (Option<Vec<u8>>, usize) {
    let (mut value, mut calls) = (None, 0);
    store
        .get_with(key, &mut |lent| {
            value = lent.map(<[u8]>::to_vec);
            calls += 1;
        })
        .unwrap_or_else(|err| panic!("get_with({key:?}) failed: {err}"));
    (value, calls)
}

/// Up to `limit` pairs `scan` lends, copied, stopping it there.
fn lent_pairs(
    store: &dyn KeyValueStore,
    (from, to): (Bound<&[u8]>, Bound<&[u8]>),
    reverse: bool,
    limit: usize,
) -> Result<Vec<KvPair>> {
    let mut pairs = Vec::new();
    if limit == 0 {
        return Ok(pairs);
    }
    store.scan(from, to, reverse, &mut |key, value| {
        pairs.push((key.to_vec(), value.to_vec()));
        if pairs.len() == limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    Ok(pairs)
}

/// Every pair `scan` lends.
fn lent_all(
    store: &dyn KeyValueStore,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    reverse: bool,
) -> Vec<KvPair> {
    lent_pairs(store, bounds, reverse, usize::MAX)
        .unwrap_or_else(|err| panic!("scan({bounds:?}, reverse {reverse}) failed: {err}"))
}

/// `get_with` lends what `get` returns, calling the visitor exactly once: for a present key, a
/// missing one, a deleted one, the empty key, an empty value, binary bytes and an overwrite.
pub fn get_with_lends_what_get_returns(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    let binary: Vec<u8> = (0..=255).collect();
    put_all(
        store,
        &[
            (b"k", b"v"),
            (b"", b"empty key"),
            (b"empty value", b""),
            (b"\x00\xff", &binary),
            (b"gone", b"x"),
            (b"twice", b"1"),
        ],
    );
    store.delete(b"gone").expect("delete");
    store.put(b"twice", b"2").expect("put");
    for key in [
        &b"k"[..],
        b"",
        b"empty value",
        b"\x00\xff",
        b"gone",
        b"twice",
        b"missing",
        b"k\x00",
    ] {
        let (lent, calls) = lent_value(store, key);
        assert_eq!(
            calls, 1,
            "get_with({key:?}) called its visitor {calls} times"
        );
        assert_eq!(lent, get(store, key), "get_with({key:?}) against get");
    }
    assert_eq!(lent_value(store, b"empty value").0, Some(Vec::new()));
    assert_eq!(lent_value(store, b"twice").0, Some(b"2".to_vec()));
}

/// Keys for the bound grid, in order.
const KEYS: [&[u8]; 7] = [b"", b"\x00", b"b", b"b\x00", b"d", b"\x80", b"\xff\xff"];

/// Bound keys: present ones and ones before, between and after them.
const AT: [&[u8]; 10] = [
    b"",
    b"\x00",
    b"a",
    b"b",
    b"b\x00",
    b"c",
    b"d",
    b"\xff",
    b"\xff\xff",
    b"\xff\xff\xff",
];

fn every_bound() -> Vec<Bound<&'static [u8]>> {
    let mut bounds = vec![Unbounded];
    bounds.extend(AT.iter().map(|key| Included(*key)));
    bounds.extend(AT.iter().map(|key| Excluded(*key)));
    bounds
}

/// `scan` selects and orders exactly as `range` and `reverse_range` do, and as an oracle
/// says, for every pair of included, excluded and unbounded bounds, inverted and empty
/// intervals included (they visit nothing).
pub fn scan_matches_range_under_every_bound(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    put_keys(store, &KEYS);
    for from in every_bound() {
        for to in every_bound() {
            let mut expected: Vec<KvPair> = KEYS
                .iter()
                .filter(|key| in_range(from, to, key))
                .map(|key| (key.to_vec(), key.to_vec()))
                .collect();
            let forward = lent_all(store, (from, to), false);
            assert_eq!(forward, expected, "scan({from:?}, {to:?})");
            assert_eq!(forward, scan(store, from, to), "scan against range");
            expected.reverse();
            let backward = lent_all(store, (from, to), true);
            assert_eq!(backward, expected, "reverse scan({from:?}, {to:?})");
            assert_eq!(
                backward,
                reverse_scan(store, from, to),
                "reverse scan against reverse_range"
            );
        }
    }
}

/// `scan` on an empty store, and over intervals no key falls in, visits nothing.
pub fn scan_of_nothing_visits_nothing(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    for reverse in [false, true] {
        assert!(lent_all(store, (Unbounded, Unbounded), reverse).is_empty());
    }
    put_keys(store, &[b"a", b"c"]);
    let (b, z): (&[u8], &[u8]) = (b"b", b"z");
    for reverse in [false, true] {
        assert!(lent_all(store, (Included(b), Excluded(b)), reverse).is_empty());
        assert!(lent_all(store, (Excluded(b), Included(b)), reverse).is_empty());
        assert!(lent_all(store, (Included(z), Included(b)), reverse).is_empty());
        assert!(lent_all(store, (Excluded(b), Excluded(b"c")), reverse).is_empty());
    }
}

/// Breaking stops the scan at once: a visitor that breaks at the n-th pair is called n times
/// and got the first n pairs of the full scan, in both directions, across stretches of a few
/// thousand keys (the memory backend reads in batches of up to 256).
pub fn scan_stops_when_the_visitor_breaks(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    let keys: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_be_bytes().to_vec()).collect();
    let mut batch = store_api::WriteBatch::new();
    for key in &keys {
        batch.put(key.clone(), key.repeat(3));
    }
    store.write(batch).expect("write");
    for reverse in [false, true] {
        let full = lent_all(store, (Unbounded, Unbounded), reverse);
        assert_eq!(full.len(), keys.len(), "reverse {reverse}");
        for limit in [1, 2, 10, 17, 255, 256, 257, 1000, 2999] {
            let got = lent_pairs(store, (Unbounded, Unbounded), reverse, limit)
                .unwrap_or_else(|err| panic!("scan failed: {err}"));
            assert_eq!(got.len(), limit, "visits after a break at {limit}");
            assert_eq!(got[..], full[..limit], "the first {limit} pairs");
        }
    }
    let mut calls = 0;
    store
        .scan(Unbounded, Unbounded, false, &mut |_, _| {
            calls += 1;
            ControlFlow::Break(())
        })
        .expect("scan");
    assert_eq!(calls, 1, "a visitor that breaks at once is called once");
}

/// The empty key and empty values are lent as ordinary pairs, and each pair shows the latest
/// write of its key: overwrites and deletes are reflected, in both directions.
pub fn scan_lends_empty_bytes_and_latest_values(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    put_all(
        store,
        &[(b"", b""), (b"a", b"old"), (b"b", b""), (b"c", b"x")],
    );
    store.put(b"a", b"new").expect("put");
    store.delete(b"c").expect("delete");
    let expected: Vec<KvPair> = vec![
        (Vec::new(), Vec::new()),
        (b"a".to_vec(), b"new".to_vec()),
        (b"b".to_vec(), Vec::new()),
    ];
    assert_eq!(lent_all(store, (Unbounded, Unbounded), false), expected);
    let reversed: Vec<KvPair> = expected.into_iter().rev().collect();
    assert_eq!(lent_all(store, (Unbounded, Unbounded), true), reversed);
}

/// Values of every size, from empty to past 64 KiB, interleaved over more keys than one
/// stretch of a batched scan takes, are lent whole and in order, in both directions, and
/// equal what `range` returns (a backend may copy short values and share long ones).
pub fn scan_lends_values_of_every_size(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    const SIZES: [usize; 8] = [0, 1, 255, 256, 257, 1000, 4096, 70_000];
    let mut batch = store_api::WriteBatch::new();
    for i in 0..600u32 {
        let len = SIZES[i as usize % SIZES.len()];
        let value: Vec<u8> = (0..len).map(|at| (at as u32 ^ i) as u8).collect();
        batch.put(i.to_be_bytes().to_vec(), value);
    }
    store.write(batch).expect("write");
    let forward = lent_all(store, (Unbounded, Unbounded), false);
    assert_eq!(forward.len(), 600, "pairs lent");
    assert!(
        forward == scan(store, Unbounded, Unbounded),
        "scan against range"
    );
    let backward = lent_all(store, (Unbounded, Unbounded), true);
    assert!(
        backward == reverse_scan(store, Unbounded, Unbounded),
        "reverse scan against reverse_range"
    );
    let (from, to): (&[u8], &[u8]) = (&7u32.to_be_bytes(), &300u32.to_be_bytes());
    for reverse in [false, true] {
        let got = lent_pairs(store, (Excluded(from), Included(to)), reverse, 100)
            .unwrap_or_else(|err| panic!("scan failed: {err}"));
        let mut expected = scan(store, Excluded(from), Included(to));
        if reverse {
            expected.reverse();
        }
        expected.truncate(100);
        assert!(
            got == expected,
            "the first 100 pairs of (7, 300], reverse {reverse}"
        );
    }
}

/// After `close`, `get_with` and `scan` fail with `Closed` without calling the visitor.
pub fn closed_store_rejects_borrowed_reads(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    put_keys(store, &[b"a", b"b"]);
    store.close().expect("close");
    let mut calls = 0;
    assert_kind(
        store.get_with(b"a", &mut |_| calls += 1),
        ErrorKind::Closed,
        "get_with",
    );
    for reverse in [false, true] {
        assert_kind(
            store.scan(Unbounded, Unbounded, reverse, &mut |_, _| {
                calls += 1;
                ControlFlow::Continue(())
            }),
            ErrorKind::Closed,
            "scan",
        );
    }
    assert_eq!(calls, 0, "a visitor was called on a closed store");
}

/// Oversized keys are `InvalidArgument` for `get_with`, and its visitor is not called.
pub fn get_with_rejects_oversized_keys(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let key = vec![b'k'; store_api::limits::MAX_KEY_LEN + 1];
    let mut calls = 0;
    assert_kind(
        fx.store().get_with(&key, &mut |_| calls += 1),
        ErrorKind::InvalidArgument,
        "get_with of an oversized key",
    );
    assert_eq!(calls, 0);
}

/// The visitor runs with no lock of the store held: it may read and write the same store
/// without deadlocking. Its writes land behind the scan's position (`0a` sorts before `a`),
/// so no scan may show them: a snapshot store by its snapshot, a weakly consistent one
/// because it resumes strictly after the last key it visited.
pub fn scan_visitor_may_call_the_store(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.shared();
    put_all(store.as_ref(), &[(b"a", b"1"), (b"c", b"1"), (b"e", b"1")]);
    let (done, finished) = mpsc::channel();
    // A deadlock must fail the case, not hang the suite: the work runs on its own thread.
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let scanned = store.scan(Unbounded, Unbounded, false, &mut |key, value| {
            seen.push((key.to_vec(), value.to_vec()));
            let mut inner = 0;
            let read = store.get_with(key, &mut |_| inner += 1);
            let wrote = store.put(&[b"0", key].concat(), b"2");
            let scanned = store.scan(Unbounded, Unbounded, true, &mut |_, _| {
                inner += 1;
                ControlFlow::Break(())
            });
            assert!(read.and(wrote).and(scanned).is_ok() && inner == 2);
            ControlFlow::Continue(())
        });
        let snapshot = store.capabilities().snapshot_iterators;
        let _ = done.send((scanned.map(|()| seen), snapshot));
    });
    let (seen, snapshot) = match finished.recv_timeout(Duration::from_secs(60)) {
        Ok((seen, snapshot)) => (seen.expect("scan"), snapshot),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("a visitor calling the store deadlocked the scan")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the visitor's calls failed"),
    };
    let expected: Vec<KvPair> = [&b"a"[..], b"c", b"e"]
        .iter()
        .map(|key| (key.to_vec(), b"1".to_vec()))
        .collect();
    let what = if snapshot {
        "snapshot"
    } else {
        "weakly consistent"
    };
    assert_eq!(seen, expected, "a {what} scan and writes behind it");
    let after = lent_all(fx.store(), (Unbounded, Unbounded), false);
    assert_eq!(
        after.len(),
        6,
        "every write of the visitor landed: {after:?}"
    );
}

/// `write_ops` applies borrowed operations as `write` applies a batch: in order (the later of
/// two on one key wins), deletes of missing keys included, nothing for no operations; an
/// oversized key anywhere writes nothing; a closed store answers `Closed`.
pub fn write_ops_applies_like_write(factory: &dyn StoreFactory) {
    applies_borrowed_ops(factory, "write_ops", &|store, ops| store.write_ops(ops));
}

/// `write_ops_non_atomic` applies operations as `write_ops` does, without atomicity, which a
/// single thread cannot observe: the same results, checks and errors.
pub fn write_ops_non_atomic_applies_like_write_ops(factory: &dyn StoreFactory) {
    applies_borrowed_ops(factory, "write_ops_non_atomic", &|store, ops| {
        store.write_ops_non_atomic(ops)
    });
}

/// A store method that applies borrowed operations.
type ApplyOps = dyn Fn(&dyn KeyValueStore, &[BatchOp]) -> Result<()>;

/// Checks that `apply` (`call` names it in messages) applies `BatchOp`s in order, rejects an
/// oversized key before writing anything, and answers `Closed` after close.
fn applies_borrowed_ops(factory: &dyn StoreFactory, call: &str, apply: &ApplyOps) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    put_keys(store, &[b"gone", b"kept"]);
    let put = |key: &[u8], value: &[u8]| BatchOp::Put {
        key: key.to_vec(),
        value: value.to_vec(),
    };
    let delete = |key: &[u8]| BatchOp::Delete { key: key.to_vec() };
    let ops = [
        put(b"a", b"1"),
        put(b"", b""),
        delete(b"gone"),
        delete(b"never"),
        put(b"a", b"2"),
        put(b"b", b"1"),
        delete(b"b"),
    ];
    apply(store, &ops).unwrap_or_else(|err| panic!("{call}: {err}"));
    let expected: Vec<KvPair> = [(&b""[..], &b""[..]), (b"a", b"2"), (b"kept", b"kept")]
        .iter()
        .map(|(key, value)| (key.to_vec(), value.to_vec()))
        .collect();
    assert_eq!(scan(store, Unbounded, Unbounded), expected, "after {call}");
    apply(store, &[]).unwrap_or_else(|err| panic!("{call} of nothing: {err}"));
    let oversized = [
        put(b"c", b"1"),
        delete(&vec![b'k'; store_api::limits::MAX_KEY_LEN + 1]),
    ];
    assert_kind(
        apply(store, &oversized),
        ErrorKind::InvalidArgument,
        &format!("{call} with an oversized key"),
    );
    assert_eq!(get(store, b"c"), None, "a rejected {call} wrote something");
    store.close().expect("close");
    assert_kind(
        apply(store, &[put(b"d", b"1")]),
        ErrorKind::Closed,
        &format!("{call} after close"),
    );
}
