//! [`delete_range`](store_api::KeyValueStore::delete_range): it removes exactly the keys
//! `range` would yield under the same bounds, nothing for an empty or inverted interval, and
//! later writes inside a removed range are seen as usual; after a flush the removal survives
//! a reopen.

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use crate::StoreFactory;
use crate::StoreFixture;

use super::support::{all, in_range, persistent_or_skip, put_keys};

/// Keys around every boundary the bounds below touch: the empty key, 0x00 and 0xFF bytes,
/// prefixes of other keys.
const KEYS: [&[u8]; 11] = [
    b"",
    b"\x00",
    b"\x00\x00",
    b"a",
    b"a\x00",
    b"ab",
    b"abc",
    b"b",
    b"b\xff",
    b"\xff",
    b"\xff\xff",
];

/// Bound keys: stored keys and keys between them.
const BOUND_KEYS: [&[u8]; 6] = [b"", b"a", b"a\x00", b"aa", b"b\xff", b"\xff\xff"];

/// A pair of bounds.
type KeyRange = (Bound<&'static [u8]>, Bound<&'static [u8]>);

fn bounds() -> Vec<Bound<&'static [u8]>> {
    let mut all = vec![Unbounded];
    for key in BOUND_KEYS {
        all.push(Included(key));
        all.push(Excluded(key));
    }
    all
}

/// Under every combination of bounds, `delete_range` on a store holding keys around every
/// boundary the bounds touch removes exactly the keys in the interval (`from` after `to`
/// removes nothing) and keeps every other key with its value. One store serves every
/// combination, its keys written again before each, so writes after a removal are checked
/// too.
pub fn delete_range_removes_exactly_the_range(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    for from in bounds() {
        for to in bounds() {
            put_keys(store, &KEYS);
            store
                .delete_range(from, to)
                .unwrap_or_else(|err| panic!("delete_range({from:?}, {to:?}) failed: {err}"));
            let expected: Vec<(Vec<u8>, Vec<u8>)> = KEYS
                .iter()
                .filter(|key| !in_range(from, to, key))
                .map(|key| (key.to_vec(), key.to_vec()))
                .collect();
            assert_eq!(all(store), expected, "after delete_range({from:?}, {to:?})");
        }
    }
}

/// `delete_range` of an interval holding no key, of an inverted or empty interval, and on an
/// empty store succeeds and removes nothing.
pub fn delete_range_of_nothing_succeeds(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    store
        .delete_range(Unbounded, Unbounded)
        .expect("delete_range on an empty store");
    put_keys(store, &KEYS);
    let cases: [KeyRange; 4] = [
        (Included(b"b"), Excluded(b"a")),
        (Excluded(b"ab"), Excluded(b"ab")),
        (Excluded(b"abc"), Excluded(b"b")),
        (Included(b"c"), Included(b"d")),
    ];
    for (from, to) in cases {
        store
            .delete_range(from, to)
            .unwrap_or_else(|err| panic!("delete_range({from:?}, {to:?}) failed: {err}"));
        assert_eq!(
            all(store).len(),
            KEYS.len(),
            "delete_range({from:?}, {to:?})"
        );
    }
}

/// Keys written into a removed range after `delete_range` returned are stored and read as
/// usual, and a removal spanning thousands of keys (several batches of the default
/// implementation) leaves none of them.
pub fn delete_range_then_writes_in_range(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    let keys: Vec<Vec<u8>> = (0..2500u32)
        .map(|i| format!("k{i:05}").into_bytes())
        .collect();
    for chunk in keys.chunks(500) {
        let mut batch = store_api::WriteBatch::new();
        for key in chunk {
            batch.put(key.clone(), b"v".to_vec());
        }
        store.write(batch).expect("write");
    }
    store
        .delete_range(Included(b"k00010"), Excluded(b"k02490"))
        .expect("delete_range");
    assert_eq!(all(store).len(), 20, "the keys outside the range");
    store.put(b"k01000", b"again").expect("put");
    assert_eq!(
        store.get(b"k01000").expect("get"),
        Some(b"again".to_vec()),
        "a key written into the removed range"
    );
    store
        .delete_range(Unbounded, Unbounded)
        .expect("delete_range of everything");
    assert!(
        all(store).is_empty(),
        "delete_range of everything left keys"
    );
}

/// A flushed `delete_range` survives closing and reopening the store (persistent stores).
pub fn delete_range_survives_reopen(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "delete_range_survives_reopen") {
        return;
    }
    put_keys(fx.store(), &KEYS);
    fx.store()
        .delete_range(Included(b"a"), Excluded(b"b"))
        .expect("delete_range");
    fx.store().flush().expect("flush");
    fx.reopen();
    let expected: Vec<(Vec<u8>, Vec<u8>)> = KEYS
        .iter()
        .filter(|key| !in_range(Included(b"a"), Excluded(b"b"), key))
        .map(|key| (key.to_vec(), key.to_vec()))
        .collect();
    assert_eq!(all(fx.store()), expected, "after reopen");
}
