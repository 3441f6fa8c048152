//! Kafka Streams' own tests of its window stores, `AbstractWindowBytesStoreTest` (apache/kafka,
//! `streams/src/test/java/org/apache/kafka/streams/state/internals`), ported case by case:
//! each function is named after the Java test it comes from and keeps its inputs and expected
//! answers. Integer keys are Kafka's `IntegerSerializer` bytes (4 bytes, big-endian), string
//! keys and values their UTF-8 bytes; Kafka's `put(key, null, start)` is
//! [`WindowStore::remove`], `fetch(key, time)` is [`WindowStore::fetch_window`] and
//! `fetch(keyFrom, keyTo, ...)` is [`WindowStore::fetch_key_range`].
//!
//! Kafka compares single-key fetches as sets; they are compared here as lists in time order,
//! which is the same answer and also checks the order. The Java tests' checks of the changelog
//! records and of iterators after `close` have no counterpart in this API and are left out;
//! `shouldNotThrowConcurrentModificationException` is not ported, because this store's
//! iterators follow the store contract (writes made while one runs may or may not be seen).

use store_api::Result;

use super::{Mode, OperatorFixture, StoreFactory};
use crate::window::{
    DropCounts, PutOutcome, WindowEntry, WindowEntryIter, WindowFetchIter, WindowStore,
    WindowStoreConfig,
};

const WINDOW_SIZE: i64 = 3;
const SEGMENT_INTERVAL: i64 = 60_000;
const RETENTION_PERIOD: i64 = 2 * SEGMENT_INTERVAL;
/// `defaultStartTime`: the first batch straddles the first two segments.
const START: i64 = SEGMENT_INTERVAL - 4;

/// An integer key as Kafka's `IntegerSerializer` writes it.
fn int(key: i32) -> Vec<u8> {
    key.to_be_bytes().to_vec()
}

fn open_with(fx: &OperatorFixture<'_>, retention: i64, retain_duplicates: bool) -> WindowStore {
    let config = WindowStoreConfig::new(retention).with_retain_duplicates(retain_duplicates);
    let config = if retention == RETENTION_PERIOD {
        config.with_segment_interval(SEGMENT_INTERVAL)
    } else {
        config
    };
    WindowStore::open(fx.store(), config)
        .unwrap_or_else(|err| panic!("opening the window store failed: {err}"))
}

fn open(fx: &OperatorFixture<'_>) -> WindowStore {
    open_with(fx, RETENTION_PERIOD, false)
}

fn put(store: &WindowStore, key: &[u8], value: &str, start: i64) {
    let outcome = store
        .put(key, value.as_bytes(), start)
        .unwrap_or_else(|err| panic!("put failed: {err}"));
    assert_eq!(outcome, PutOutcome::Written(1), "put at {start}");
}

/// Kafka's `windowedPair(key, value, start)`: a window of `key` starting at `start`.
fn pair(key: &[u8], value: &str, start: i64) -> WindowEntry {
    WindowEntry {
        key: key.to_vec(),
        start,
        value: value.as_bytes().to_vec(),
    }
}

fn entries(iter: Result<WindowEntryIter>) -> Vec<WindowEntry> {
    iter.and_then(Iterator::collect)
        .unwrap_or_else(|err| panic!("a window fetch failed: {err}"))
}

fn values(iter: Result<WindowFetchIter>) -> Vec<String> {
    let found: Vec<(i64, Vec<u8>)> = iter
        .and_then(Iterator::collect)
        .unwrap_or_else(|err| panic!("a window fetch failed: {err}"));
    found
        .into_iter()
        .map(|(_, value)| String::from_utf8_lossy(&value).into_owned())
        .collect()
}

fn fetch(store: &WindowStore, key: i32, from: i64, to: i64) -> Vec<String> {
    values(store.fetch(&int(key), from, to))
}

fn range(store: &WindowStore, keys: (i32, i32), from: i64, to: i64) -> Vec<WindowEntry> {
    entries(store.fetch_key_range(Some(&int(keys.0)), Some(&int(keys.1)), from, to))
}

fn backward_range(store: &WindowStore, keys: (i32, i32), from: i64, to: i64) -> Vec<WindowEntry> {
    let (low, high) = (int(keys.0), int(keys.1));
    entries(store.backward_fetch_key_range(Some(&low), Some(&high), from, to))
}

