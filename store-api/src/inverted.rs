//! Inverted ranges, reported once per store.
//!
//! A range whose `from` key lies after its `to` key is empty by contract, not an error. It
//! usually means a key encoding that does not preserve order (negative integers in big-endian
//! two's complement sort after the positive ones), so, as Kafka Streams does, the first one a
//! store sees is logged as a warning through `tracing`; later ones are not, so a hot loop does
//! not flood the log.

use std::fmt::Write as _;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bounds::range_is_empty;

/// The per-store memory of whether an inverted range was already reported. A backend embeds
/// one in each store and asks it instead of [`range_is_empty`] whether a range is empty.
///
/// ```
/// use std::ops::Bound::Included;
/// use store_api::InvertedRangeWarning;
///
/// let warning = InvertedRangeWarning::new("memory");
/// let (from, to): (&[u8], &[u8]) = (b"b", b"a");
/// assert!(warning.range_is_empty(Included(from), Included(to))); // warns
/// assert!(warning.range_is_empty(Included(from), Included(to))); // silent
/// assert!(!warning.range_is_empty(Included(to), Included(from)));
/// ```
#[derive(Debug)]
pub struct InvertedRangeWarning {
    store: String,
    warned: AtomicBool,
}

impl InvertedRangeWarning {
    /// Nothing reported yet for the store named `store` in the warning (a backend name, or a
    /// backend name and directory, so the warning says which store it is about).
    pub fn new(store: impl Into<String>) -> Self {
        InvertedRangeWarning {
            store: store.into(),
            warned: AtomicBool::new(false),
        }
    }

    /// True when no key can lie between `from` and `to` (as
    /// [`bounds::range_is_empty`](range_is_empty)). When that is because the `from` key
    /// lies after the `to` key, and this store has not warned before, logs a warning. An
    /// empty range with equal keys (such as `[a, a)`) is a legitimate empty range and is not
    /// reported.
    pub fn range_is_empty(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> bool {
        if !range_is_empty(from, to) {
            return false;
        }
        if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) =
            (from, to)
            && a > b
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                store = %self.store,
                from = %escape(a),
                to = %escape(b),
                "range with from > to returns nothing; keys sort as unsigned bytes, so this \
                 usually means a key encoding that does not preserve order (such as negative \
                 big-endian integers); reported once per store"
            );
        }
        true
    }
}

/// A key as printable ASCII with escapes, cut to 64 bytes so a huge key cannot flood the log.
fn escape(key: &[u8]) -> String {
    let mut text = String::new();
    for &byte in key.iter().take(64) {
        let _ = write!(text, "{}", std::ascii::escape_default(byte));
    }
    if key.len() > 64 {
        let _ = write!(text, "...({} bytes)", key.len());
    }
    text
}

#[cfg(test)]
mod tests {
    use std::ops::Bound::{Excluded, Included, Unbounded};

    use super::{InvertedRangeWarning, escape};

    // Whether it logs, and how often, is checked through every backend by the conformance
    // crate's `warnings::inverted_range_warns_once`.
    #[test]
    fn only_inverted_or_empty_ranges_are_empty() {
        let (a, b): (&[u8], &[u8]) = (b"a", b"b");
        let warning = InvertedRangeWarning::new("memory");
        assert!(warning.range_is_empty(Included(b), Included(a)));
        assert!(warning.range_is_empty(Included(b), Excluded(a)));
        assert!(warning.range_is_empty(Included(a), Excluded(a)));
        assert!(warning.range_is_empty(Excluded(a), Excluded(a)));
        assert!(!warning.range_is_empty(Included(a), Included(a)));
        assert!(!warning.range_is_empty(Unbounded, Included(a)));
        assert!(!warning.range_is_empty(Included(b), Unbounded));
    }

    #[test]
    fn keys_are_escaped_and_cut() {
        assert_eq!(escape(b"a\xff\x00"), r"a\xff\x00");
        assert_eq!(escape(&[b'k'; 70]).len(), 64 + "...(70 bytes)".len());
    }
}
