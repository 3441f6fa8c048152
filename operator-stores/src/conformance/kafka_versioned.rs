//! Kafka Streams' own tests of its versioned store, `RocksDBVersionedStoreTest`
//! (apache/kafka, `streams/src/test/java/org/apache/kafka/streams/state/internals`), ported
//! case by case: each function is named after the Java test it comes from and keeps its inputs
//! and expected answers. Keys and values are the UTF-8 bytes of the Java strings; Kafka's
//! `put(key, null, ts)` is [`VersionedStore::put_version`] with `None`; `validTo` is
//! [`VersionPut`]'s; `ResultOrder.ANY` is [`ResultOrder::Descending`], which is what Kafka's
//! RocksDB store returns for it.
//!
//! Kafka's restore tests feed changelog records to `restoreBatch`; here the same records are
//! put, then the store is reopened: restored from the changelog when logged, reopened from
//! disk when plain and persistent. Kafka's segment interval only places its segments; this
//! store has none, so it is just a timestamp of the tests.

use super::{Mode, OperatorFixture, StoreFactory};
use crate::versioned::{ResultOrder, VersionPut, VersionedStore};

const HISTORY_RETENTION: i64 = 300_000;
/// Kafka's versioned store uses its history retention as its grace period.
const GRACE_PERIOD: i64 = HISTORY_RETENTION;
const SEGMENT_INTERVAL: i64 = HISTORY_RETENTION / 3;
const BASE_TIMESTAMP: i64 = 10;

/// Kafka's `PUT_RETURN_CODE_VALID_TO_UNDEFINED`, as a put's answer: the latest version.
const LATEST: VersionPut = VersionPut::Written { valid_to: None };
/// Kafka's `PUT_RETURN_CODE_VALID_TO_UNDEFINED`, as a record's `validTo`.
const UNDEFINED: Option<i64> = None;
/// Kafka's `PUT_RETURN_CODE_NOT_PUT`.
const NOT_PUT: VersionPut = VersionPut::Expired;

/// A put's answer: valid until `ts`.
fn until(ts: i64) -> VersionPut {
    VersionPut::Written { valid_to: Some(ts) }
}

fn open(fx: &OperatorFixture<'_>, retention: i64) -> VersionedStore {
    VersionedStore::open(fx.store(), retention)
        .unwrap_or_else(|err| panic!("opening the versioned store failed: {err}"))
}

fn reopen(fx: &mut OperatorFixture<'_>, store: VersionedStore) -> VersionedStore {
    fx.commit();
    drop(store);
    fx.reopen();
    open(fx, HISTORY_RETENTION)
}

fn put(store: &VersionedStore, key: &str, value: Option<&str>, ts: i64, want: VersionPut) {
    let got = store
        .put_version(key.as_bytes(), value.map(str::as_bytes), ts)
        .unwrap_or_else(|err| panic!("put of {key}@{ts} failed: {err}"));
    assert_eq!(got, want, "put of {key}={value:?}@{ts}");
}

/// Kafka's `delete`: the record the delete ended, as (value, timestamp).
fn delete(store: &VersionedStore, key: &str, ts: i64) -> Option<(String, i64)> {
    store
        .delete(key.as_bytes(), ts)
        .unwrap_or_else(|err| panic!("delete of {key}@{ts} failed: {err}"))
        .map(|record| (text(record.value), record.timestamp))
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|err| panic!("a value that is not UTF-8: {err}"))
}

fn verify_get(store: &VersionedStore, key: &str, value: &str, ts: i64) {
    let latest = store.get(key.as_bytes()).expect("get");
    let latest = latest.map(|r| (text(r.value), r.timestamp, r.valid_to));
    assert_eq!(latest, Some((value.to_owned(), ts, None)), "get({key})");
}

fn verify_get_null(store: &VersionedStore, key: &str) {
    assert_eq!(store.get(key.as_bytes()).expect("get"), None, "get({key})");
}

fn verify_as_of(
    store: &VersionedStore,
    key: &str,
    as_of: i64,
    (value, ts, valid_to): (&str, i64, Option<i64>),
) {
    let got = store.get_as_of(key.as_bytes(), as_of).expect("get_as_of");
    let got = got.map(|r| (text(r.value), r.timestamp, r.valid_to));
    let want = Some((value.to_owned(), ts, valid_to));
    assert_eq!(got, want, "get({key}, {as_of})");
}

fn verify_as_of_null(store: &VersionedStore, key: &str, as_of: i64) {
    let got = store.get_as_of(key.as_bytes(), as_of).expect("get_as_of");
    assert_eq!(got, None, "get({key}, {as_of})");
}