fn reversed<T: Clone>(items: &[T]) -> Vec<T> {
    items.iter().rev().cloned().collect()
}

/// `putFirstBatch`: keys 0 to 5, two of them in the same window.
fn put_first_batch(store: &WindowStore) {
    put(store, &int(0), "zero", START);
    put(store, &int(1), "one", START + 1);
    put(store, &int(2), "two", START + 2);
    put(store, &int(3), "three", START + 2);
    put(store, &int(4), "four", START + 4);
    put(store, &int(5), "five", START + 5);
}

/// `putSecondBatch`: six more windows of key 2, `two+1` to `two+6`.
fn put_second_batch(store: &WindowStore) {
    for i in 1..=6 {
        put(store, &int(2), &format!("two+{i}"), START + 2 + i);
    }
}

/// The values of key 2 after both batches: `two` at index 0, `two+i` at index `i`.
fn twos(indices: std::ops::RangeInclusive<i64>) -> Vec<String> {
    indices
        .map(|i| {
            if i == 0 {
                "two".to_owned()
            } else {
                format!("two+{i}")
            }
        })
        .collect()
}

/// The windows of the first batch, in the store's order.
fn first_batch() -> [WindowEntry; 6] {
    [
        pair(&int(0), "zero", START),
        pair(&int(1), "one", START + 1),
        pair(&int(2), "two", START + 2),
        pair(&int(3), "three", START + 2),
        pair(&int(4), "four", START + 4),
        pair(&int(5), "five", START + 5),
    ]
}

/// `AbstractWindowBytesStoreTest.testRangeAndSinglePointFetch`.
pub fn test_range_and_single_point_fetch(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    let around = |d: i64| (START + d - WINDOW_SIZE, START + d + WINDOW_SIZE);

    assert_eq!(fetch(&store, 0, around(0).0, around(0).1), ["zero"]);

    put_second_batch(&store);

    for i in 1..=6 {
        let single = store.fetch_window(&int(2), START + 2 + i).expect("fetch");
        assert_eq!(single, Some(format!("two+{i}").into_bytes()));
    }
    let expected: [(i64, Vec<String>); 15] = [
        (-2, Vec::new()),
        (-1, twos(0..=0)),
        (0, twos(0..=1)),
        (1, twos(0..=2)),
        (2, twos(0..=3)),
        (3, twos(0..=4)),
        (4, twos(0..=5)),
        (5, twos(0..=6)),
        (6, twos(1..=6)),
        (7, twos(2..=6)),
        (8, twos(3..=6)),
        (9, twos(4..=6)),
        (10, twos(5..=6)),
        (11, twos(6..=6)),
        (12, Vec::new()),
    ];
    for (d, want) in expected {
        let (from, to) = around(d);
        assert_eq!(fetch(&store, 2, from, to), want, "around START + {d}");
    }
}

/// `AbstractWindowBytesStoreTest.shouldGetAll`.
pub fn should_get_all(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    assert_eq!(entries(store.all()), first_batch());
}

/// `AbstractWindowBytesStoreTest.shouldGetAllNonDeletedRecords`.
pub fn should_get_all_non_deleted_records(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let names = ["zero", "one", "two", "three", "four"];
    for (key, name) in (0..).zip(names) {
        put(&store, &int(key), name, START + i64::from(key));
    }
    for key in [1, 3] {
        store
            .remove(&int(key), START + i64::from(key))
            .expect("remove");
    }
    let want = [
        pair(&int(0), "zero", START),
        pair(&int(2), "two", START + 2),
        pair(&int(4), "four", START + 4),
    ];
    assert_eq!(entries(store.all()), want);
}

/// `AbstractWindowBytesStoreTest.shouldGetAllReturnTimestampOrderedRecords`.
pub fn should_get_all_return_timestamp_ordered_records(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let names = ["zero", "one", "two", "three", "four"];
    for key in [4, 0, 2, 3, 1] {
        put(
            &store,
            &int(key),
            names[key as usize],
            START + i64::from(key),
        );
    }
    let want: Vec<_> = (0..5)
        .map(|key| pair(&int(key), names[key as usize], START + i64::from(key)))
        .collect();
    assert_eq!(entries(store.all()), want);
}

