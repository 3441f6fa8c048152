//! [`BufferKey`]: a key of the write buffer, with a comparison cheaper than `memcmp`'s.

use std::borrow::Borrow;
use std::cmp::Ordering;

/// A buffered key, ordered as its bytes are (the order of the `&[u8]` lookups made with it).
///
/// Inserting into a buffer of 10 000 keys compares the new key with about twenty of them, and
/// `[u8]`'s order calls `memcmp` for each. This order is computed inline, eight bytes at a
/// time as big-endian integers, which for the short keys state stores mostly hold (ids,
/// counters, names) is a few instructions per comparison instead of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BufferKey(pub Vec<u8>);

impl Borrow<[u8]> for BufferKey {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl PartialOrd for BufferKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BufferKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare(&self.0, &other.0)
    }
}

/// The order of `a` and `b` as byte strings (shorter prefix first), as `a.cmp(b)`.
fn compare(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a_words, mut b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    for (a_word, b_word) in a_words.by_ref().zip(b_words.by_ref()) {
        let (a_word, b_word) = (word(a_word), word(b_word));
        if a_word != b_word {
            return a_word.cmp(&b_word);
        }
    }
    let done = 8 * (a.len() / 8).min(b.len() / 8);
    for (a_byte, b_byte) in a[done..].iter().zip(&b[done..]) {
        if a_byte != b_byte {
            return a_byte.cmp(b_byte);
        }
    }
    a.len().cmp(&b.len())
}

/// Eight bytes as a big-endian integer, which orders as the bytes do.
fn word(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(bytes);
    u64::from_be_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_as_byte_strings() {
        let mut keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![0xff; 40]];
        // Keys differing at and around each word boundary, and their prefixes.
        for at in [0, 6, 7, 8, 9, 15, 16, 17, 23, 24] {
            for byte in [0, 1, 0x7f, 0x80, 0xff] {
                let mut key = vec![7; 26];
                key[at] = byte;
                keys.push(key[..=at].to_vec());
                keys.push(key);
            }
        }
        for a in &keys {
            for b in &keys {
                let (key_a, key_b) = (BufferKey(a.clone()), BufferKey(b.clone()));
                assert_eq!(key_a.cmp(&key_b), a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }
}