/// KIP-968's query: (value, timestamp, validTo) of each version, in order.
fn versions(
    store: &VersionedStore,
    key: &str,
    (from, to): (i64, i64),
    order: ResultOrder,
) -> Vec<(String, i64, Option<i64>)> {
    store
        .get_versions(key.as_bytes(), from, to, order)
        .expect("get_versions")
        .into_iter()
        .map(|r| (text(r.value), r.timestamp, r.valid_to))
        .collect()
}

fn verify_versions(
    store: &VersionedStore,
    key: &str,
    range: (i64, i64),
    order: ResultOrder,
    want: &[(&str, i64, Option<i64>)],
) {
    let want: Vec<_> = want
        .iter()
        .map(|(value, ts, valid_to)| ((*value).to_owned(), *ts, *valid_to))
        .collect();
    assert_eq!(
        versions(store, key, range, order),
        want,
        "{key} over {range:?}"
    );
}

fn verify_versions_null(store: &VersionedStore, key: &str, range: (i64, i64)) {
    let got = versions(store, key, range, ResultOrder::Descending);
    assert!(got.is_empty(), "{key} over {range:?}: {got:?}");
}

/// `RocksDBVersionedStoreTest.shouldPutLatest`.
pub fn should_put_latest(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put(&store, "k", Some("v"), BASE_TIMESTAMP, LATEST);
    put(&store, "k", Some("v2"), BASE_TIMESTAMP + 1, LATEST);

    verify_get(&store, "k", "v2", BASE_TIMESTAMP + 1);
    let b = BASE_TIMESTAMP;
    verify_as_of(&store, "k", b, ("v", b, Some(b + 1)));
    verify_as_of(&store, "k", b + 1, ("v2", b + 1, UNDEFINED));
    verify_as_of(&store, "k", b + 2, ("v2", b + 1, UNDEFINED));
}

/// `RocksDBVersionedStoreTest.shouldPutNullAsLatest`.
pub fn should_put_null_as_latest(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put(&store, "k", None, BASE_TIMESTAMP, LATEST);
    put(&store, "k", None, BASE_TIMESTAMP + 1, LATEST);

    verify_get_null(&store, "k");
    for as_of in [BASE_TIMESTAMP, BASE_TIMESTAMP + 1, BASE_TIMESTAMP + 2] {
        verify_as_of_null(&store, "k", as_of);
    }
}

/// `RocksDBVersionedStoreTest.shouldPutOlderWithNonNullLatest`.
pub fn should_put_older_with_non_null_latest(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let b = BASE_TIMESTAMP;
    put(&store, "k", Some("v"), b, LATEST);
    put(&store, "k", Some("v2"), b - 2, until(b));
    put(&store, "k", Some("v1"), b - 1, until(b));
    put(&store, "k", Some("v4"), b - 4, until(b - 2));

    verify_get(&store, "k", "v", b);
    verify_as_of(&store, "k", b, ("v", b, UNDEFINED));
    verify_as_of(&store, "k", b - 1, ("v1", b - 1, Some(b)));
    verify_as_of(&store, "k", b - 2, ("v2", b - 2, Some(b - 1)));
    verify_as_of(&store, "k", b - 3, ("v4", b - 4, Some(b - 2)));
}

/// `RocksDBVersionedStoreTest.shouldPutOlderWithNullLatest`.
pub fn should_put_older_with_null_latest(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let b = BASE_TIMESTAMP;
    put(&store, "k", None, b, LATEST);
    put(&store, "k", Some("v2"), b - 2, until(b));
    put(&store, "k", Some("v1"), b - 1, until(b));
    put(&store, "k", Some("v4"), b - 4, until(b - 2));

    verify_get_null(&store, "k");
    verify_as_of_null(&store, "k", b);
    verify_as_of(&store, "k", b - 1, ("v1", b - 1, Some(b)));
    verify_as_of(&store, "k", b - 2, ("v2", b - 2, Some(b - 1)));
    verify_as_of(&store, "k", b - 3, ("v4", b - 4, Some(b - 2)));
}

/// `RocksDBVersionedStoreTest.shouldPutOlderNullWithNonNullLatest`.
pub fn should_put_older_null_with_non_null_latest(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let b = BASE_TIMESTAMP;
    put(&store, "k", Some("v"), b, LATEST);
    put(&store, "k", None, b - 2, until(b));
    put(&store, "k", None, b - 1, until(b));
    put(&store, "k", None, b - 4, until(b - 2));
    put(&store, "k", Some("v5"), b - 5, until(b - 4));
    put(&store, "k", Some("v3"), b - 3, until(b - 2));
    put(&store, "k", None, b - 6, until(b - 5));

    verify_get(&store, "k", "v", b);
    verify_as_of(&store, "k", b, ("v", b, UNDEFINED));
    verify_as_of_null(&store, "k", b - 1);
    verify_as_of_null(&store, "k", b - 2);
    verify_as_of(&store, "k", b - 3, ("v3", b - 3, Some(b - 2)));
    verify_as_of_null(&store, "k", b - 4);
    verify_as_of(&store, "k", b - 5, ("v5", b - 5, Some(b - 4)));
    verify_as_of_null(&store, "k", b - 6);
}

