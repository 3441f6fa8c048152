//! The memory backend's map, used directly: the native side of memory's abstraction pair.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::RwLock;
use store_api::Result;

use crate::data::Key;
use crate::target::Target;

/// The longest key held inline, as in the memory backend.
const INLINE: usize = 30;

/// A key as the memory backend stores it: up to [`INLINE`] bytes in the node, zero-padded,
/// compared as integers; longer keys on the heap.
#[derive(Clone, Debug)]
enum MapKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<[u8]>),
}

impl MapKey {
    fn new(key: &[u8]) -> MapKey {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                MapKey::Inline { len, bytes }
            }
            _ => MapKey::Shared(Arc::from(key)),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            MapKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            MapKey::Shared(shared) => shared,
        }
    }
}

impl Borrow<[u8]> for MapKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for MapKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for MapKey {}

impl PartialOrd for MapKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MapKey {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (MapKey::Inline { len, bytes }, MapKey::Inline { len: l2, bytes: b2 }) => {
                words(bytes).cmp(&words(b2)).then(len.cmp(l2))
            }
            _ => self.as_slice().cmp(other.as_slice()),
        }
    }
}

fn words(bytes: &[u8; INLINE]) -> (u128, u128) {
    let mut high = [0; 16];
    let mut low = [0; 16];
    high.copy_from_slice(&bytes[..16]);
    low.copy_from_slice(&bytes[INLINE - 16..]);
    (u128::from_be_bytes(high), u128::from_be_bytes(low))
}

/// A `BTreeMap` of the memory backend's layout (short keys inline, values in `Arc<[u8]>`)
/// behind a `parking_lot::RwLock`, used as a caller of the map alone would: reads look at
/// values and pairs in place under the lock, writes take it exclusively. Against it, the
/// backend's store-API side pays for its abstraction only: limit checks, the closed flag,
/// the dynamic calls, and the reference counts that let it lend values with the lock released.
#[derive(Debug, Default)]
pub struct LayoutTarget {
    map: RwLock<BTreeMap<MapKey, Arc<[u8]>>>,
}

impl LayoutTarget {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Target for LayoutTarget {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self
            .map
            .read()
            .get(&MapKey::new(key))
            .map(|value| value.len()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let value = Arc::from(value);
        self.map.write().insert(MapKey::new(key), value);
        Ok(())
    }

    fn write_batch(&self, entries: &[(Key, &[u8])]) -> Result<()> {
        let mut entries: Vec<(MapKey, Arc<[u8]>)> = entries
            .iter()
            .map(|(key, value)| (MapKey::new(key), Arc::from(*value)))
            .collect();
        // In key order, as the backend applies a batch.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut map = self.map.write();
        for (key, value) in entries {
            map.insert(key, value);
        }
        Ok(())
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        let from = MapKey::new(from);
        let map = self.map.read();
        let pairs = map.range::<MapKey, _>((Bound::Included(&from), Bound::Unbounded));
        let mut read = 0;
        for (key, value) in pairs.take(limit) {
            std::hint::black_box((key.as_slice(), &**value));
            read += 1;
        }
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_as_slices() {
        let keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![1; 30], vec![1; 31]];
        for a in &keys {
            for b in &keys {
                assert_eq!(MapKey::new(a).cmp(&MapKey::new(b)), a.cmp(b));
            }
        }
    }
}
