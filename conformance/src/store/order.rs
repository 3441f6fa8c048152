//! Key order: unsigned lexicographic bytes, a proper prefix first, in both directions.

use std::ops::Bound::Unbounded;

use super::support::{all, keys, owned, put_keys, reverse_scan};
use crate::{StoreFactory, StoreFixture};

/// Keys written out of order, with 0x00, 0x7F, 0x80 and 0xFF bytes, come back in `memcmp`
/// order: bytes compare unsigned, so 0x80 and above sort after 0x7F.
pub fn scan_order_is_unsigned_bytewise(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[
            b"\xff",
            b"\x80",
            b"\x7f",
            b"\x00",
            b"\x01",
            b"a",
            b"Z",
            b"\xfe\xff",
            b"\x7f\xff",
        ],
    );
    let expected = owned(&[
        b"\x00",
        b"\x01",
        b"Z",
        b"a",
        b"\x7f",
        b"\x7f\xff",
        b"\x80",
        b"\xfe\xff",
        b"\xff",
    ]);
    assert_eq!(keys(&all(fx.store())), expected);
}

/// A proper prefix sorts before every key it starts, and a key sorts by its first
/// differing byte, not by its length.
pub fn prefix_sorts_first(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[b"abc", b"ab", b"abd", b"b", b"a", b"ab\x00", b"aa\xff\xff"],
    );
    let expected = owned(&[b"a", b"aa\xff\xff", b"ab", b"ab\x00", b"abc", b"abd", b"b"]);
    assert_eq!(keys(&all(fx.store())), expected);
}

/// The empty key sorts before every other key, including `[0x00]`.
pub fn empty_key_sorts_first(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"\x00\x00", b"\x00", b""]);
    assert_eq!(keys(&all(fx.store())), owned(&[b"", b"\x00", b"\x00\x00"]));
}

/// A full reverse scan returns exactly the forward scan, last key first, values attached to
/// their keys.
pub fn reverse_scan_descends(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[
            b"",
            b"\x00",
            b"a",
            b"ab",
            b"b",
            b"\x7f",
            b"\x80",
            b"\xff",
            b"\xff\xff",
        ],
    );
    let mut forward = all(fx.store());
    forward.reverse();
    assert_eq!(reverse_scan(fx.store(), Unbounded, Unbounded), forward);
    for (key, value) in &forward {
        assert_eq!(key, value, "each key was written with itself as its value");
    }
}

/// Scans reflect overwrites and deletes: each key appears once, with its latest value.
pub fn scans_show_latest_values(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"b", b"c", b"d"]);
    fx.store().put(b"b", b"B").expect("overwrite");
    fx.store().delete(b"c").expect("delete");
    fx.store().put(b"c", b"C").expect("put after delete");
    fx.store().delete(b"d").expect("delete");
    let expected = vec![
        (b"a".to_vec(), b"a".to_vec()),
        (b"b".to_vec(), b"B".to_vec()),
        (b"c".to_vec(), b"C".to_vec()),
    ];
    assert_eq!(all(fx.store()), expected);
    let mut reversed = expected;
    reversed.reverse();
    assert_eq!(reverse_scan(fx.store(), Unbounded, Unbounded), reversed);
}