/// `RocksDBVersionedStoreTest.shouldPutOlderNullWithNullLatest`.
pub fn should_put_older_null_with_null_latest(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let b = BASE_TIMESTAMP;
    put(&store, "k", None, b, LATEST);
    put(&store, "k", None, b - 2, until(b));
    put(&store, "k", None, b - 1, until(b));
    put(&store, "k", None, b - 4, until(b - 2));
    put(&store, "k", Some("v3"), b - 3, until(b - 2));
    put(&store, "k", Some("v5"), b - 5, until(b - 4));
    put(&store, "k", None, b - 6, until(b - 5));

    verify_get_null(&store, "k");
    verify_as_of_null(&store, "k", b);
    verify_as_of_null(&store, "k", b - 1);
    verify_as_of_null(&store, "k", b - 2);
    verify_as_of(&store, "k", b - 3, ("v3", b - 3, Some(b - 2)));
    verify_as_of_null(&store, "k", b - 4);
    verify_as_of(&store, "k", b - 5, ("v5", b - 5, Some(b - 4)));
    verify_as_of_null(&store, "k", b - 6);
}

/// `RocksDBVersionedStoreTest.shouldPutRepeatTimestampAsLatest`.
pub fn should_put_repeat_timestamp_as_latest(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let b = BASE_TIMESTAMP;
    put(&store, "k", Some("to_be_replaced"), b, LATEST);
    put(&store, "k", Some("b"), b, LATEST);

    verify_get(&store, "k", "b", b);
    verify_as_of(&store, "k", b, ("b", b, UNDEFINED));
    verify_as_of_null(&store, "k", b - 1);

    put(&store, "k", None, b, LATEST);

    verify_get_null(&store, "k");
    verify_as_of_null(&store, "k", b);
    verify_as_of_null(&store, "k", b - 1);

    put(&store, "k", None, b, LATEST);

    verify_get_null(&store, "k");
    verify_as_of_null(&store, "k", b);
    verify_as_of_null(&store, "k", b - 1);

    put(&store, "k", Some("b"), b, LATEST);

    verify_get(&store, "k", "b", b);
    verify_as_of(&store, "k", b, ("b", b, UNDEFINED));
    verify_as_of_null(&store, "k", b - 1);
}

/// The puts of `shouldPutRepeatTimestamps`, also restored by
/// `shouldRestoreWithNullsAndRepeatTimestamps`.
fn put_repeat_timestamps(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    let replaced = Some("to_be_replaced");
    put(store, "k", replaced, s + 20, LATEST);
    put(store, "k", None, s - 10, until(s + 20));
    // Replaces the tombstone with a value, with timestamps spanning segments.
    put(store, "k", replaced, s - 10, until(s + 20));
    put(store, "k", None, s - 10, until(s + 20));
    put(store, "k", replaced, s - 1, until(s + 20));
    put(store, "k", replaced, s + 1, until(s + 20));
    put(store, "k", None, s - 1, until(s + 1));
    put(store, "k", None, s + 1, until(s + 20));
    put(store, "k", None, s + 10, until(s + 20));
    put(store, "k", None, s + 5, until(s + 10));
    put(store, "k", Some("vp5"), s + 5, until(s + 10));
    put(store, "k", replaced, s - 5, until(s - 1));
    put(store, "k", Some("vn5"), s - 5, until(s - 1));
    // Replaces the latest value with a tombstone, then the tombstone with one.
    put(store, "k", None, s + 20, LATEST);
    put(store, "k", None, s + 20, LATEST);
    put(store, "k", Some("vn6"), s - 6, until(s - 5));
}

/// The checks of `shouldPutRepeatTimestamps`, which several restore and null tests share.
fn verify_vp5_vn5_vn6(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    verify_get_null(store, "k");
    verify_as_of_null(store, "k", s + 30);
    verify_as_of_null(store, "k", s + 15);
    verify_as_of(store, "k", s + 6, ("vp5", s + 5, Some(s + 10)));
    verify_as_of_null(store, "k", s + 2);
    verify_as_of_null(store, "k", s);
    verify_as_of_null(store, "k", s - 1);
    verify_as_of(store, "k", s - 5, ("vn5", s - 5, Some(s - 1)));
    verify_as_of(store, "k", s - 6, ("vn6", s - 6, Some(s - 5)));
    verify_as_of_null(store, "k", s - 8);
}

