//! Kafka Streams' own tests of its session stores, `AbstractSessionBytesStoreTest`
//! (apache/kafka, `streams/src/test/java/org/apache/kafka/streams/state/internals`), ported
//! case by case: each function is named after the Java test it comes from and keeps its inputs
//! and expected answers. Keys are the UTF-8 bytes of the Java strings (or the Java test's
//! bytes), `Long` values 8 big-endian bytes; Kafka's `SessionWindow(start, end)` is
//! [`Session::new`]`(key, start, end)`; `findSessions(keyFrom, keyTo, ...)` is
//! [`SessionStore::find_sessions_in_range`], `fetch(keyFrom, keyTo)`
//! [`SessionStore::fetch_key_range`] and `findSessions(earliestEnd, latestEnd)`
//! [`SessionStore::find_sessions_ending`]; a `null` key bound is `None`.
//!
//! Where Kafka compares answers as sets, they are compared as sets here; where it compares
//! lists, as lists. The Java tests of null keys, of iterators after `close`, of peeking and
//! of the record position have no counterpart in this API and are left out.

use std::collections::BTreeSet;

use store_api::Result;

use super::{Mode, OperatorFixture, StoreFactory};
use crate::session::{Session, SessionIter, SessionStore, SessionStoreConfig};
use crate::window::{DropCounts, PutOutcome};

const SEGMENT_INTERVAL: i64 = 60_000;
const RETENTION_PERIOD: i64 = 10_000;

fn open_with(fx: &OperatorFixture<'_>, retention: i64) -> SessionStore {
    // Kafka's segment interval for this retention is max(retention / 2, 60 000) as here.
    SessionStore::open(fx.store(), SessionStoreConfig::new(retention))
        .unwrap_or_else(|err| panic!("opening the session store failed: {err}"))
}

fn open(fx: &OperatorFixture<'_>) -> SessionStore {
    open_with(fx, RETENTION_PERIOD)
}

fn session(key: &str, start: i64, end: i64) -> Session {
    Session::new(key.as_bytes(), start, end)
}

fn put(store: &SessionStore, session: &Session, value: i64) {
    let outcome = store
        .put(session, &value.to_be_bytes())
        .unwrap_or_else(|err| panic!("put of {session:?} failed: {err}"));
    assert_eq!(outcome, PutOutcome::Written(1), "put of {session:?}");
}

fn put_all(store: &SessionStore, sessions: &[(Session, i64)]) {
    for (session, value) in sessions {
        put(store, session, *value);
    }
}

fn long(bytes: &[u8]) -> i64 {
    let array = <[u8; 8]>::try_from(bytes).unwrap_or_else(|_| panic!("not a long: {bytes:?}"));
    i64::from_be_bytes(array)
}

/// Kafka's `toList`.
fn found(iter: Result<SessionIter>) -> Vec<(Session, i64)> {
    let all: Vec<(Session, Vec<u8>)> = iter
        .and_then(Iterator::collect)
        .unwrap_or_else(|err| panic!("a session find failed: {err}"));
    all.into_iter()
        .map(|(session, value)| (session, long(&value)))
        .collect()
}

/// Kafka's `valuesToSet`.
fn value_set(iter: Result<SessionIter>) -> BTreeSet<i64> {
    found(iter).into_iter().map(|(_, value)| value).collect()
}

fn set(values: &[i64]) -> BTreeSet<i64> {
    values.iter().copied().collect()
}

fn reversed<T: Clone>(items: &[T]) -> Vec<T> {
    items.iter().rev().cloned().collect()
}

/// The four sessions of key `a` of `shouldPutAndFindSessionsInRange`.
fn put_four_sessions_of_a(store: &SessionStore) -> [(Session, i64); 2] {
    let a1 = (session("a", 10, 10), 1);
    let a2 = (session("a", 500, 1000), 2);
    put_all(
        store,
        &[
            a1.clone(),
            a2.clone(),
            (session("a", 1500, 2000), 1),
            (session("a", 2500, 3000), 2),
        ],
    );
    [a1, a2]
}

