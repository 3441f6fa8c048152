//! Helpers for key ranges in unsigned lexicographic byte order.

use std::ops::Bound;

/// A bound that owns its key.
pub type OwnedBound = Bound<Vec<u8>>;

/// Copies a borrowed bound into an owned one.
pub fn to_owned_bound(bound: Bound<&[u8]>) -> OwnedBound {
    bound.map(<[u8]>::to_vec)
}

/// The exclusive upper bound of every key starting with `prefix`: the prefix with trailing
/// `0xFF` bytes dropped and its last byte incremented. `Unbounded` when the prefix is empty or
/// all `0xFF`, because then no finite key ends the range.
///
/// ```
/// use std::ops::Bound;
/// use store_api::bounds::prefix_upper_bound;
/// assert_eq!(prefix_upper_bound(b"ab"), Bound::Excluded(b"ac".to_vec()));
/// assert_eq!(prefix_upper_bound(b"a\xff"), Bound::Excluded(b"b".to_vec()));
/// assert_eq!(prefix_upper_bound(b"\xff\xff"), Bound::Unbounded);
/// ```
pub fn prefix_upper_bound(prefix: &[u8]) -> OwnedBound {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Bound::Excluded(end);
        }
    }
    Bound::Unbounded
}

/// The `(from, to)` bounds that select exactly the keys starting with `prefix`.
pub fn prefix_bounds(prefix: &[u8]) -> (OwnedBound, OwnedBound) {
    (Bound::Included(prefix.to_vec()), prefix_upper_bound(prefix))
}

/// True when no key can lie between `from` and `to`: `from` after `to`, or both at the same
/// key with at least one side excluded. Stores return an empty iterator for such a range,
/// never an error (and never the panic `BTreeMap::range` would raise).
pub fn range_is_empty(from: Bound<&[u8]>, to: Bound<&[u8]>) -> bool {
    match (from, to) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => false,
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
    }
}

/// True when `key` lies at or after `from`.
pub fn after_start(key: &[u8], from: Bound<&[u8]>) -> bool {
    match from {
        Bound::Unbounded => true,
        Bound::Included(start) => key >= start,
        Bound::Excluded(start) => key > start,
    }
}

/// True when `key` lies at or before `to`.
pub fn before_end(key: &[u8], to: Bound<&[u8]>) -> bool {
    match to {
        Bound::Unbounded => true,
        Bound::Included(end) => key <= end,
        Bound::Excluded(end) => key < end,
    }
}

/// True when `key` lies between `from` and `to`.
pub fn contains(from: Bound<&[u8]>, to: Bound<&[u8]>, key: &[u8]) -> bool {
    after_start(key, from) && before_end(key, to)
}

/// Borrows an owned bound.
pub fn as_ref_bound(bound: &OwnedBound) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Bound::{Excluded, Included, Unbounded};

    #[test]
    fn empty_ranges() {
        assert!(range_is_empty(Included(b"b"), Included(b"a")));
        assert!(range_is_empty(Included(b"a"), Excluded(b"a")));
        assert!(range_is_empty(Excluded(b"a"), Excluded(b"a")));
        assert!(!range_is_empty(Included(b"a"), Included(b"a")));
        assert!(!range_is_empty(Unbounded, Included(b"")));
    }

    #[test]
    fn prefix_bound_of_empty_and_ff() {
        assert_eq!(prefix_upper_bound(b""), Unbounded);
        assert_eq!(prefix_upper_bound(b"\x00\xff"), Excluded(vec![1]));
    }
}