/// `RocksDBVersionedStoreTest.shouldPutRepeatTimestamps`.
pub fn should_put_repeat_timestamps(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_repeat_timestamps(&store);
    verify_vp5_vn5_vn6(&store);
}

/// The puts of `shouldPutIntoMultipleSegments`, also restored by
/// `shouldRestoreMultipleBatches`.
fn put_into_multiple_segments(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    put(store, "k", None, s - 20, LATEST);
    put(store, "k", Some("vn10"), s - 10, LATEST);
    put(store, "k", None, s - 1, LATEST);
    put(store, "k", None, s + 1, LATEST);
    put(store, "k", Some("vp10"), s + 10, LATEST);
    put(store, "k", None, s + 20, LATEST);
}

fn verify_multiple_segments(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    verify_get_null(store, "k");
    verify_as_of_null(store, "k", s + 30);
    verify_as_of(store, "k", s + 15, ("vp10", s + 10, Some(s + 20)));
    verify_as_of_null(store, "k", s + 5);
    verify_as_of_null(store, "k", s + 2);
    verify_as_of_null(store, "k", s);
    verify_as_of_null(store, "k", s - 1);
    verify_as_of(store, "k", s - 5, ("vn10", s - 10, Some(s - 1)));
    verify_as_of_null(store, "k", s - 15);
}

/// `RocksDBVersionedStoreTest.shouldPutIntoMultipleSegments`.
pub fn should_put_into_multiple_segments(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_into_multiple_segments(&store);
    verify_multiple_segments(&store);
}

/// The puts of `shouldMoveRecordToOlderSegmentDuringPut`, also restored by `shouldRestore`.
fn put_moving_to_older_segment(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    put(store, "k", Some("vp20"), s + 20, LATEST);
    put(store, "k", Some("vp10"), s + 10, until(s + 20));
    put(store, "k", Some("vn10"), s - 10, until(s + 10));
    put(store, "k", Some("vn2"), s - 2, until(s + 10));
    put(store, "k", Some("vn1"), s - 1, until(s + 10));
    put(store, "k", Some("vp1"), s + 1, until(s + 10));
}

fn verify_moved_to_older_segment(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    verify_get(store, "k", "vp20", s + 20);
    verify_as_of(store, "k", s + 30, ("vp20", s + 20, UNDEFINED));
    verify_as_of(store, "k", s + 15, ("vp10", s + 10, Some(s + 20)));
    verify_as_of(store, "k", s + 5, ("vp1", s + 1, Some(s + 10)));
    verify_as_of(store, "k", s, ("vn1", s - 1, Some(s + 1)));
    verify_as_of(store, "k", s - 1, ("vn1", s - 1, Some(s + 1)));
    verify_as_of(store, "k", s - 2, ("vn2", s - 2, Some(s - 1)));
    verify_as_of(store, "k", s - 5, ("vn10", s - 10, Some(s - 2)));
}

/// `RocksDBVersionedStoreTest.shouldMoveRecordToOlderSegmentDuringPut`.
pub fn should_move_record_to_older_segment_during_put(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_moving_to_older_segment(&store);
    verify_moved_to_older_segment(&store);
}

/// The puts of `shouldMoveRecordToOlderSegmentWithNullsDuringPut`, also restored by
/// `shouldRestoreWithNulls`.
fn put_moving_with_nulls(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    put(store, "k", None, s + 20, LATEST);
    put(store, "k", None, s - 1, until(s + 20));
    put(store, "k", None, s + 1, until(s + 20));
    put(store, "k", None, s - 10, until(s - 1));
    put(store, "k", None, s + 10, until(s + 20));
    put(store, "k", Some("vp5"), s + 5, until(s + 10));
    put(store, "k", Some("vn5"), s - 5, until(s - 1));
    put(store, "k", Some("vn6"), s - 6, until(s - 5));
}

/// `RocksDBVersionedStoreTest.shouldMoveRecordToOlderSegmentWithNullsDuringPut`.
pub fn should_move_record_to_older_segment_with_nulls_during_put(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_moving_with_nulls(&store);
    verify_vp5_vn5_vn6(&store);
}