/// `AbstractSessionBytesStoreTest.shouldPutAndFindSessionsInRange`.
pub fn should_put_and_find_sessions_in_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let [a1, a2] = put_four_sessions_of_a(&store);
    assert_eq!(found(store.find_sessions(b"a", 0, 1000)), [a1, a2.clone()]);
    assert_eq!(found(store.find_sessions(b"a", 400, 600)), [a2]);
}

/// `AbstractSessionBytesStoreTest.shouldPutAndBackwardFindSessionsInRange`.
pub fn should_put_and_backward_find_sessions_in_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let [a1, a2] = put_four_sessions_of_a(&store);
    let backward = |from, to| found(store.backward_find_sessions(b"a", from, to));
    assert_eq!(backward(0, 1000), [a2.clone(), a1]);
    assert_eq!(backward(400, 600), [a2]);
}

/// Four sessions of `a`, and one of `aa` that no fetch of `a` may return.
fn put_sessions_of_a_and_aa(store: &SessionStore) -> Vec<(Session, i64)> {
    let expected = vec![
        (session("a", 0, 0), 1),
        (session("a", 10, 10), 2),
        (session("a", 100, 100), 3),
        (session("a", 1000, 1000), 4),
    ];
    put_all(store, &expected);
    put(store, &session("aa", 0, 0), 5);
    expected
}

/// `AbstractSessionBytesStoreTest.shouldFetchAllSessionsWithSameRecordKey`.
pub fn should_fetch_all_sessions_with_same_record_key(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let expected = put_sessions_of_a_and_aa(&store);
    assert_eq!(found(store.fetch(b"a")), expected);
}

/// `AbstractSessionBytesStoreTest.shouldBackwardFetchAllSessionsWithSameRecordKey`.
pub fn should_backward_fetch_all_sessions_with_same_record_key(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let expected = put_sessions_of_a_and_aa(&store);
    assert_eq!(found(store.backward_fetch(b"a")), reversed(&expected));
}

/// `AbstractSessionBytesStoreTest.shouldFindSessionsForTimeRange` (which Kafka's RocksDB
/// session store does not support, and its other stores do).
pub fn should_find_sessions_for_time_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let a = (session("a", 0, 0), 5);
    put_all(&store, std::slice::from_ref(&a));
    // A point.
    assert_eq!(
        found(store.find_sessions_ending(0, 0)),
        std::slice::from_ref(&a)
    );

    let b = (session("b", 10, 20), 10);
    let c = (session("c", 30, 40), 20);
    put_all(&store, &[b.clone(), c.clone()]);

    let ending = |from, to| found(store.find_sessions_ending(from, to));
    // A boundary, the left one, the right one, off by one, all.
    assert_eq!(ending(0, 20), [a.clone(), b.clone()]);
    assert_eq!(ending(0, 19), std::slice::from_ref(&a));
    assert_eq!(ending(1, 20), std::slice::from_ref(&b));
    assert_eq!(ending(19, 41), [b.clone(), c.clone()]);
    assert_eq!(ending(0, 40), [a, b, c]);
}

/// The sessions of `shouldFetchAllSessionsWithinKeyRange`: those from `aa` to `bb`, and the
/// one before and after the range.
/// A session and its value.
type Stored = (Session, i64);

fn put_sessions_around_aa_to_bb(store: &SessionStore) -> (Vec<Stored>, Stored, Stored) {
    let expected = vec![
        (session("aa", 10, 10), 2),
        (session("aaa", 100, 100), 3),
        (session("aaaa", 100, 100), 6),
        (session("b", 1000, 1000), 4),
        (session("bb", 1500, 2000), 5),
    ];
    put_all(store, &expected);
    let before = (session("a", 0, 0), 1);
    let after = (session("bbb", 2500, 3000), 6);
    put_all(store, &[before.clone(), after.clone()]);
    (expected, before, after)
}

