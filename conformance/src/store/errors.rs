//! Typed errors: a closed store refuses everything with `Closed`, oversized keys are refused
//! with `InvalidArgument`, and neither loses data or panics.
//!
//! Values over `MAX_VALUE_LEN` (1 GiB) are not tried: the allocation alone would dominate
//! the suite's run time and memory. The batch cases check the same validation path with keys.

use std::ops::Bound::Unbounded;

use store_api::limits::MAX_KEY_LEN;
use store_api::{ErrorKind, KeyValueStore, KvIter, Result, WriteBatch};

use super::support::{all, assert_kind, put_keys};
use crate::{StoreFactory, StoreFixture};

/// A store with two keys, closed.
fn closed_store(factory: &dyn StoreFactory) -> StoreFixture<'_> {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"b"]);
    fx.store().close().expect("close");
    fx
}

/// After `close`, `get` and `approximate_len` fail with `Closed`.
pub fn closed_store_rejects_reads(factory: &dyn StoreFactory) {
    let fx = closed_store(factory);
    assert_kind(fx.store().get(b"a"), ErrorKind::Closed, "get");
    assert_kind(
        fx.store().get(b"missing"),
        ErrorKind::Closed,
        "get of a missing key",
    );
    assert_kind(
        fx.store().approximate_len(),
        ErrorKind::Closed,
        "approximate_len",
    );
}

/// After `close`, every write fails with `Closed`, the empty batch included.
pub fn closed_store_rejects_writes(factory: &dyn StoreFactory) {
    let fx = closed_store(factory);
    let store = fx.store();
    assert_kind(store.put(b"a", b"x"), ErrorKind::Closed, "put");
    assert_kind(
        store.put_if_absent(b"c", b"x"),
        ErrorKind::Closed,
        "put_if_absent",
    );
    assert_kind(store.delete(b"a"), ErrorKind::Closed, "delete");
    let mut batch = WriteBatch::new();
    batch.put(b"c".to_vec(), b"x".to_vec());
    assert_kind(store.write(batch), ErrorKind::Closed, "write");
    assert_kind(
        store.write(WriteBatch::new()),
        ErrorKind::Closed,
        "write of an empty batch",
    );
}

/// A scan of a closed store fails with `Closed`, either at once or as its first item: it
/// must not look like an empty store.
fn assert_scan_closed(made: Result<KvIter>, what: &str) {
    match made {
        Err(err) => assert_eq!(err.kind(), ErrorKind::Closed, "{what}: {err}"),
        Ok(mut iter) => match iter.next() {
            Some(Err(err)) => assert_eq!(err.kind(), ErrorKind::Closed, "{what}: {err}"),
            Some(Ok(entry)) => panic!("{what} on a closed store yielded {entry:?}"),
            None => panic!("{what} on a closed store yielded nothing instead of Closed"),
        },
    }
}

/// After `close`, every kind of scan fails with `Closed`.
pub fn closed_store_rejects_scans(factory: &dyn StoreFactory) {
    let fx = closed_store(factory);
    let store = fx.store();
    assert_scan_closed(store.range(Unbounded, Unbounded), "range");
    assert_scan_closed(store.reverse_range(Unbounded, Unbounded), "reverse_range");
    assert_scan_closed(store.prefix_scan(b"a"), "prefix_scan");
    assert_scan_closed(store.reverse_prefix_scan(b""), "reverse_prefix_scan");
}

/// After `close`, `flush` fails with `Closed`: it cannot promise durability any more.
pub fn closed_store_rejects_flush(factory: &dyn StoreFactory) {
    let fx = closed_store(factory);
    assert_kind(fx.store().flush(), ErrorKind::Closed, "flush");
}

/// A second and third `close` succeed and change nothing.
pub fn close_twice_succeeds(factory: &dyn StoreFactory) {
    let fx = closed_store(factory);
    fx.store().close().expect("second close");
    fx.store().close().expect("third close");
    assert_kind(
        fx.store().get(b"a"),
        ErrorKind::Closed,
        "get after repeated close",
    );
}

/// An iterator created before `close` and drained after it does not panic: it yields a
/// prefix of the data it would have yielded, then either ends or yields one `Err` and ends.
pub fn iterator_after_close_ends_cleanly(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"b", b"c"]);
    let expected = all(fx.store());
    let mut iter = fx.store().range(Unbounded, Unbounded).expect("range");
    let first = iter
        .next()
        .expect("an item")
        .expect("an entry before close");
    fx.store().close().expect("close");
    let mut seen = vec![first];
    for item in iter.by_ref() {
        match item {
            Ok(entry) => seen.push(entry),
            Err(_) => break,
        }
    }
    assert!(
        iter.next().is_none(),
        "an iterator yielded more after an Err item"
    );
    assert!(
        expected.starts_with(&seen),
        "after close the iterator yielded {seen:?}"
    );
}

fn oversized_key() -> Vec<u8> {
    vec![0xAB; MAX_KEY_LEN + 1]
}

/// `put` and `put_if_absent` of a key over `MAX_KEY_LEN` fail with `InvalidArgument`, write
/// nothing and lose nothing.
pub fn oversized_key_rejected_by_writes(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"b"]);
    let before = all(fx.store());
    let key = oversized_key();
    assert_kind(
        fx.store().put(&key, b"v"),
        ErrorKind::InvalidArgument,
        "put",
    );
    let result = fx.store().put_if_absent(&key, b"v");
    assert_kind(result, ErrorKind::InvalidArgument, "put_if_absent");
    assert_eq!(
        all(fx.store()),
        before,
        "a rejected write changed the store"
    );
    fx.store()
        .put(b"c", b"c")
        .expect("the store still accepts writes");
}

/// `get` and `delete` of a key over `MAX_KEY_LEN` fail with `InvalidArgument` rather than
/// reporting it absent, and lose nothing.
pub fn oversized_key_rejected_by_reads(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a"]);
    let key = oversized_key();
    assert_kind(fx.store().get(&key), ErrorKind::InvalidArgument, "get");
    assert_kind(
        fx.store().delete(&key),
        ErrorKind::InvalidArgument,
        "delete",
    );
    assert_eq!(all(fx.store()), vec![(b"a".to_vec(), b"a".to_vec())]);
}

/// Errors leave the store usable: after a rejected `put`, `write` and `get`, every method
/// still works and the data is intact.
pub fn store_usable_after_errors(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store: &dyn KeyValueStore = fx.store();
    put_keys(store, &[b"k"]);
    let key = oversized_key();
    assert_kind(store.put(&key, b"v"), ErrorKind::InvalidArgument, "put");
    let mut batch = WriteBatch::new();
    batch.delete(b"k".to_vec()).delete(key.clone());
    assert_kind(store.write(batch), ErrorKind::InvalidArgument, "write");
    assert_kind(store.get(&key), ErrorKind::InvalidArgument, "get");
    store.put(b"l", b"l").expect("put after errors");
    store.flush().expect("flush after errors");
    assert_eq!(
        all(store).len(),
        2,
        "the rejected batch's delete of k must not apply"
    );
}