/// `RocksDBVersionedStoreTest.shouldFallThroughToExistingOlderSegmentAsLatestDuringPut`.
pub fn should_fall_through_to_existing_older_segment_as_latest_during_put(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", None, s - 5, LATEST);
    put(&store, "k", Some("vn6"), s - 6, until(s - 5));
    put(&store, "k", Some("vp20"), s + 20, LATEST);
    put(&store, "k", None, s + 10, until(s + 20));
    put(&store, "k", None, s - 1, until(s + 10));
    put(&store, "k", Some("vn2"), s - 2, until(s - 1));

    verify_get(&store, "k", "vp20", s + 20);
    verify_as_of(&store, "k", s + 30, ("vp20", s + 20, UNDEFINED));
    verify_as_of_null(&store, "k", s + 12);
    verify_as_of_null(&store, "k", s);
    verify_as_of_null(&store, "k", s - 1);
    verify_as_of(&store, "k", s - 2, ("vn2", s - 2, Some(s - 1)));
    verify_as_of_null(&store, "k", s - 5);
    verify_as_of(&store, "k", s - 6, ("vn6", s - 6, Some(s - 5)));
}

/// `RocksDBVersionedStoreTest.shouldPutNonLatestTombstoneIntoNewSegmentWithValidTo`.
pub fn should_put_non_latest_tombstone_into_new_segment_with_valid_to(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", Some("vp30"), s + 30, LATEST);
    put(&store, "k", None, s - 10, until(s + 30));
    put(&store, "k", Some("vn5"), s - 5, until(s + 30));
    put(&store, "k", Some("vn1"), s - 1, until(s + 30));
    put(&store, "k", None, s - 2, until(s - 1));

    verify_get(&store, "k", "vp30", s + 30);
    verify_as_of(&store, "k", s + 10, ("vn1", s - 1, Some(s + 30)));
    verify_as_of(&store, "k", s - 1, ("vn1", s - 1, Some(s + 30)));
    verify_as_of_null(&store, "k", s - 2);
    verify_as_of(&store, "k", s - 5, ("vn5", s - 5, Some(s - 2)));
    verify_as_of_null(&store, "k", s - 10);
}

/// `RocksDBVersionedStoreTest.shouldDelete`.
pub fn should_delete(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", Some("vp20"), s + 20, LATEST);
    put(&store, "k", Some("vp10"), s + 10, until(s + 20));
    put(&store, "k", Some("vn10"), s - 10, until(s + 10));
    put(&store, "k", Some("vn2"), s - 2, until(s + 10));

    // From within the history, at an existing timestamp, the same one again, the latest.
    assert_eq!(delete(&store, "k", s - 5), Some(("vn10".into(), s - 10)));
    assert_eq!(delete(&store, "k", s + 10), Some(("vp10".into(), s + 10)));
    assert_eq!(delete(&store, "k", s + 10), None);
    assert_eq!(delete(&store, "k", s + 25), Some(("vp20".into(), s + 20)));
}

/// `RocksDBVersionedStoreTest.shouldNotPutExpired`.
pub fn should_not_put_expired(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put(&store, "k", Some("v"), HISTORY_RETENTION + 10, LATEST);

    // The grace period has not elapsed.
    let ts = HISTORY_RETENTION + 10 - GRACE_PERIOD;
    put(&store, "k1", Some("v1"), ts, LATEST);
    verify_get(&store, "k1", "v1", ts);

    // The grace period has elapsed, so this put does not take place.
    put(
        &store,
        "k2",
        Some("v2"),
        HISTORY_RETENTION + 9 - GRACE_PERIOD,
        NOT_PUT,
    );
    verify_get_null(&store, "k2");

    assert_eq!(store.expired_writes(), 1);
}

/// `RocksDBVersionedStoreTest.shouldNotDeleteExpired`.
pub fn should_not_delete_expired(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put(&store, "k1", Some("v1"), 1, LATEST);
    put(&store, "k2", Some("v2"), 1, LATEST);
    // A separate key advances the stream time.
    put(
        &store,
        "kother",
        Some("vother"),
        HISTORY_RETENTION + 10,
        LATEST,
    );

    // The grace period has not elapsed.
    let deleted = delete(&store, "k1", HISTORY_RETENTION + 10 - GRACE_PERIOD);
    assert_eq!(deleted, Some(("v1".into(), 1)));
    verify_get_null(&store, "k1");

    // The grace period has elapsed: no delete, and no record returned though one exists.
    assert_eq!(
        delete(&store, "k2", HISTORY_RETENTION + 9 - GRACE_PERIOD),
        None
    );
    verify_get(&store, "k2", "v2", 1);

    assert_eq!(store.expired_writes(), 1);
}

/// Tombstones of another key at the ends of Kafka's first three segments.
fn put_other_key_in_three_segments(store: &VersionedStore) {
    let s = SEGMENT_INTERVAL;
    for ts in [s - 10, 2 * s - 10, 3 * s - 10] {
        put(store, "ko", None, ts, LATEST);
    }
}

