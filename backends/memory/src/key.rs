//! [`Key`]: a stored key, held in the map's node itself when it is short.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// The longest key kept inline: 30 bytes, so that a `Key` takes 32 bytes, two words more than
/// the `Arc<[u8]>` a longer key is held by.
pub const INLINE: usize = 30;

/// A stored key. Keys of up to [`INLINE`] bytes (most keys: integers, UUIDs, short names)
/// are held in the map's node, longer ones in a shared heap slice.
///
/// Finding a key in a B-tree compares it with several keys of every node on the way down;
/// with the bytes of each key behind a pointer, each comparison is a likely cache miss at
/// large sizes, and those misses are most of the cost of a lookup or an insert. Inline keys
/// are compared within the node's own cache lines. Cloning one (an iterator taking the entries
/// it will yield) copies 32 bytes instead of touching a shared reference count.
///
/// Public so that the benches' native side of the memory pair holds its keys exactly as the
/// backend does; the bytes past an inline key's length are zero, which the type guarantees.
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    /// `bytes[..len]` is the key; the rest of `bytes` is zero.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A key longer than [`INLINE`] bytes.
    Shared(Arc<[u8]>),
}

impl Key {
    /// The key's bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Shared(shared) => shared,
        }
    }

    /// `key` held inline, or `None` when it is too long to be.
    pub fn inline(key: &[u8]) -> Option<Key> {
        let len = u8::try_from(key.len())
            .ok()
            .filter(|&len| usize::from(len) <= INLINE)?;
        let mut bytes = [0; INLINE];
        bytes[..key.len()].copy_from_slice(key);
        Some(Key(Repr::Inline { len, bytes }))
    }
}

impl From<&[u8]> for Key {
    fn from(key: &[u8]) -> Self {
        Key::inline(key).unwrap_or_else(|| Key(Repr::Shared(Arc::from(key))))
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// Lets the map be searched with a `&[u8]`: the order is the slices' order, as `Ord` below.
impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The order of the slices. Two inline keys, the common case on a search path, are compared
/// as three integers, without a call to `memcmp`: their bytes past `len` are zero, so the
/// padded arrays order as the slices do except when one key is the other followed by zeros,
/// where the shorter one, the prefix, comes first.
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            (
                Repr::Inline { len, bytes },
                Repr::Inline {
                    len: other_len,
                    bytes: other_bytes,
                },
            ) => words(bytes)
                .cmp(&words(other_bytes))
                .then(len.cmp(other_len)),
            _ => self.as_slice().cmp(other.as_slice()),
        }
    }
}

/// The bytes of an inline key as two big-endian integers, which order as the arrays do. The
/// second covers bytes 14 to 29: it overlaps the first, which decides whenever they differ.
fn words(bytes: &[u8; INLINE]) -> (u128, u128) {
    let mut high = [0; 16];
    let mut low = [0; 16];
    high.copy_from_slice(&bytes[..16]);
    low.copy_from_slice(&bytes[INLINE - 16..]);
    (u128::from_be_bytes(high), u128::from_be_bytes(low))
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_and_order_as_slices() {
        assert_eq!(std::mem::size_of::<Key>(), 32);
        let mut keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1; INLINE],
            vec![1; INLINE + 1],
            vec![2],
            vec![0xff; 100],
        ];
        // Keys differing in each byte of the overlap of the two compared words and around it,
        // and prefixes of one another padded with zeros.
        for at in [0, 13, 14, 15, 16, 17, INLINE - 1] {
            for byte in [0, 1, 0xff] {
                let mut key = vec![7; INLINE];
                key[at] = byte;
                keys.push(key.clone());
                keys.push(key[..=at].to_vec());
            }
        }
        let stored: Vec<Key> = keys.iter().map(|key| Key::from(&key[..])).collect();
        assert!(matches!(stored[3].0, Repr::Inline { .. }));
        assert!(matches!(stored[4].0, Repr::Shared(_)));
        for (a, key_a) in keys.iter().zip(&stored) {
            assert_eq!(key_a.as_slice(), &a[..]);
            for (b, key_b) in keys.iter().zip(&stored) {
                assert_eq!(key_a.cmp(key_b), a.cmp(b), "{a:?} against {b:?}");
                assert_eq!(key_a == key_b, a == b);
            }
        }
    }
}
