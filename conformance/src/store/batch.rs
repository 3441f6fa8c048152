//! `write(WriteBatch)`: every operation applied, in order, all or nothing.

use std::sync::atomic::{AtomicBool, Ordering};

use store_api::limits::MAX_KEY_LEN;
use store_api::{ErrorKind, KeyValueStore, WriteBatch};

use super::support::{SetOnDrop, all, assert_kind, get, keys, owned, put_keys};
use crate::{StoreFactory, StoreFixture};

/// Every put and delete of a batch is applied, including on keys written before it.
pub fn batch_applies_every_operation(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"old/keep", b"old/drop", b"old/change"]);
    let mut batch = WriteBatch::new();
    batch
        .put(b"new/1".to_vec(), b"1".to_vec())
        .delete(b"old/drop".to_vec())
        .put(b"old/change".to_vec(), b"changed".to_vec())
        .put(b"new/2".to_vec(), b"2".to_vec());
    fx.store().write(batch).expect("write");
    let expected = vec![
        (b"new/1".to_vec(), b"1".to_vec()),
        (b"new/2".to_vec(), b"2".to_vec()),
        (b"old/change".to_vec(), b"changed".to_vec()),
        (b"old/keep".to_vec(), b"old/keep".to_vec()),
    ];
    assert_eq!(all(fx.store()), expected);
}

/// A put then a delete of one key in one batch leaves the key absent.
pub fn batch_put_then_delete(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"existing", b"v").expect("put");
    let mut batch = WriteBatch::new();
    batch
        .put(b"k".to_vec(), b"v".to_vec())
        .delete(b"k".to_vec());
    batch
        .put(b"existing".to_vec(), b"w".to_vec())
        .delete(b"existing".to_vec());
    fx.store().write(batch).expect("write");
    assert_eq!(get(fx.store(), b"k"), None);
    assert_eq!(get(fx.store(), b"existing"), None);
    assert!(all(fx.store()).is_empty());
}

/// A delete then a put of one key in one batch leaves the put's value.
pub fn batch_delete_then_put(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"k", b"old").expect("put");
    let mut batch = WriteBatch::new();
    batch
        .delete(b"k".to_vec())
        .put(b"k".to_vec(), b"new".to_vec());
    batch
        .delete(b"fresh".to_vec())
        .put(b"fresh".to_vec(), b"".to_vec());
    fx.store().write(batch).expect("write");
    assert_eq!(get(fx.store(), b"k"), Some(b"new".to_vec()));
    assert_eq!(get(fx.store(), b"fresh"), Some(Vec::new()));
}

/// Two puts of one key in one batch: the later one wins.
pub fn batch_put_twice_last_wins(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let mut batch = WriteBatch::new();
    batch
        .put(b"k".to_vec(), b"first".to_vec())
        .put(b"other".to_vec(), b"x".to_vec())
        .put(b"k".to_vec(), b"second".to_vec())
        .put(b"k".to_vec(), b"third".to_vec());
    fx.store().write(batch).expect("write");
    assert_eq!(get(fx.store(), b"k"), Some(b"third".to_vec()));
    assert_eq!(keys(&all(fx.store())), owned(&[b"k", b"other"]));
}

/// An empty batch succeeds and changes nothing.
pub fn empty_batch_writes_nothing(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store()
        .write(WriteBatch::new())
        .expect("empty batch on an empty store");
    assert!(all(fx.store()).is_empty());
    put_keys(fx.store(), &[b"a"]);
    fx.store().write(WriteBatch::new()).expect("empty batch");
    assert_eq!(keys(&all(fx.store())), owned(&[b"a"]));
}

/// Deleting absent keys in a batch succeeds, and the batch's other operations apply.
pub fn batch_delete_of_missing_keys(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let mut batch = WriteBatch::new();
    batch
        .delete(b"never".to_vec())
        .put(b"k".to_vec(), b"v".to_vec())
        .delete(b"".to_vec());
    fx.store().write(batch).expect("write");
    assert_eq!(all(fx.store()), vec![(b"k".to_vec(), b"v".to_vec())]);
}

/// A batch holding one key longer than `MAX_KEY_LEN`, after valid operations, fails with
/// `InvalidArgument` and writes none of its operations.
pub fn batch_with_oversized_key_writes_nothing(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"keep", b"doomed"]);
    let mut batch = WriteBatch::new();
    batch
        .put(b"new".to_vec(), b"v".to_vec())
        .delete(b"doomed".to_vec())
        .put(b"keep".to_vec(), b"changed".to_vec())
        .put(vec![b'k'; MAX_KEY_LEN + 1], b"v".to_vec());
    assert_kind(
        fx.store().write(batch),
        ErrorKind::InvalidArgument,
        "oversized batch",
    );
    let expected = vec![
        (b"doomed".to_vec(), b"doomed".to_vec()),
        (b"keep".to_vec(), b"keep".to_vec()),
    ];
    assert_eq!(
        all(fx.store()),
        expected,
        "a rejected batch must write nothing"
    );
}

const ATOMIC_KEYS: usize = 16;
const ATOMIC_BATCHES: u64 = 300;

fn atomic_key(index: usize) -> Vec<u8> {
    format!("atomic/{index:02}").into_bytes()
}

/// Reads the generation stored at `key` (0 when absent).
fn generation(store: &dyn KeyValueStore, key: &[u8]) -> u64 {
    get(store, key).map_or(0, |value| {
        let bytes: [u8; 8] = value.as_slice().try_into().expect("an 8-byte generation");
        u64::from_be_bytes(bytes)
    })
}

/// Reads every key in `order`, checking that generations never go down: once one key of batch
/// `g` is visible, all of batch `g` is, so a later read cannot show an older generation.
fn check_point_reads(store: &dyn KeyValueStore, order: &[usize]) {
    let mut seen = 0;
    for &index in order {
        let current = generation(store, &atomic_key(index));
        assert!(
            current >= seen,
            "saw half a batch: key {index} holds generation {current} after a read of {seen}"
        );
        seen = current;
    }
}

/// A concurrent reader never sees half a batch. A writer sets all keys to generation `g` in
/// batch `g`; readers `get` the keys in batch order and in reverse, and a generation never
/// drops within one pass (which it would if a backend applied a batch key by key, in either
/// order). No timing is assumed: readers run until the writer is done.
pub fn batch_is_atomic_for_concurrent_readers(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    let done = AtomicBool::new(false);
    let forward: Vec<usize> = (0..ATOMIC_KEYS).collect();
    let backward: Vec<usize> = (0..ATOMIC_KEYS).rev().collect();
    std::thread::scope(|scope| {
        for order in [&forward, &backward, &forward] {
            let done = &done;
            scope.spawn(move || {
                while !done.load(Ordering::Acquire) {
                    check_point_reads(store, order);
                }
                check_point_reads(store, order);
            });
        }
        let _stop_readers = SetOnDrop(&done);
        for g in 1..=ATOMIC_BATCHES {
            let batch: WriteBatch = (0..ATOMIC_KEYS)
                .map(|index| store_api::BatchOp::Put {
                    key: atomic_key(index),
                    value: g.to_be_bytes().to_vec(),
                })
                .collect();
            store.write(batch).expect("write of a generation batch");
        }
    });
    for index in 0..ATOMIC_KEYS {
        assert_eq!(generation(store, &atomic_key(index)), ATOMIC_BATCHES);
    }
}
