//! Round trips of single keys: get, put, overwrite, delete, and the bytes keys and values may
//! hold.

use store_api::KeyValueStore;

use super::support::{all, get, keys, owned, put_keys};
use crate::{StoreFactory, StoreFixture};

/// `get` of a key never written is `Ok(None)`, not an error.
pub fn get_missing_is_none(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    assert_eq!(get(fx.store(), b"missing"), None);
    fx.store().put(b"present", b"1").expect("put");
    assert_eq!(get(fx.store(), b"missing"), None);
    assert_eq!(
        get(fx.store(), b"presen"),
        None,
        "a prefix of a key is another key"
    );
}

/// A value written by `put` is returned by `get`.
pub fn put_then_get(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"key", b"value").expect("put");
    assert_eq!(get(fx.store(), b"key"), Some(b"value".to_vec()));
}

/// A second `put` of a key replaces its value, and leaves one entry.
pub fn put_overwrites(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"key", b"first").expect("put");
    fx.store().put(b"key", b"second, longer").expect("put");
    fx.store().put(b"key", b"3").expect("put");
    assert_eq!(get(fx.store(), b"key"), Some(b"3".to_vec()));
    assert_eq!(all(fx.store()), vec![(b"key".to_vec(), b"3".to_vec())]);
}

/// `delete` removes the key from lookups and scans, and leaves other keys alone.
pub fn delete_removes(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"b", b"c"]);
    fx.store().delete(b"b").expect("delete");
    assert_eq!(get(fx.store(), b"b"), None);
    assert_eq!(keys(&all(fx.store())), owned(&[b"a", b"c"]));
}

/// Deleting a key that is absent (never written, or already deleted) succeeds.
pub fn delete_missing_succeeds(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store()
        .delete(b"never written")
        .expect("delete of a missing key");
    fx.store().put(b"k", b"v").expect("put");
    fx.store().delete(b"k").expect("delete");
    fx.store()
        .delete(b"k")
        .expect("second delete of the same key");
    assert!(all(fx.store()).is_empty());
}

/// A deleted key can be written again, and reads back the new value.
pub fn put_after_delete(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"k", b"old").expect("put");
    fx.store().delete(b"k").expect("delete");
    fx.store().put(b"k", b"new").expect("put after delete");
    assert_eq!(get(fx.store(), b"k"), Some(b"new".to_vec()));
    assert_eq!(all(fx.store()).len(), 1);
}

/// The empty key is an ordinary key: absent until written, then present, then deletable.
pub fn empty_key_is_ordinary(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    assert_eq!(
        get(fx.store(), b""),
        None,
        "the empty key is absent in a new store"
    );
    fx.store()
        .put(b"", b"empty key's value")
        .expect("put of the empty key");
    fx.store().put(b"\x00", b"zero").expect("put");
    assert_eq!(get(fx.store(), b""), Some(b"empty key's value".to_vec()));
    assert_eq!(get(fx.store(), b"\x00"), Some(b"zero".to_vec()));
    fx.store().delete(b"").expect("delete of the empty key");
    assert_eq!(get(fx.store(), b""), None);
    assert_eq!(keys(&all(fx.store())), owned(&[b"\x00"]));
}

/// An empty value is present: `get` returns `Some(vec![])`, not `None`, and scans list it.
pub fn empty_value_is_present(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"k", b"").expect("put of an empty value");
    assert_eq!(get(fx.store(), b"k"), Some(Vec::new()));
    assert_eq!(get(fx.store(), b"other"), None);
    assert_eq!(all(fx.store()), vec![(b"k".to_vec(), Vec::new())]);
    fx.store()
        .put(b"", b"")
        .expect("empty key with empty value");
    assert_eq!(get(fx.store(), b""), Some(Vec::new()));
}

/// Keys holding 0x00 and 0xFF anywhere are distinct and round-trip exactly.
pub fn binary_keys_round_trip(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let keys_written: [&[u8]; 8] = [
        b"\x00",
        b"\x00\x00",
        b"\xff",
        b"\xff\xff",
        b"\x00\xff",
        b"\xff\x00",
        b"a\x00b",
        b"a\xffb",
    ];
    put_keys(fx.store(), &keys_written);
    for key in keys_written {
        assert_eq!(get(fx.store(), key), Some(key.to_vec()), "key {key:?}");
    }
    assert_eq!(all(fx.store()).len(), keys_written.len());
}

/// Values may hold every byte, 0x00 to 0xFF, and come back unchanged.
pub fn binary_values_round_trip(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let every_byte: Vec<u8> = (0..=255).collect();
    let reversed: Vec<u8> = (0..=255).rev().collect();
    fx.store().put(b"up", &every_byte).expect("put");
    fx.store().put(b"down", &reversed).expect("put");
    fx.store().put(b"zeros", &[0; 64]).expect("put");
    assert_eq!(get(fx.store(), b"up"), Some(every_byte));
    assert_eq!(get(fx.store(), b"down"), Some(reversed));
    assert_eq!(get(fx.store(), b"zeros"), Some(vec![0; 64]));
}

/// Keys that differ only by trailing zero bytes are different keys: no backend may pad,
/// trim or terminate keys.
pub fn trailing_zero_bytes_are_significant(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"a\x00", b"a\x00\x00"]);
    fx.store().delete(b"a\x00").expect("delete");
    assert_eq!(get(fx.store(), b"a"), Some(b"a".to_vec()));
    assert_eq!(get(fx.store(), b"a\x00"), None);
    assert_eq!(get(fx.store(), b"a\x00\x00"), Some(b"a\x00\x00".to_vec()));
}

/// `flush` succeeds on any store, empty or not, persistent or not, and changes no data.
pub fn flush_succeeds(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().flush().expect("flush of an empty store");
    fx.store().put(b"k", b"v").expect("put");
    fx.store().flush().expect("flush after a write");
    fx.store().flush().expect("flush with nothing new");
    assert_eq!(get(fx.store(), b"k"), Some(b"v".to_vec()));
}

/// `name` is not empty, and `name` and `capabilities` do not change while the store is used.
pub fn name_and_capabilities_are_stable(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store: &dyn KeyValueStore = fx.store();
    let (name, capabilities) = (store.name().to_owned(), store.capabilities());
    assert!(!name.is_empty(), "a backend must have a name");
    store.put(b"k", b"v").expect("put");
    store.flush().expect("flush");
    assert_eq!(store.name(), name);
    assert_eq!(store.capabilities(), capabilities);
}
