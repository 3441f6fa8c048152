//! Helpers shared by the store cases: draining iterators, an independent range oracle,
//! error-kind checks and the visible skip line.

use std::io::Write;
use std::ops::Bound;

use store_api::{ErrorKind, KeyValueStore, KvIter, KvPair, Result};

use crate::StoreFixture;

/// Drains an iterator, failing the case on an `Err` item.
pub(crate) fn drain(iter: KvIter, what: &str) -> Vec<KvPair> {
    iter.map(|item| item.unwrap_or_else(|err| panic!("{what}: the iterator yielded {err}")))
        .collect()
}

/// Every entry of `range(from, to)`.
pub(crate) fn scan(store: &dyn KeyValueStore, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Vec<KvPair> {
    let what = format!("range({from:?}, {to:?})");
    let iter = store
        .range(from, to)
        .unwrap_or_else(|err| panic!("{what} failed: {err}"));
    drain(iter, &what)
}

/// Every entry of `reverse_range(from, to)`.
pub(crate) fn reverse_scan(
    store: &dyn KeyValueStore,
    from: Bound<&[u8]>,
    to: Bound<&[u8]>,
) -> Vec<KvPair> {
    let what = format!("reverse_range({from:?}, {to:?})");
    let iter = store
        .reverse_range(from, to)
        .unwrap_or_else(|err| panic!("{what} failed: {err}"));
    drain(iter, &what)
}

/// Every entry of the store, ascending.
pub(crate) fn all(store: &dyn KeyValueStore) -> Vec<KvPair> {
    scan(store, Bound::Unbounded, Bound::Unbounded)
}

/// Every entry of `prefix_scan(prefix)`.
pub(crate) fn prefixed(store: &dyn KeyValueStore, prefix: &[u8]) -> Vec<KvPair> {
    let what = format!("prefix_scan({prefix:?})");
    let iter = store
        .prefix_scan(prefix)
        .unwrap_or_else(|err| panic!("{what} failed: {err}"));
    drain(iter, &what)
}

/// Every entry of `reverse_prefix_scan(prefix)`.
pub(crate) fn reverse_prefixed(store: &dyn KeyValueStore, prefix: &[u8]) -> Vec<KvPair> {
    let what = format!("reverse_prefix_scan({prefix:?})");
    let iter = store
        .reverse_prefix_scan(prefix)
        .unwrap_or_else(|err| panic!("{what} failed: {err}"));
    drain(iter, &what)
}

/// The keys of `entries`, in order.
pub(crate) fn keys(entries: &[KvPair]) -> Vec<Vec<u8>> {
    entries.iter().map(|(key, _)| key.clone()).collect()
}

/// Owned copies of borrowed keys, for comparing with [`keys`].
pub(crate) fn owned(keys: &[&[u8]]) -> Vec<Vec<u8>> {
    keys.iter().map(|key| key.to_vec()).collect()
}

/// Puts every `(key, value)` one by one.
pub(crate) fn put_all(store: &dyn KeyValueStore, entries: &[(&[u8], &[u8])]) {
    for (key, value) in entries {
        store
            .put(key, value)
            .unwrap_or_else(|err| panic!("put({key:?}) failed: {err}"));
    }
}

/// Puts every key with the key itself as its value.
pub(crate) fn put_keys(store: &dyn KeyValueStore, keys: &[&[u8]]) {
    for key in keys {
        store
            .put(key, key)
            .unwrap_or_else(|err| panic!("put({key:?}) failed: {err}"));
    }
}

/// The value at `key`, failing the case on error.
pub(crate) fn get(store: &dyn KeyValueStore, key: &[u8]) -> Option<Vec<u8>> {
    store
        .get(key)
        .unwrap_or_else(|err| panic!("get({key:?}) failed: {err}"))
}

/// Whether `key` lies between `from` and `to`, written here rather than taken from
/// `store_api::bounds` so the oracle does not share code with the backends it checks.
pub(crate) fn in_range(from: Bound<&[u8]>, to: Bound<&[u8]>, key: &[u8]) -> bool {
    let after_start = match from {
        Bound::Included(start) => key >= start,
        Bound::Excluded(start) => key > start,
        Bound::Unbounded => true,
    };
    let before_end = match to {
        Bound::Included(end) => key <= end,
        Bound::Excluded(end) => key < end,
        Bound::Unbounded => true,
    };
    after_start && before_end
}

/// Fails unless `result` is an error of `kind`.
pub(crate) fn assert_kind<T: std::fmt::Debug>(result: Result<T>, kind: ErrorKind, what: &str) {
    match result {
        Err(err) => assert_eq!(err.kind(), kind, "{what}: expected {kind:?}, got {err}"),
        Ok(value) => panic!("{what}: expected a {kind:?} error, got Ok({value:?})"),
    }
}

/// Compares large byte strings without printing megabytes on failure.
pub(crate) fn assert_bytes_eq(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: wrong length");
    if let Some(at) = actual.iter().zip(expected).position(|(a, b)| a != b) {
        panic!("{what}: first difference at byte {at}");
    }
}

/// `len` bytes of a pattern whose period (251, a prime) is not a power of two, so a shifted,
/// truncated or zero-filled copy never matches by accident.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i % 251) as u8).wrapping_add(seed))
        .collect()
}

/// True when the store is persistent; otherwise prints the skip line and returns false.
pub(crate) fn persistent_or_skip(fixture: &StoreFixture<'_>, case: &str) -> bool {
    let store = fixture.store();
    if store.capabilities().persistent {
        return true;
    }
    skip(case, store.name(), "persistent");
    false
}

/// Prints why `case` is skipped. It writes to the process's stdout directly because libtest
/// captures only `print!`, and a skip must be visible in every run, not only in failing ones.
pub(crate) fn skip(case: &str, backend: &str, capability: &str) {
    let line = format!(
        "statestore-conformance: SKIP {case}: backend {backend:?} declares no {capability}\n"
    );
    let mut stdout = std::io::stdout().lock();
    // A skip line that cannot be written must not fail the case: it did not run.
    let _ = stdout
        .write_all(line.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Sets a flag when dropped, so threads waiting for a writer stop even if the writer panics.
pub(crate) struct SetOnDrop<'a>(pub(crate) &'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}