/// `AbstractSessionBytesStoreTest.shouldFetchAllSessionsWithinKeyRange`.
pub fn should_fetch_all_sessions_within_key_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let (expected, before, after) = put_sessions_around_aa_to_bb(&store);
    let fetch = |from: Option<&str>, to: Option<&str>| {
        found(store.fetch_key_range(from.map(str::as_bytes), to.map(str::as_bytes)))
    };

    assert_eq!(fetch(Some("aa"), Some("bb")), expected);
    let finds = store.find_sessions_in_range(Some(b"aa"), Some(b"bb"), 0, i64::MAX);
    assert_eq!(found(finds), expected);

    let with_before = [vec![before.clone()], expected.clone()].concat();
    assert_eq!(fetch(None, Some("bb")), with_before);
    let with_after = [expected.clone(), vec![after.clone()]].concat();
    assert_eq!(fetch(Some("aa"), None), with_after);
    let everything = [vec![before], expected, vec![after]].concat();
    assert_eq!(fetch(None, None), everything);
}

/// `AbstractSessionBytesStoreTest.shouldBackwardFetchAllSessionsWithinKeyRange`.
pub fn should_backward_fetch_all_sessions_within_key_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let (expected, before, after) = put_sessions_around_aa_to_bb(&store);
    let fetch = |from: Option<&str>, to: Option<&str>| {
        found(store.backward_fetch_key_range(from.map(str::as_bytes), to.map(str::as_bytes)))
    };

    assert_eq!(fetch(Some("aa"), Some("bb")), reversed(&expected));
    let finds = store.backward_find_sessions_in_range(Some(b"aa"), Some(b"bb"), 0, i64::MAX);
    assert_eq!(found(finds), reversed(&expected));

    let with_before = [vec![before.clone()], expected.clone()].concat();
    assert_eq!(fetch(None, Some("bb")), reversed(&with_before));
    let with_after = [expected.clone(), vec![after.clone()]].concat();
    assert_eq!(fetch(Some("aa"), None), reversed(&with_after));
    let everything = [vec![before], expected, vec![after]].concat();
    assert_eq!(fetch(None, None), reversed(&everything));
}

/// `AbstractSessionBytesStoreTest.shouldFetchExactSession`.
pub fn should_fetch_exact_session(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_all(
        &store,
        &[
            (session("a", 0, 4), 1),
            (session("aa", 0, 3), 2),
            (session("aa", 0, 4), 3),
            (session("aa", 1, 4), 4),
            (session("aaa", 0, 4), 5),
        ],
    );
    let exact = store.fetch_session(&session("aa", 0, 4)).expect("fetch");
    assert_eq!(exact.as_deref().map(long), Some(3));
}

/// `AbstractSessionBytesStoreTest.shouldReturnNullOnSessionNotFound`.
pub fn should_return_null_on_session_not_found(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let missing = store.fetch_session(&session("any key", 0, 5));
    assert_eq!(missing.expect("fetch"), None);
}

/// `AbstractSessionBytesStoreTest.shouldFindValuesWithinMergingSessionWindowRange`.
pub fn should_find_values_within_merging_session_window_range(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let expected = [(session("a", 0, 0), 1), (session("a", 1000, 1000), 2)];
    put_all(&store, &expected);
    assert_eq!(found(store.find_sessions(b"a", -1, 1000)), expected);
}

/// `AbstractSessionBytesStoreTest.shouldBackwardFindValuesWithinMergingSessionWindowRange`.
pub fn should_backward_find_values_within_merging_session_window_range(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let expected = [(session("a", 0, 0), 1), (session("a", 1000, 1000), 2)];
    put_all(&store, &expected);
    let got = found(store.backward_find_sessions(b"a", -1, 1000));
    assert_eq!(got, reversed(&expected));
}