/// `AbstractWindowBytesStoreTest.shouldEarlyClosedIteratorStillGetAllRecords`.
pub fn should_early_closed_iterator_still_get_all_records(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put(&store, &int(0), "zero", START);
    put(&store, &int(1), "one", START + 1);

    let mut first = store.all().expect("all");
    let zero = pair(&int(0), "zero", START);
    assert_eq!(first.next().map(|e| e.expect("entry")), Some(zero.clone()));
    drop(first);

    let want = [zero, pair(&int(1), "one", START + 1)];
    assert_eq!(entries(store.all()), want);
}

/// `AbstractWindowBytesStoreTest.shouldGetBackwardAll`.
pub fn should_get_backward_all(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    assert_eq!(entries(store.backward_all()), reversed(&first_batch()));
}

/// `AbstractWindowBytesStoreTest.shouldFetchAllInTimeRange`.
pub fn should_fetch_all_in_time_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    let all = first_batch();
    assert_eq!(entries(store.fetch_all(START + 1, START + 4)), all[1..5]);
    assert_eq!(entries(store.fetch_all(START, START + 3)), all[0..4]);
    assert_eq!(entries(store.fetch_all(START + 1, START + 5)), all[1..6]);
}

/// `AbstractWindowBytesStoreTest.shouldBackwardFetchAllInTimeRange`.
pub fn should_backward_fetch_all_in_time_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    let all = first_batch();
    let backward = |from, to| entries(store.backward_fetch_all(from, to));
    assert_eq!(backward(START + 1, START + 4), reversed(&all[1..5]));
    assert_eq!(backward(START, START + 3), reversed(&all[0..4]));
    assert_eq!(backward(START + 1, START + 5), reversed(&all[1..6]));
}

/// A key-range fetch: the keys, the times and the windows expected forward.
type RangeCase = ((i32, i32), i64, i64, Vec<WindowEntry>);

/// The key-range fetches of `testFetchRange`.
fn fetch_range_cases(all: &[WindowEntry]) -> [RangeCase; 8] {
    let (s, w) = (START, WINDOW_SIZE);
    [
        ((0, 1), s - w, s + w, all[0..2].to_vec()),
        ((1, 1), s - w, s + w, all[1..2].to_vec()),
        ((1, 3), s - w, s + w, all[1..4].to_vec()),
        ((0, 5), s - w, s + w, all[0..4].to_vec()),
        ((0, 5), s - w, s + w + 5, all.to_vec()),
        ((0, 5), s + 2, s + w + 5, all[2..6].to_vec()),
        ((4, 5), s + 2, s + w, Vec::new()),
        ((0, 3), s + 3, s + w + 5, Vec::new()),
    ]
}

/// `AbstractWindowBytesStoreTest.testFetchRange`.
pub fn test_fetch_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    for (keys, from, to, want) in fetch_range_cases(&first_batch()) {
        assert_eq!(
            range(&store, keys, from, to),
            want,
            "{keys:?} {from}..={to}"
        );
    }
}

/// `AbstractWindowBytesStoreTest.testBackwardFetchRange`.
pub fn test_backward_fetch_range(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    for (keys, from, to, want) in fetch_range_cases(&first_batch()) {
        let got = backward_range(&store, keys, from, to);
        assert_eq!(got, reversed(&want), "{keys:?} {from}..={to}");
    }
}

/// The first batch's values, one key each, as `fetch(key, START + key + offsets)` sees them.
fn check_first_batch(store: &WindowStore, offsets: (i64, i64), want: [&[&str]; 6]) {
    for (key, want) in (0..).zip(want) {
        let at = START + i64::from(key);
        let got = fetch(store, key, at + offsets.0, at + offsets.1);
        assert_eq!(got, want, "key {key}");
    }
}

/// `AbstractWindowBytesStoreTest.testPutAndFetchBefore`.
pub fn test_put_and_fetch_before(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    let want: [&[&str]; 6] = [
        &["zero"],
        &["one"],
        &["two"],
        &["three"],
        &["four"],
        &["five"],
    ];
    check_first_batch(&store, (-WINDOW_SIZE, 0), want);

    put_second_batch(&store);

    let expected: [(i64, Vec<String>); 15] = [
        (-1, Vec::new()),
        (0, Vec::new()),
        (1, Vec::new()),
        (2, twos(0..=0)),
        (3, twos(0..=1)),
        (4, twos(0..=2)),
        (5, twos(0..=3)),
        (6, twos(1..=4)),
        (7, twos(2..=5)),
        (8, twos(3..=6)),
        (9, twos(4..=6)),
        (10, twos(5..=6)),
        (11, twos(6..=6)),
        (12, Vec::new()),
        (13, Vec::new()),
    ];
    for (d, want) in expected {
        let at = START + d;
        assert_eq!(
            fetch(&store, 2, at - WINDOW_SIZE, at),
            want,
            "before START + {d}"
        );
    }
}