/// `RocksDBVersionedStoreTest.shouldGetFromOlderSegments`.
pub fn should_get_from_older_segments(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put_other_key_in_three_segments(&store);

    verify_as_of_null(&store, "k", s - 20);

    put(&store, "k", Some("v"), s - 20, LATEST);
    put(&store, "k", None, s - 10, LATEST);

    verify_as_of_null(&store, "k", s - 30);
    verify_as_of(&store, "k", s - 15, ("v", s - 20, Some(s - 10)));
    verify_as_of_null(&store, "k", s - 5);

    put(&store, "k", Some("v2"), 3 * s - 20, LATEST);
    put(&store, "k", None, 3 * s - 10, LATEST);

    // Later versions do not change the answers about earlier ones.
    verify_as_of_null(&store, "k", s - 30);
    verify_as_of(&store, "k", s - 15, ("v", s - 20, Some(s - 10)));
    verify_as_of_null(&store, "k", s - 5);
}

/// `RocksDBVersionedStoreTest.shouldNotGetExpired`.
pub fn should_not_get_expired(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", Some("v_old"), 0, LATEST);
    put(&store, "k", Some("v"), s - 10, LATEST);

    // The old version has not expired.
    verify_as_of(&store, "k", s - 11, ("v_old", 0, Some(s - 10)));

    put(&store, "ko", Some("vo"), HISTORY_RETENTION + s - 11, LATEST);

    // Still not.
    verify_as_of(&store, "k", s - 11, ("v_old", 0, Some(s - 10)));

    put(
        &store,
        "ko",
        Some("vo2"),
        HISTORY_RETENTION + s - 10,
        LATEST,
    );

    // Now it has.
    verify_as_of_null(&store, "k", s - 11);
}

/// `RocksDBVersionedStoreTest.shouldGetExpiredIfLatestValue`.
pub fn should_get_expired_if_latest_value(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put(&store, "k", Some("v"), 1, LATEST);
    put(&store, "ko", Some("vo_old"), 1, LATEST);
    put(&store, "ko", Some("vo_new"), HISTORY_RETENTION + 12, LATEST);

    // An expired read of a key whose latest version satisfies the time bound answers it.
    verify_as_of(&store, "k", 10, ("v", 1, UNDEFINED));
    // The same read of a key whose latest version does not answers nothing.
    verify_as_of_null(&store, "ko", 10);
}

/// `RocksDBVersionedStoreTest.shouldDistinguishEmptyAndNull`.
pub fn should_distinguish_empty_and_null(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", None, s + 20, LATEST);
    put(&store, "k", None, s - 10, until(s + 20));
    put(&store, "k", None, s - 1, until(s + 20));
    put(&store, "k", None, s + 1, until(s + 20));
    put(&store, "k", None, s + 10, until(s + 20));
    // The empty value is a value, not a tombstone.
    put(&store, "k", Some(""), s + 5, until(s + 10));
    put(&store, "k", Some(""), s - 5, until(s - 1));
    put(&store, "k", Some(""), s - 6, until(s - 5));

    verify_get_null(&store, "k");
    verify_as_of_null(&store, "k", s + 30);
    verify_as_of_null(&store, "k", s + 15);
    verify_as_of(&store, "k", s + 6, ("", s + 5, Some(s + 10)));
    verify_as_of_null(&store, "k", s + 2);
    verify_as_of_null(&store, "k", s);
    verify_as_of_null(&store, "k", s - 1);
    verify_as_of(&store, "k", s - 5, ("", s - 5, Some(s - 1)));
    verify_as_of(&store, "k", s - 6, ("", s - 6, Some(s - 5)));
    verify_as_of_null(&store, "k", s - 8);
}