/// `AbstractSessionBytesStoreTest.shouldRemove`.
pub fn should_remove(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put(&store, &session("a", 0, 1000), 1);
    put(&store, &session("a", 1500, 2500), 2);

    store.remove(&session("a", 0, 1000)).expect("remove");

    assert!(found(store.find_sessions(b"a", 0, 1000)).is_empty());
    assert_eq!(found(store.find_sessions(b"a", 1500, 2500)).len(), 1);
}

/// Sessions 1 to 5 of `shouldFindSessionsToMerge`; returns sessions 2 and 3.
fn put_sessions_to_merge(store: &SessionStore) -> [(Session, i64); 2] {
    let sessions: Vec<(Session, i64)> = (0..5)
        .map(|i| {
            let start = if i == 0 { 0 } else { i * 100 + 1 };
            (session("a", start, (i + 1) * 100), i + 1)
        })
        .collect();
    put_all(store, &sessions);
    [sessions[1].clone(), sessions[2].clone()]
}

/// `AbstractSessionBytesStoreTest.shouldFindSessionsToMerge`.
pub fn should_find_sessions_to_merge(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let [second, third] = put_sessions_to_merge(&store);
    assert_eq!(found(store.find_sessions(b"a", 150, 300)), [second, third]);
}

/// `AbstractSessionBytesStoreTest.shouldBackwardFindSessionsToMerge`.
pub fn should_backward_find_sessions_to_merge(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let [second, third] = put_sessions_to_merge(&store);
    let got = found(store.backward_find_sessions(b"a", 150, 300));
    assert_eq!(got, [third, second]);
}

/// The store and sessions of `shouldFetchExactKeys`, over a huge retention.
fn exact_keys_store(fx: &OperatorFixture<'_>) -> SessionStore {
    const HUGE: i64 = 0x7a00_0000_0000_0000;
    let store = open_with(fx, HUGE);
    put_all(
        &store,
        &[
            (session("a", 0, 0), 1),
            (session("aa", 0, 10), 2),
            (session("a", 10, 20), 3),
            (session("aa", 10, 20), 4),
            (session("a", HUGE - 2, HUGE - 1), 5),
        ],
    );
    store
}

/// `AbstractSessionBytesStoreTest.shouldFetchExactKeys`.
pub fn should_fetch_exact_keys(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = exact_keys_store(&fx);
    let max = i64::MAX;
    assert_eq!(
        value_set(store.find_sessions(b"a", 0, max)),
        set(&[1, 3, 5])
    );
    assert_eq!(value_set(store.find_sessions(b"aa", 0, max)), set(&[2, 4]));
    let range = |from: Option<&[u8]>, to: Option<&[u8]>, end, start| {
        value_set(store.find_sessions_in_range(from, to, end, start))
    };
    assert_eq!(
        range(Some(b"a"), Some(b"aa"), 0, max),
        set(&[1, 2, 3, 4, 5])
    );
    assert_eq!(range(Some(b"a"), Some(b"aa"), 10, 0), set(&[2]));
    assert_eq!(range(None, Some(b"aa"), 0, max), set(&[1, 2, 3, 4, 5]));
    assert_eq!(range(Some(b"a"), None, 0, max), set(&[1, 2, 3, 4, 5]));
    assert_eq!(range(None, None, 0, max), set(&[1, 2, 3, 4, 5]));
}

/// `AbstractSessionBytesStoreTest.shouldBackwardFetchExactKeys`.
pub fn should_backward_fetch_exact_keys(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = exact_keys_store(&fx);
    let max = i64::MAX;
    let single = |key: &[u8]| value_set(store.backward_find_sessions(key, 0, max));
    assert_eq!(single(b"a"), set(&[1, 3, 5]));
    assert_eq!(single(b"aa"), set(&[2, 4]));
    let range = |from: Option<&[u8]>, to: Option<&[u8]>, end, start| {
        value_set(store.backward_find_sessions_in_range(from, to, end, start))
    };
    assert_eq!(
        range(Some(b"a"), Some(b"aa"), 0, max),
        set(&[1, 2, 3, 4, 5])
    );
    assert_eq!(range(Some(b"a"), Some(b"aa"), 10, 0), set(&[2]));
    assert_eq!(range(None, Some(b"aa"), 0, max), set(&[1, 2, 3, 4, 5]));
    assert_eq!(range(Some(b"a"), None, 0, max), set(&[1, 2, 3, 4, 5]));
    assert_eq!(range(None, None, 0, max), set(&[1, 2, 3, 4, 5]));
}

