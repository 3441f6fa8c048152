//! A plain `BTreeMap` behind a `parking_lot` reader-writer lock: the native "engine" of the
//! memory backend.

use std::collections::BTreeMap;
use std::ops::Bound;

use parking_lot::RwLock;
use store_api::Result;

use crate::target::{Target, read_bytes};

/// A `BTreeMap<Vec<u8>, Vec<u8>>` in a `RwLock`, with the memory backend's lock discipline:
/// reads share the lock, each write or batch holds it exclusively, a scan holds it shared for
/// the whole (short) scan. Reads look at values and pairs in place, under the lock, as a
/// caller of the map alone would: nothing is cloned.
#[derive(Debug, Default)]
pub struct BTreeTarget {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl BTreeTarget {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Target for BTreeTarget {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.map.read().get(key).map(|value| {
            read_bytes(value);
            value.len()
        }))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.map.write().insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
        let mut map = self.map.write();
        for (key, value) in entries {
            map.insert(key.to_vec(), value.to_vec());
        }
        Ok(())
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        let map = self.map.read();
        let pairs = map.range::<[u8], _>((Bound::Included(from), Bound::Unbounded));
        let mut read = 0;
        for (key, value) in pairs.take(limit) {
            read_bytes(key);
            read_bytes(value);
            read += 1;
        }
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
