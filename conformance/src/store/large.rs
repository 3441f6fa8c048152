//! Sizes: large values, the longest key, 100k keys, and `approximate_len`.

use std::ops::Bound::{Excluded, Included, Unbounded};

use store_api::WriteBatch;
use store_api::limits::MAX_KEY_LEN;

use super::support::{all, assert_bytes_eq, get, prefixed, reverse_scan, scan};
use crate::{StoreFactory, StoreFixture};

const MIB: usize = 1 << 20;

/// Writes one value of `len` bytes with `put`, reads it back with `get` and a scan.
fn round_trip(factory: &dyn StoreFactory, len: usize) {
    let fx = StoreFixture::new(factory);
    let value = super::support::pattern(len, 7);
    fx.store().put(b"small", b"s").expect("put");
    fx.store()
        .put(b"large", &value)
        .expect("put of a large value");
    let read = get(fx.store(), b"large").expect("the large value is present");
    assert_bytes_eq(&read, &value, "get of the large value");
    let scanned = prefixed(fx.store(), b"large");
    assert_eq!(scanned.len(), 1);
    assert_bytes_eq(&scanned[0].1, &value, "scan of the large value");
    assert_eq!(get(fx.store(), b"small"), Some(b"s".to_vec()));
}

/// An 8 MiB value round-trips through `put`, `get` and a scan.
pub fn value_of_8_mib(factory: &dyn StoreFactory) {
    round_trip(factory, 8 * MIB);
}

/// A 16 MiB value round-trips through `put`, `get` and a scan.
pub fn value_of_16_mib(factory: &dyn StoreFactory) {
    round_trip(factory, 16 * MIB);
}

/// Large values written by a batch, then replaced by a smaller one, read back exactly.
pub fn large_values_in_batches(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let (first, second) = (
        super::support::pattern(8 * MIB, 1),
        super::support::pattern(8 * MIB, 2),
    );
    let mut batch = WriteBatch::new();
    batch
        .put(b"a".to_vec(), first.clone())
        .put(b"b".to_vec(), second.clone());
    fx.store().write(batch).expect("write of two 8 MiB values");
    assert_bytes_eq(&get(fx.store(), b"a").expect("a"), &first, "a");
    assert_bytes_eq(&get(fx.store(), b"b").expect("b"), &second, "b");
    let mut shrink = WriteBatch::new();
    shrink
        .put(b"a".to_vec(), b"short".to_vec())
        .delete(b"b".to_vec());
    fx.store().write(shrink).expect("write");
    assert_eq!(all(fx.store()), vec![(b"a".to_vec(), b"short".to_vec())]);
}

/// A key of exactly `MAX_KEY_LEN` bytes is accepted by every method and scans return it.
pub fn key_of_max_len_is_accepted(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let key = super::support::pattern(MAX_KEY_LEN, 3);
    fx.store()
        .put(&key, b"v")
        .expect("put of a key of MAX_KEY_LEN bytes");
    assert_eq!(get(fx.store(), &key), Some(b"v".to_vec()));
    let previous = fx.store().put_if_absent(&key, b"w").expect("put_if_absent");
    assert_eq!(previous, Some(b"v".to_vec()));
    let scanned = all(fx.store());
    assert_eq!(scanned.len(), 1);
    assert_bytes_eq(&scanned[0].0, &key, "scanned key");
    fx.store().delete(&key).expect("delete");
    assert_eq!(get(fx.store(), &key), None);
}

const MANY: u32 = 100_000;
const MANY_BATCH: u32 = 1_000;

/// Key `i` of the 100k-key cases: a prefix and `i` big-endian, so byte order is index order
/// and the keys are full of 0x00 bytes.
fn many_key(i: u32) -> Vec<u8> {
    let mut key = b"n/".to_vec();
    key.extend_from_slice(&i.to_be_bytes());
    key
}

fn many_value(i: u32) -> Vec<u8> {
    format!("value {i}").into_bytes()
}

/// Writes the 100k keys in batches of 1000, in a scrambled order so the engine sorts them.
fn write_many(fx: &StoreFixture<'_>) {
    for chunk in 0..MANY / MANY_BATCH {
        let mut batch = WriteBatch::with_capacity(MANY_BATCH as usize);
        for j in 0..MANY_BATCH {
            // j * 100 + chunk visits every index once, jumping across the key space.
            let i = j * (MANY / MANY_BATCH) + chunk;
            batch.put(many_key(i), many_value(i));
        }
        fx.store().write(batch).expect("write of a 1000-key batch");
    }
}

/// 100k keys: a full scan returns each exactly once, in order, with its value; spot `get`s
/// find them.
pub fn hundred_thousand_keys_full_scan(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    write_many(&fx);
    let entries = all(fx.store());
    assert_eq!(entries.len(), MANY as usize, "full scan count");
    for (i, (key, value)) in (0..MANY).zip(&entries) {
        assert_eq!(key, &many_key(i), "entry {i} of the full scan");
        assert_eq!(value, &many_value(i), "value of entry {i}");
    }
    for i in (0..MANY).step_by(997).chain([MANY - 1]) {
        assert_eq!(
            get(fx.store(), &many_key(i)),
            Some(many_value(i)),
            "get of key {i}"
        );
    }
    assert_eq!(get(fx.store(), &many_key(MANY)), None);
}

/// 100k keys: bounded ranges, a reverse range and a prefix scan select the right slices.
pub fn hundred_thousand_keys_bounded_scans(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    write_many(&fx);
    let (low, high) = (many_key(25_000), many_key(75_000));
    let middle = scan(fx.store(), Included(&low), Excluded(&high));
    assert_eq!(middle.len(), 50_000);
    assert_eq!((&middle[0].0, &middle[49_999].0), (&low, &many_key(74_999)));
    let tail = reverse_scan(fx.store(), Excluded(&many_key(10)), Unbounded);
    assert_eq!(tail.len(), (MANY - 11) as usize);
    assert_eq!(
        (&tail[0].0, &tail[tail.len() - 1].0),
        (&many_key(MANY - 1), &many_key(11))
    );
    // Indexes 65536..=99999 are exactly the keys starting with n/ 0x00 0x01.
    let upper = prefixed(fx.store(), b"n/\x00\x01");
    assert_eq!(upper.len(), (MANY - 65_536) as usize);
    assert_eq!(upper[0].0, many_key(65_536));
}

/// A new store's `approximate_len` is 0: there is nothing to overcount.
pub fn approximate_len_of_new_store_is_zero(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    assert_eq!(fx.store().approximate_len().expect("approximate_len"), 0);
}

/// After 1000 distinct keys and a `flush`, `approximate_len` is within a factor of two of
/// 1000. The contract allows an estimate that lags or overcounts, so exactness is not
/// required; a factor of two is loose enough for engines that estimate from table statistics
/// and tight enough to catch a count of bytes, of operations, or of nothing.
pub fn approximate_len_tracks_inserts(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let mut batch = WriteBatch::new();
    for i in 0..1_000_u32 {
        batch.put(i.to_be_bytes().to_vec(), b"v".to_vec());
    }
    fx.store().write(batch).expect("write");
    fx.store().flush().expect("flush");
    let len = fx.store().approximate_len().expect("approximate_len");
    assert!(
        (500..=2_000).contains(&len),
        "approximate_len {len} for 1000 keys"
    );
}