/// `RocksDBVersionedStoreTest.shouldGetRecordVersionsFromOlderSegments`.
pub fn should_get_record_versions_from_older_segments(factory: &dyn StoreFactory, mode: Mode) {
    use ResultOrder::Descending as Any;
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put_other_key_in_three_segments(&store);

    // The key does not exist.
    verify_versions_null(&store, "k", (s - 20, s));

    put(&store, "k", Some("v1"), s - 30, LATEST);
    put(&store, "k", Some("v2"), s - 25, LATEST);
    put(&store, "k", None, s - 20, LATEST);
    put(&store, "k", None, s - 15, LATEST);
    put(&store, "k", Some("v3"), s - 10, LATEST);
    put(&store, "k", Some("v4"), s - 5, LATEST);

    let all = [
        ("v4", s - 5, UNDEFINED),
        ("v3", s - 10, Some(s - 5)),
        ("v2", s - 25, Some(s - 20)),
        ("v1", s - 30, Some(s - 25)),
    ];
    // Before the first version.
    verify_versions_null(&store, "k", (s - 40, s - 35));
    // Values still valid in the range, with tombstones between them.
    verify_versions(&store, "k", (s - 30, s - 5), Any, &all);
    verify_versions(&store, "k", (i64::MIN, i64::MAX), Any, &all);
    // The latest version only.
    verify_versions(&store, "k", (s - 4, s), Any, &all[..1]);
    verify_versions(&store, "k", (s - 5, s - 5), Any, &all[..1]);
    verify_versions(&store, "k", (s - 4, s - 4), Any, &all[..1]);
    // Before any tombstone.
    verify_versions(&store, "k", (s - 31, s - 21), Any, &all[2..]);
    // Covering both tombstones.
    verify_versions(&store, "k", (s - 24, s - 11), Any, &all[2..3]);
    // After the tombstones.
    verify_versions(&store, "k", (s - 11, s - 4), Any, &all[..2]);
    // Valid in the range although put before it.
    verify_versions(&store, "k", (s - 26, s - 5), Any, &all);
    // Valid from the range's upper bound.
    verify_versions(&store, "k", (s - 15, s - 10), Any, &all[1..2]);
    // No value valid in the range.
    verify_versions_null(&store, "k", (s - 19, s - 16));

    put(&store, "k", Some("v5"), 3 * s - 30, LATEST);
    put(&store, "k", None, 3 * s - 20, LATEST);

    // Later versions do not change the answers about earlier ones.
    verify_versions_null(&store, "k", (s - 40, s - 35));
    verify_versions(&store, "k", (s - 30, s - 26), Any, &all[3..]);
    verify_versions_null(&store, "k", (s - 19, s - 16));
}

/// `RocksDBVersionedStoreTest.shouldGetRecordVersionsInAscendingOrder`.
pub fn should_get_record_versions_in_ascending_order(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", Some("v1"), s - 30, LATEST);
    put(&store, "k", Some("v2"), s - 25, LATEST);
    put(&store, "k", Some("v3"), s - 10, LATEST);
    put(&store, "k", Some("v4"), s - 5, LATEST);

    let want = [
        ("v1", s - 30, Some(s - 25)),
        ("v2", s - 25, Some(s - 10)),
        ("v3", s - 10, Some(s - 5)),
        ("v4", s - 5, UNDEFINED),
    ];
    verify_versions(&store, "k", (s - 30, s - 5), ResultOrder::Ascending, &want);
}

/// `RocksDBVersionedStoreTest.shouldGetRecordVersionsFromMultipleOldSegmentsInAscendingOrder`.
pub fn should_get_record_versions_from_multiple_old_segments_in_ascending_order(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", Some("v1"), s - 10, LATEST);
    put(&store, "k", Some("v2"), s - 5, LATEST);
    put(&store, "k", Some("v3"), 2 * s - 10, LATEST);
    put(&store, "k", Some("v4"), 2 * s - 5, LATEST);

    let want = [
        ("v1", s - 10, Some(s - 5)),
        ("v2", s - 5, Some(2 * s - 10)),
        ("v3", 2 * s - 10, Some(2 * s - 5)),
        ("v4", 2 * s - 5, UNDEFINED),
    ];
    let range = (i64::MIN, i64::MAX);
    verify_versions(&store, "k", range, ResultOrder::Ascending, &want);
}

/// `RocksDBVersionedStoreTest.shouldNotGetExpiredRecordVersions`.
pub fn should_not_get_expired_record_versions(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let s = SEGMENT_INTERVAL;
    put(&store, "k", Some("v_old"), 0, LATEST);
    put(&store, "k", Some("v"), s - 10, LATEST);

    let old = [("v_old", 0, Some(s - 10))];
    // The old version has not expired.
    verify_versions(&store, "k", (0, s - 11), ResultOrder::Descending, &old);

    put(&store, "ko", Some("vo"), HISTORY_RETENTION + s - 11, LATEST);

    // Still not.
    verify_versions(&store, "k", (0, s - 11), ResultOrder::Descending, &old);

    put(
        &store,
        "ko",
        Some("vo2"),
        HISTORY_RETENTION + s - 10,
        LATEST,
    );

    // Now it has.
    verify_versions_null(&store, "k", (0, s - 11));
}

