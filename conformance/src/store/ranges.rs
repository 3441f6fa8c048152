//! `range` and `reverse_range` under every combination of `Bound`s.
//!
//! The `*_from_*` cases check a grid: one kind of lower bound against every kind of upper
//! bound, with bounds at present keys, between keys and beyond both ends, against an oracle.
//! The other cases spell out the edge cases by hand.

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use store_api::KvPair;

use super::support::{in_range, keys, owned, put_keys, reverse_scan, scan};
use crate::{StoreFactory, StoreFixture};

/// The keys written for the grid cases, in order.
const GRID_KEYS: [&[u8]; 9] = [
    b"",
    b"\x00",
    b"b",
    b"b\x00",
    b"d",
    b"\x7f",
    b"\x80",
    b"\xff",
    b"\xff\xff",
];

/// Bounds that are not keys of the grid: before, between and after them.
const ABSENT_BOUNDS: [&[u8]; 6] = [
    b"a",
    b"c",
    b"b\x00\x00",
    b"\x7f\xff",
    b"\xff\x00",
    b"\xff\xff\xff",
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Included,
    Excluded,
    Unbounded,
}

/// Every bound of `kind` over the grid's keys and the absent bounds.
fn bounds_of(kind: Kind) -> Vec<Bound<&'static [u8]>> {
    let at = GRID_KEYS.iter().chain(ABSENT_BOUNDS.iter()).copied();
    match kind {
        Kind::Included => at.map(Included).collect(),
        Kind::Excluded => at.map(Excluded).collect(),
        Kind::Unbounded => vec![Unbounded],
    }
}

/// Checks `range` (or `reverse_range`) for every `from` of `from_kind` and every `to`.
fn check_grid(factory: &dyn StoreFactory, from_kind: Kind, reverse: bool) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &GRID_KEYS);
    let every_to: Vec<_> = [Kind::Included, Kind::Excluded, Kind::Unbounded]
        .into_iter()
        .flat_map(bounds_of)
        .collect();
    for from in bounds_of(from_kind) {
        for &to in &every_to {
            let mut expected: Vec<KvPair> = GRID_KEYS
                .iter()
                .filter(|key| in_range(from, to, key))
                .map(|key| (key.to_vec(), key.to_vec()))
                .collect();
            let actual = if reverse {
                expected.reverse();
                reverse_scan(fx.store(), from, to)
            } else {
                scan(fx.store(), from, to)
            };
            let direction = if reverse { "reverse_range" } else { "range" };
            assert_eq!(actual, expected, "{direction}({from:?}, {to:?})");
        }
    }
}

/// `range(Included(from), to)` for every kind of `to`, at keys, between them and past both
/// ends, including `from > to` and `from == to`.
pub fn range_from_included(factory: &dyn StoreFactory) {
    check_grid(factory, Kind::Included, false);
}

/// `range(Excluded(from), to)` for every kind of `to`.
pub fn range_from_excluded(factory: &dyn StoreFactory) {
    check_grid(factory, Kind::Excluded, false);
}

/// `range(Unbounded, to)` for every kind of `to`.
pub fn range_from_unbounded(factory: &dyn StoreFactory) {
    check_grid(factory, Kind::Unbounded, false);
}

/// `reverse_range(Included(from), to)` for every kind of `to`: the same keys as `range`,
/// descending.
pub fn reverse_range_from_included(factory: &dyn StoreFactory) {
    check_grid(factory, Kind::Included, true);
}

/// `reverse_range(Excluded(from), to)` for every kind of `to`.
pub fn reverse_range_from_excluded(factory: &dyn StoreFactory) {
    check_grid(factory, Kind::Excluded, true);
}

/// `reverse_range(Unbounded, to)` for every kind of `to`.
pub fn reverse_range_from_unbounded(factory: &dyn StoreFactory) {
    check_grid(factory, Kind::Unbounded, true);
}

/// Scans both ways and checks they list `expected` (keys written with themselves as values).
fn assert_both_ways(
    fx: &StoreFixture<'_>,
    from: Bound<&[u8]>,
    to: Bound<&[u8]>,
    expected: &[&[u8]],
) {
    assert_eq!(
        keys(&scan(fx.store(), from, to)),
        owned(expected),
        "range({from:?}, {to:?})"
    );
    let mut reversed = owned(expected);
    reversed.reverse();
    let actual = keys(&reverse_scan(fx.store(), from, to));
    assert_eq!(actual, reversed, "reverse_range({from:?}, {to:?})");
}