/// `AbstractWindowBytesStoreTest.testPutAndFetchAfter`.
pub fn test_put_and_fetch_after(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put_first_batch(&store);
    let want: [&[&str]; 6] = [&["zero"], &["one"], &["two"], &[], &["four"], &["five"]];
    check_first_batch(&store, (0, WINDOW_SIZE), want);

    put_second_batch(&store);

    let expected: [(i64, Vec<String>); 15] = [
        (-2, Vec::new()),
        (-1, twos(0..=0)),
        (0, twos(0..=1)),
        (1, twos(0..=2)),
        (2, twos(0..=3)),
        (3, twos(1..=4)),
        (4, twos(2..=5)),
        (5, twos(3..=6)),
        (6, twos(4..=6)),
        (7, twos(5..=6)),
        (8, twos(6..=6)),
        (9, Vec::new()),
        (10, Vec::new()),
        (11, Vec::new()),
        (12, Vec::new()),
    ];
    for (d, want) in expected {
        let at = START + d;
        assert_eq!(
            fetch(&store, 2, at, at + WINDOW_SIZE),
            want,
            "after START + {d}"
        );
    }
}

/// `AbstractWindowBytesStoreTest.testPutSameKeyTimestamp`: with retained duplicates.
pub fn test_put_same_key_timestamp(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open_with(&fx, RETENTION_PERIOD, true);
    put(&store, &int(0), "zero", START);

    let (s, w) = (START, WINDOW_SIZE);
    assert_eq!(fetch(&store, 0, s - w, s + w), ["zero"]);

    put(&store, &int(0), "zero", START);
    put(&store, &int(0), "zero+", START);
    put(&store, &int(0), "zero++", START);

    for d in 0..=3 {
        let got = fetch(&store, 0, s + d - w, s + d + w);
        assert_eq!(
            got,
            ["zero", "zero", "zero+", "zero++"],
            "around START + {d}"
        );
    }
    assert_eq!(fetch(&store, 0, s + 4 - w, s + 4 + w), Vec::<String>::new());
}

/// `AbstractWindowBytesStoreTest.shouldFetchAndIterateOverExactKeys`.
pub fn should_fetch_and_iterate_over_exact_keys(factory: &dyn StoreFactory, mode: Mode) {
    const HUGE: i64 = 0x7a00_0000_0000_0000;
    let fx = OperatorFixture::new(factory, mode);
    let store = open_with(&fx, HUGE, false);
    put(&store, b"a", "0001", 0);
    put(&store, b"aa", "0002", 0);
    put(&store, b"a", "0003", 1);
    put(&store, b"aa", "0004", 1);
    put(&store, b"a", "0005", HUGE - 1);

    assert_eq!(
        values(store.fetch(b"a", 0, i64::MAX)),
        ["0001", "0003", "0005"]
    );
    let a = entries(store.fetch_key_range(Some(b"a"), Some(b"a"), 0, i64::MAX));
    let want_a = [
        pair(b"a", "0001", 0),
        pair(b"a", "0003", 1),
        pair(b"a", "0005", HUGE - 1),
    ];
    assert_eq!(a, want_a);
    let aa = entries(store.fetch_key_range(Some(b"aa"), Some(b"aa"), 0, i64::MAX));
    assert_eq!(aa, [pair(b"aa", "0002", 0), pair(b"aa", "0004", 1)]);
}

/// `AbstractWindowBytesStoreTest.testDeleteAndUpdate`.
pub fn test_delete_and_update(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put(&store, &int(1), "one", 0);
    put(&store, &int(1), "one v2", 0);
    assert_eq!(fetch(&store, 1, 0, 0), ["one v2"]);

    store.remove(&int(1), 0).expect("remove");
    assert_eq!(fetch(&store, 1, 0, 0), Vec::<String>::new());
}

/// `AbstractWindowBytesStoreTest.shouldReturnNullOnWindowNotFound`.
pub fn should_return_null_on_window_not_found(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    assert_eq!(store.fetch_window(&int(1), 0).expect("fetch"), None);
}