/// `RocksDBVersionedStoreTest.shouldGetExpiredIfLatestVersionValue`.
pub fn should_get_expired_if_latest_version_value(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put(&store, "k", Some("v"), 1, LATEST);
    put(&store, "ko", Some("vo_old"), 1, LATEST);
    put(&store, "ko", Some("vo_new"), HISTORY_RETENTION + 12, LATEST);

    // An expired query of a key whose latest version satisfies the time bound answers it.
    let want = [("v", 1, UNDEFINED)];
    verify_versions(&store, "k", (0, 10), ResultOrder::Descending, &want);
    // The same query of a key whose latest version does not answers nothing.
    verify_versions_null(&store, "ko", (0, 10));
}

/// `RocksDBVersionedStoreTest.shouldRestore`.
pub fn should_restore(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_moving_to_older_segment(&store);
    let store = reopen(&mut fx, store);
    verify_moved_to_older_segment(&store);
}

/// `RocksDBVersionedStoreTest.shouldRestoreWithNulls`.
pub fn should_restore_with_nulls(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_moving_with_nulls(&store);
    let store = reopen(&mut fx, store);
    verify_vp5_vn5_vn6(&store);
}

/// `RocksDBVersionedStoreTest.shouldRestoreWithNullsAndRepeatTimestamps`.
pub fn should_restore_with_nulls_and_repeat_timestamps(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_repeat_timestamps(&store);
    let store = reopen(&mut fx, store);
    verify_vp5_vn5_vn6(&store);
}

/// `RocksDBVersionedStoreTest.shouldRestoreMultipleBatches`: the two batches are two commits.
pub fn should_restore_multiple_batches(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    put_into_multiple_segments(&store);
    let store = reopen(&mut fx, store);
    verify_multiple_segments(&store);
}

/// `RocksDBVersionedStoreTest.shouldNotRestoreExpired`: the expired record is refused by its
/// put, so no changelog holds it. (Kafka also checks that the restore counts no expired
/// record; a reopened store here starts its counts at zero by construction.)
pub fn should_not_restore_expired(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    let (ts, ts1, ts2) = (
        HISTORY_RETENTION + 10,
        HISTORY_RETENTION + 10 - GRACE_PERIOD,
        HISTORY_RETENTION + 9 - GRACE_PERIOD,
    );
    put(&store, "k", Some("v"), ts, LATEST);
    put(&store, "k1", Some("v1"), ts1, LATEST);
    put(&store, "k2", Some("v2"), ts2, NOT_PUT);
    let store = reopen(&mut fx, store);

    verify_get(&store, "k", "v", ts);
    verify_get(&store, "k1", "v1", ts1);
    verify_get_null(&store, "k2");
}

/// `RocksDBVersionedStoreTest.shouldRestoreEvenIfRecordWouldBeExpiredByEndOfBatch`.
pub fn should_restore_even_if_record_would_be_expired_by_end_of_batch(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, HISTORY_RETENTION);
    // Older than the grace period once the second record is in, but the latest of its key.
    put(
        &store,
        "k2",
        Some("v2"),
        HISTORY_RETENTION - GRACE_PERIOD,
        LATEST,
    );
    put(&store, "k", Some("v"), HISTORY_RETENTION + 10, LATEST);
    let store = reopen(&mut fx, store);

    verify_get(&store, "k2", "v2", HISTORY_RETENTION - GRACE_PERIOD);
    verify_get(&store, "k", "v", HISTORY_RETENTION + 10);
}

/// `RocksDBVersionedStoreTest.shouldAllowZeroHistoryRetention`.
pub fn should_allow_zero_history_retention(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, 0);
    let b = BASE_TIMESTAMP;

    put(&store, "k", Some("v"), b, LATEST);
    verify_get(&store, "k", "v", b);
    verify_as_of(&store, "k", b, ("v", b, UNDEFINED));
    // A read in the "future" is allowed.
    verify_as_of(&store, "k", b + 1, ("v", b, UNDEFINED));

    // Update the version at the same timestamp.
    put(&store, "k", Some("updated"), b, LATEST);
    verify_get(&store, "k", "updated", b);
    verify_as_of(&store, "k", b, ("updated", b, UNDEFINED));

    put(&store, "k", Some("v2"), b + 2, LATEST);
    verify_get(&store, "k", "v2", b + 2);
    verify_as_of(&store, "k", b + 2, ("v2", b + 2, UNDEFINED));

    // A read in the past, beyond the history retention, answers nothing.
    verify_as_of_null(&store, "k", b + 1);

    let _ = delete(&store, "k", b + 3);
    verify_get_null(&store, "k");

    // A put in the past, beyond the grace period, changes nothing.
    put(&store, "k2", Some("v"), b + 2, NOT_PUT);
    verify_get_null(&store, "k2");
    assert_eq!(store.expired_writes(), 1);
}
