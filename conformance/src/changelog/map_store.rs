//! The smallest store a changelog can be restored into: an ordered map behind a mutex. The
//! framing cases restore and log through it, so they test the log, not a backend.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, PoisonError};

use store_api::bounds::range_is_empty;
use store_api::limits::{check_entry, check_key};
use store_api::{BatchOp, Capabilities, KeyValueStore, KvIter, Result, WriteBatch};

/// Key to value.
pub type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// A store holding everything in one [`Map`]; it keeps nothing on disk.
#[derive(Debug, Default)]
pub struct MapStore {
    map: Mutex<Map>,
}

impl MapStore {
    fn with<T>(&self, f: impl FnOnce(&mut Map) -> T) -> T {
        // No method panics while holding the lock, so a poisoned lock still guards a whole map.
        f(&mut self.map.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A copy of the whole content.
    pub fn contents(&self) -> Map {
        self.with(|map| map.clone())
    }

    fn scan(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> KvIter {
        let mut entries: Vec<_> = self.with(|map| {
            if range_is_empty(from, to) {
                return Vec::new();
            }
            let range = map.range::<[u8], _>((from, to));
            range.map(|(k, v)| Ok((k.clone(), v.clone()))).collect()
        });
        if reverse {
            entries.reverse();
        }
        Box::new(entries.into_iter())
    }
}

/// Applies `op` to `map`, as a store applies it.
pub fn apply(map: &mut Map, op: BatchOp) {
    match op {
        BatchOp::Put { key, value } => drop(map.insert(key, value)),
        BatchOp::Delete { key } => drop(map.remove(&key)),
    }
}

impl KeyValueStore for MapStore {
    fn name(&self) -> &str {
        "conformance-map"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_snapshot_iterators(true)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        Ok(self.with(|map| map.get(key).cloned()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.with(|map| drop(map.insert(key.to_vec(), value.to_vec())));
        Ok(())
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_entry(key, value)?;
        Ok(self.with(|map| {
            if let Some(existing) = map.get(key) {
                return Some(existing.clone());
            }
            map.insert(key.to_vec(), value.to_vec());
            None
        }))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.with(|map| drop(map.remove(key)));
        Ok(())
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        batch.validate()?;
        self.with(|map| batch.into_iter().for_each(|op| apply(map, op)));
        Ok(())
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(self.scan(from, to, false))
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(self.scan(from, to, true))
    }

    fn approximate_len(&self) -> Result<u64> {
        Ok(self.with(|map| map.len() as u64))
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn close(&self) -> Result<()> {
        Ok(())
    }
}
