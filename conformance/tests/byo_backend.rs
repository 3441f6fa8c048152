//! A third-party backend in one file: an ordered map behind a mutex, and the one line that
//! runs the conformance suite on it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use store_api::bounds::range_is_empty;
use store_api::limits::{check_entry, check_key};
use store_api::{BatchOp, Capabilities, Error, KeyValueStore, KvIter, Result, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// The whole store in one ordered map; `None` once closed.
#[derive(Debug)]
pub struct MapStore {
    map: Mutex<Option<Map>>,
}

impl Default for MapStore {
    /// An empty, open store.
    fn default() -> Self {
        MapStore {
            map: Mutex::new(Some(Map::new())),
        }
    }
}

impl MapStore {
    /// Runs `f` on the map, or fails with `Closed`.
    fn with<T>(&self, f: impl FnOnce(&mut Map) -> T) -> Result<T> {
        // No method panics while holding the lock, so a poisoned lock still guards a whole map.
        let mut guard = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_mut().map(f).ok_or(Error::Closed)
    }

    /// Copies the range out under the lock: a snapshot, so the store declares snapshot
    /// iterators.
    fn scan(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        let mut entries: Vec<_> = self.with(|map| {
            if range_is_empty(from, to) {
                return Vec::new(); // BTreeMap::range would panic on it.
            }
            let range = map.range::<[u8], _>((from, to));
            range.map(|(k, v)| Ok((k.clone(), v.clone()))).collect()
        })?;
        if reverse {
            entries.reverse();
        }
        Ok(Box::new(entries.into_iter()))
    }
}

impl KeyValueStore for MapStore {
    fn name(&self) -> &str {
        "map"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_snapshot_iterators(true)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.with(|map| map.get(key).cloned())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.with(|map| drop(map.insert(key.to_vec(), value.to_vec())))
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_entry(key, value)?;
        self.with(|map| {
            if let Some(existing) = map.get(key) {
                return Some(existing.clone());
            }
            map.insert(key.to_vec(), value.to_vec());
            None
        })
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.with(|map| drop(map.remove(key)))
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        batch.validate()?; // Before taking the lock: a rejected batch writes nothing.
        self.with(|map| {
            for op in batch {
                match op {
                    BatchOp::Put { key, value } => drop(map.insert(key, value)),
                    BatchOp::Delete { key } => drop(map.remove(&key)),
                }
            }
        })
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.scan(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.scan(from, to, true)
    }

    fn approximate_len(&self) -> Result<u64> {
        self.with(|map| map.len() as u64)
    }

    fn flush(&self) -> Result<()> {
        self.with(|_| ()) // Nothing to make durable, but a closed store still says so.
    }

    fn close(&self) -> Result<()> {
        *self.map.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    }
}

/// The factory the suite calls: this store keeps nothing in `dir`.
pub fn open_map_store(_dir: &Path) -> Result<Box<dyn KeyValueStore>> {
    Ok(Box::new(MapStore::default()))
}

statestore_conformance::store_suite!(open_map_store);