/// Keys that prefix one another, three sessions each (values as numbers for the Java
/// test's strings "1" to "9").
fn put_binary_keys(store: &SessionStore) -> [&'static [u8]; 3] {
    let keys: [&'static [u8]; 3] = [&[0], &[0, 0], &[0, 0, 0]];
    for i in 0..9 {
        let key = keys[(i % 3) as usize];
        put(store, &Session::new(key, i + 1, 100), i + 1);
    }
    keys
}

/// `AbstractSessionBytesStoreTest.shouldFetchAndIterateOverExactBinaryKeys`.
pub fn should_fetch_and_iterate_over_exact_binary_keys(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let keys = put_binary_keys(&store);
    let want = [[1, 4, 7], [2, 5, 8], [3, 6, 9]];
    for (key, want) in keys.iter().zip(want) {
        let got = value_set(store.find_sessions(key, 0, i64::MAX));
        assert_eq!(got, set(&want), "key {key:?}");
    }
}

/// `AbstractSessionBytesStoreTest.shouldBackwardFetchAndIterateOverExactBinaryKeys`.
pub fn should_backward_fetch_and_iterate_over_exact_binary_keys(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let keys = put_binary_keys(&store);
    let want = [[7, 4, 1], [8, 5, 2], [9, 6, 3]];
    for (key, want) in keys.iter().zip(want) {
        let got = value_set(store.backward_find_sessions(key, 0, i64::MAX));
        assert_eq!(got, set(&want), "key {key:?}");
    }
}

/// `AbstractSessionBytesStoreTest.shouldRestore`: closing and restoring is the fixture's
/// reopen (restored from the changelog when logged, from disk when plain and persistent).
pub fn should_restore(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let expected = [
        (session("a", 0, 0), 1),
        (session("a", 10, 10), 2),
        (session("a", 100, 100), 3),
        (session("a", 1000, 1000), 4),
    ];
    put_all(&store, &expected);
    assert_eq!(found(store.fetch(b"a")), expected);

    fx.commit();
    drop(store);
    fx.reopen();
    let store = open(&fx);
    assert_eq!(found(store.fetch(b"a")), expected);
}

/// `AbstractSessionBytesStoreTest.shouldReturnSameResultsForSingleKeyFindSessionsAndEqualKeyRangeFindSessions`.
pub fn should_return_same_results_for_single_key_find_sessions_and_equal_key_range_find_sessions(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_all(
        &store,
        &[
            (session("a", 0, 1), 0),
            (session("aa", 2, 3), 1),
            (session("aa", 4, 5), 2),
            (session("aaa", 6, 7), 3),
        ],
    );
    let single = found(store.find_sessions(b"aa", 0, 10));
    let ranged = found(store.find_sessions_in_range(Some(b"aa"), Some(b"aa"), 0, 10));
    assert_eq!(single.len(), 2);
    assert_eq!(single, ranged);
}

/// `AbstractSessionBytesStoreTest.shouldMeasureExpiredRecords`: Kafka's dropped-records
/// metric is [`SessionStore::dropped`].
pub fn should_measure_expired_records(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    // Advances the stream time so far that a session ending at 0 is expired.
    put(
        &store,
        &session("initial record", 0, 2 * SEGMENT_INTERVAL),
        0,
    );
    let late = store.put(&session("late record", 0, 0), &0_i64.to_be_bytes());
    assert_eq!(late.expect("put"), PutOutcome::Expired);
    put(
        &store,
        &session("another on-time record", 0, 2 * SEGMENT_INTERVAL),
        0,
    );
    let want = DropCounts {
        expired: 1,
        late: 0,
    };
    assert_eq!(store.dropped(), want);
}

/// `AbstractSessionBytesStoreTest.shouldNotThrowExceptionRemovingNonexistentKey`.
pub fn should_not_throw_exception_removing_nonexistent_key(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    store.remove(&session("a", 0, 1)).expect("remove");
}

/// `AbstractSessionBytesStoreTest.shouldNotThrowInvalidRangeExceptionWithNegativeFromKey`:
/// the bytes of the integers -1 and 1, the first after the second, so the range is empty, not
/// an error. One session lies in the range with its bounds swapped, so that a store that
/// reorders them fails.
pub fn should_not_throw_invalid_range_exception_with_negative_from_key(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put(&store, &Session::new(2_i32.to_be_bytes(), 0, 5), 1);
    let (from, to) = ((-1_i32).to_be_bytes(), 1_i32.to_be_bytes());
    let forward = store.find_sessions_in_range(Some(&from), Some(&to), 0, 10);
    assert!(found(forward).is_empty());
    let backward = store.backward_find_sessions_in_range(Some(&from), Some(&to), 0, 10);
    assert!(found(backward).is_empty());
}

/// `AbstractSessionBytesStoreTest.shouldRemoveExpired`, both of its branches: Kafka's
/// in-memory store's inputs, then its segmented stores' (a session is expired when its end is
/// before `stream time - retention + 1`, in both).
pub fn should_remove_expired(factory: &dyn StoreFactory, mode: Mode) {
    let in_memory = [
        (session("a", 0, 0), 1),
        (session("aa", 0, 10), 2),
        (session("a", 10, 20), 3),
        // Advances the stream time to expire the first session.
        (session("aa", 10, RETENTION_PERIOD), 4),
    ];
    let segmented = [
        (session("a", 0, 0), 1),
        (session("aa", 0, SEGMENT_INTERVAL), 2),
        (session("a", 10, SEGMENT_INTERVAL), 3),
        (session("aa", 10, 2 * SEGMENT_INTERVAL), 4),
    ];
    for (sessions, want) in [(in_memory, set(&[2, 3, 4])), (segmented, set(&[4]))] {
        let fx = OperatorFixture::new(factory, mode);
        let store = open(&fx);
        put_all(&store, &sessions);
        let live = store.find_sessions_in_range(Some(b"a"), Some(b"b"), 0, i64::MAX);
        assert_eq!(value_set(live), want);
    }
}

/// `AbstractSessionBytesStoreTest.shouldNotFetchExpiredSessions`, at a fixed wall-clock time
/// instead of the system clock's.
pub fn should_not_fetch_expired_sessions(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let now: i64 = 1_764_633_600_000;
    let r = RETENTION_PERIOD;
    put(&store, &session("p", now - 3 * r, now - 2 * r), 1);
    put(&store, &session("q", now - 2 * r, now - r), 4);
    put(&store, &session("r", now - r, now - r / 2), 3);
    put(&store, &session("p", now - r, now - r / 2), 2);

    let p = value_set(store.find_sessions(b"p", now - 2 * r, now - r));
    assert_eq!(p, set(&[2]));
    let p_long_ago = store.backward_find_sessions(b"p", now - 5 * r, now - 4 * r);
    assert!(found(p_long_ago).is_empty());
    let keys = (Some(&b"p"[..]), Some(&b"r"[..]));
    let range = |end, start| value_set(store.find_sessions_in_range(keys.0, keys.1, end, start));
    assert_eq!(range(now - 5 * r, now - 4 * r), set(&[]));
    assert_eq!(range(now - r, now - r / 2), set(&[2, 3, 4]));
    assert_eq!(range(now - 2 * r, now - r), set(&[2, 3, 4]));
    let backward = store.backward_find_sessions_in_range(keys.0, keys.1, now - 2 * r, now - r);
    assert_eq!(value_set(backward), set(&[2, 3, 4]));
}
