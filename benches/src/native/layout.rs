//! The memory backend's map, used directly: the native side of memory's abstraction pair.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::RwLock;
use statestore::memory::key::Key as MapKey;
use store_api::Result;

use crate::target::{Target, read_bytes};

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
        Ok(self.map.read().get(&MapKey::from(key)).map(|value| {
            read_bytes(value);
            value.len()
        }))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let value = Arc::from(value);
        self.map.write().insert(MapKey::from(key), value);
        Ok(())
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
        let mut entries: Vec<(MapKey, Arc<[u8]>)> = entries
            .iter()
            .map(|(key, value)| (MapKey::from(*key), Arc::from(*value)))
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
        let from = MapKey::from(from);
        let map = self.map.read();
        let pairs = map.range::<MapKey, _>((Bound::Included(&from), Bound::Unbounded));
        let mut read = 0;
        for (key, value) in pairs.take(limit) {
            read_bytes(key.as_slice());
            read_bytes(value);
            read += 1;
        }
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