/// `AbstractWindowBytesStoreTest.shouldFetchAndIterateOverExactBinaryKeys`.
pub fn should_fetch_and_iterate_over_exact_binary_keys(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open_with(&fx, RETENTION_PERIOD, true);
    let keys: [&[u8]; 3] = [&[0], &[0, 0], &[0, 0, 0]];
    let puts = [
        (0, "1", 0),
        (1, "2", 0),
        (2, "3", 0),
        (0, "4", 1),
        (1, "5", 1),
        (2, "6", 59_999),
        (0, "7", 59_999),
        (1, "8", 59_999),
        (2, "9", 59_999),
    ];
    for (key, value, start) in puts {
        put(&store, keys[key], value, start);
    }
    let want = [["1", "4", "7"], ["2", "5", "8"], ["3", "6", "9"]];
    for (key, want) in keys.iter().zip(want) {
        assert_eq!(values(store.fetch(key, 0, i64::MAX)), want, "key {key:?}");
    }
}

/// `AbstractWindowBytesStoreTest.shouldReturnSameResultsForSingleKeyFetchAndEqualKeyRangeFetch`.
pub fn should_return_same_results_for_single_key_fetch_and_equal_key_range_fetch(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put(&store, &int(1), "one", 0);
    put(&store, &int(2), "two", 1);
    put(&store, &int(2), "two", 2);
    put(&store, &int(3), "three", 3);

    let single = fetch(&store, 2, 0, 5);
    let ranged: Vec<String> = range(&store, (2, 2), 0, 5)
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.value).into_owned())
        .collect();
    assert_eq!(single, ["two", "two"]);
    assert_eq!(ranged, single);
}

/// `AbstractWindowBytesStoreTest.shouldNotThrowInvalidRangeExceptionWithNegativeFromKey`:
/// -1 serializes after 1, so the range is empty, not an error. One window lies in the range
/// with its bounds swapped, so that a store that reorders them fails.
pub fn should_not_throw_invalid_range_exception_with_negative_from_key(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put(&store, &int(2), "two", 5);
    assert!(range(&store, (-1, 1), 0, 10).is_empty());
    assert!(backward_range(&store, (-1, 1), 0, 10).is_empty());
}

/// `AbstractWindowBytesStoreTest.shouldLogAndMeasureExpiredRecords`: Kafka's dropped-records
/// metric is [`WindowStore::dropped`].
pub fn should_log_and_measure_expired_records(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    // Advances the stream time so far that a window at 0 is expired.
    put(&store, &int(1), "initial record", 2 * RETENTION_PERIOD);
    let late = store.put(&int(1), b"late record", 0).expect("put");
    assert_eq!(late, PutOutcome::Expired);
    put(
        &store,
        &int(1),
        "another on-time record",
        RETENTION_PERIOD + 1,
    );

    let want = DropCounts {
        expired: 1,
        late: 0,
    };
    assert_eq!(store.dropped(), want);
}

/// `AbstractWindowBytesStoreTest.shouldNotThrowExceptionWhenFetchRangeIsExpired`.
pub fn should_not_throw_exception_when_fetch_range_is_expired(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    put(&store, &int(1), "one", 0);
    put(&store, &int(1), "two", 4 * RETENTION_PERIOD);
    assert_eq!(fetch(&store, 1, 0, 10), Vec::<String>::new());
}

/// `AbstractWindowBytesStoreTest.testFetchDuplicates`: with retained duplicates.
pub fn test_fetch_duplicates(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open_with(&fx, RETENTION_PERIOD, true);
    for (i, name) in [(0, "one"), (1, "two"), (2, "three")] {
        let at = i * WINDOW_SIZE * 10;
        put(&store, &int(1), name, at);
        put(&store, &int(1), &format!("{name}-2"), at);
    }
    let found: Vec<(i64, String)> = store
        .fetch(&int(1), 0, WINDOW_SIZE * 10)
        .and_then(Iterator::collect::<Result<Vec<_>>>)
        .expect("fetch")
        .into_iter()
        .map(|(start, value)| (start, String::from_utf8_lossy(&value).into_owned()))
        .collect();
    let later = WINDOW_SIZE * 10;
    let want = [
        (0, "one".to_owned()),
        (0, "one-2".to_owned()),
        (later, "two".to_owned()),
        (later, "two-2".to_owned()),
    ];
    assert_eq!(found, want);
}
