//! `prefix_scan` and `reverse_prefix_scan`: exactly the keys that start with the prefix.

use super::support::{keys, owned, prefixed, put_keys, reverse_prefixed};
use crate::{StoreFactory, StoreFixture};

/// Checks both scan directions of `prefix` against `expected` (ascending).
fn assert_prefix(fx: &StoreFixture<'_>, prefix: &[u8], expected: &[&[u8]]) {
    let forward = prefixed(fx.store(), prefix);
    assert_eq!(keys(&forward), owned(expected), "prefix_scan({prefix:?})");
    for (key, value) in &forward {
        assert_eq!(
            key, value,
            "prefix_scan({prefix:?}) paired a key with another's value"
        );
    }
    let mut descending = owned(expected);
    descending.reverse();
    let backward = keys(&reverse_prefixed(fx.store(), prefix));
    assert_eq!(backward, descending, "reverse_prefix_scan({prefix:?})");
}

/// A prefix selects the keys starting with it, and no neighbour on either side.
pub fn prefix_scan_selects_prefixed_keys(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[b"user/", b"user/1", b"user/2/x", b"user0", b"use", b"users"],
    );
    assert_prefix(&fx, b"user/", &[b"user/", b"user/1", b"user/2/x"]);
    assert_prefix(
        &fx,
        b"user",
        &[b"user/", b"user/1", b"user/2/x", b"user0", b"users"],
    );
}

/// The empty prefix selects every key, the empty key included.
pub fn prefix_scan_empty_prefix_selects_all(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let every: [&[u8]; 5] = [b"", b"\x00", b"a", b"\x80", b"\xff\xff"];
    put_keys(fx.store(), &every);
    assert_prefix(&fx, b"", &every);
}

/// The prefix `[0xFF]` has no finite successor, so the scan must run to the end of the store
/// and include keys such as `[0xFF, 0xFF, 0x00]`.
pub fn prefix_scan_ff_prefix(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[
            b"\xfe",
            b"\xfe\xff",
            b"\xff",
            b"\xff\x00",
            b"\xff\xff",
            b"\xff\xff\x00",
        ],
    );
    assert_prefix(
        &fx,
        b"\xff",
        &[b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x00"],
    );
}

/// The prefix `[0xFF, 0xFF]` selects only the keys starting with two 0xFF bytes.
pub fn prefix_scan_double_ff_prefix(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[
            b"\xff",
            b"\xff\xfe\xff",
            b"\xff\xff",
            b"\xff\xff\x00",
            b"\xff\xff\xff\xff",
        ],
    );
    assert_prefix(
        &fx,
        b"\xff\xff",
        &[b"\xff\xff", b"\xff\xff\x00", b"\xff\xff\xff\xff"],
    );
}

/// A prefix ending in 0xFF after other bytes (`a\xff`) ends at the successor `b`, not at the
/// end of the store.
pub fn prefix_scan_trailing_ff_prefix(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[b"a\xfe", b"a\xff", b"a\xff\xff\x01", b"b", b"b\x00", b"c"],
    );
    assert_prefix(&fx, b"a\xff", &[b"a\xff", b"a\xff\xff\x01"]);
}

/// A prefix longer than every key selects nothing, even when a key is a prefix of it.
pub fn prefix_scan_longer_than_every_key(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"ab", b"abc"]);
    assert_prefix(&fx, b"abcd", &[]);
    assert_prefix(&fx, b"abc\x00\x00\x00\x00", &[]);
}

/// The prefix itself is a key that starts with the prefix, so it is selected, first.
pub fn prefix_scan_includes_the_prefix_itself(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"ab", b"ab\x00", b"abz"]);
    assert_prefix(&fx, b"ab", &[b"ab", b"ab\x00", b"abz"]);
}

/// At key boundaries: a key sorting just before the prefix (`aa\xff`) and the successor
/// (`ac`) are excluded; the longest extension (`ab\xff\xff`) is included.
pub fn prefix_scan_stops_at_boundaries(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[b"aa", b"aa\xff", b"ab", b"ab\xff\xff", b"ac", b"ac\x00"],
    );
    assert_prefix(&fx, b"ab", &[b"ab", b"ab\xff\xff"]);
    assert_prefix(&fx, b"aa", &[b"aa", b"aa\xff"]);
}

/// A zero-byte prefix selects keys starting with 0x00 and not the empty key.
pub fn prefix_scan_zero_byte_prefix(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[b"", b"\x00", b"\x00\x00", b"\x00\xff", b"\x01"],
    );
    assert_prefix(&fx, b"\x00", &[b"\x00", b"\x00\x00", b"\x00\xff"]);
}

/// A prefix no key starts with selects nothing, in a non-empty store and in an empty one.
pub fn prefix_scan_without_match_is_empty(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    assert_prefix(&fx, b"", &[]);
    assert_prefix(&fx, b"\xff", &[]);
    put_keys(fx.store(), &[b"a", b"c"]);
    assert_prefix(&fx, b"b", &[]);
    assert_prefix(&fx, b"\x00", &[]);
}

/// Prefix scans see overwrites and deletes.
pub fn prefix_scan_reflects_writes(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"p/1", b"p/2", b"p/3"]);
    fx.store().delete(b"p/2").expect("delete");
    fx.store().put(b"p/4", b"p/4").expect("put");
    assert_prefix(&fx, b"p/", &[b"p/1", b"p/3", b"p/4"]);
}