/// `from` after `to` yields nothing, for every pair of bound kinds and both directions; it is
/// not an error and does not panic.
pub fn range_from_after_to_is_empty(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"a", b"b", b"c", b"d", b"e"]);
    let (high, low): (&[u8], &[u8]) = (b"d", b"b");
    for from in [Included(high), Excluded(high)] {
        for to in [Included(low), Excluded(low)] {
            assert_both_ways(&fx, from, to, &[]);
        }
    }
    assert_both_ways(&fx, Included(b"z"), Included(b"0"), &[]);
    assert_both_ways(&fx, Included(b"b\x00"), Excluded(b"b"), &[]);
}

/// `from == to` selects the one key only when both bounds are included; any excluded side
/// makes the range empty. At an absent key it is empty either way.
pub fn range_with_equal_bounds(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"b", b"c", b"d"]);
    let c: &[u8] = b"c";
    assert_both_ways(&fx, Included(c), Included(c), &[b"c"]);
    assert_both_ways(&fx, Included(c), Excluded(c), &[]);
    assert_both_ways(&fx, Excluded(c), Included(c), &[]);
    assert_both_ways(&fx, Excluded(c), Excluded(c), &[]);
    assert_both_ways(&fx, Included(b"cc"), Included(b"cc"), &[]);
}

/// Bounds that are not keys select the keys between them, whatever their kind.
pub fn range_bounds_between_keys(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"b", b"d", b"f", b"h"]);
    assert_both_ways(&fx, Included(b"c"), Included(b"g"), &[b"d", b"f"]);
    assert_both_ways(&fx, Excluded(b"c"), Excluded(b"g"), &[b"d", b"f"]);
    assert_both_ways(&fx, Included(b"c"), Excluded(b"e"), &[b"d"]);
    assert_both_ways(&fx, Excluded(b"d\x00"), Included(b"h\x00"), &[b"f", b"h"]);
    assert_both_ways(&fx, Included(b"e"), Excluded(b"f"), &[]);
}

/// Bounds beyond the first or last key: ranges entirely outside are empty, ranges that
/// enclose everything select everything.
pub fn range_bounds_outside_keys(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"m", b"n"]);
    assert_both_ways(&fx, Included(b"a"), Included(b"z"), &[b"m", b"n"]);
    assert_both_ways(&fx, Excluded(b"a"), Excluded(b"z"), &[b"m", b"n"]);
    assert_both_ways(&fx, Included(b"o"), Unbounded, &[]);
    assert_both_ways(&fx, Excluded(b"n"), Unbounded, &[]);
    assert_both_ways(&fx, Unbounded, Excluded(b"m"), &[]);
    assert_both_ways(&fx, Unbounded, Included(b"l\xff"), &[]);
}

/// Every range of an empty store is empty, including the unbounded one.
pub fn range_on_empty_store(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    assert_both_ways(&fx, Unbounded, Unbounded, &[]);
    assert_both_ways(&fx, Included(b""), Unbounded, &[]);
    assert_both_ways(&fx, Included(b"a"), Excluded(b"z"), &[]);
    assert_both_ways(&fx, Included(b"z"), Excluded(b"a"), &[]);
}

/// The empty key as a bound: `Included(b"")` is the whole store, `Excluded(b"")` skips only
/// the empty key, and an upper bound of `Excluded(b"")` selects nothing.
pub fn range_with_empty_key_bounds(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(fx.store(), &[b"", b"\x00", b"a"]);
    let empty: &[u8] = b"";
    assert_both_ways(&fx, Included(empty), Unbounded, &[b"", b"\x00", b"a"]);
    assert_both_ways(&fx, Excluded(empty), Unbounded, &[b"\x00", b"a"]);
    assert_both_ways(&fx, Unbounded, Included(empty), &[b""]);
    assert_both_ways(&fx, Unbounded, Excluded(empty), &[]);
    assert_both_ways(&fx, Included(empty), Included(empty), &[b""]);
    assert_both_ways(&fx, Excluded(empty), Excluded(b"\x00\x00"), &[b"\x00"]);
}

/// Bounds made of 0xFF bytes, where a backend computing a successor key could overflow.
pub fn range_with_ff_bounds(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    put_keys(
        fx.store(),
        &[b"\xfe", b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x00"],
    );
    let ff: &[u8] = b"\xff";
    let ffff: &[u8] = b"\xff\xff";
    let tail: [&[u8]; 4] = [b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x00"];
    assert_both_ways(&fx, Included(ff), Unbounded, &tail);
    assert_both_ways(&fx, Excluded(ff), Excluded(ffff), &[b"\xff\x00"]);
    assert_both_ways(&fx, Excluded(ffff), Unbounded, &[b"\xff\xff\x00"]);
    assert_both_ways(&fx, Unbounded, Included(ff), &[b"\xfe", b"\xff"]);
    assert_both_ways(&fx, Included(b"\xff\xff\xff"), Unbounded, &[]);
}
