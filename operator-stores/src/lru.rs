//! [`LruStore`]: a store bounded to a number of entries, evicting the least recently used
//! (Kafka Streams' `MemoryLRUCache`, the `lruMap` store supplier).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use store_api::limits::check_key;
use store_api::{BatchOp, Capabilities, Error, KeyValueStore, KvIter, Result, WriteBatch};

/// A [`KeyValueStore`] that holds at most `capacity` entries: a write that would exceed it
/// also deletes the least recently used entries. A `get` that finds its key, a `put` and a
/// `put_if_absent` count as uses; scans do not (a scan would otherwise reorder everything).
///
/// # Layout, costs, eviction and logging
/// The entries live in the wrapped store, under their own keys, unchanged: ranges and prefix
/// scans are the wrapped store's, with their costs. Recency lives beside it, in memory: a hash
/// map and an ordered map of use ticks, so a `get`, `put` or eviction adds O(log n) work and
/// about two copies of each key in memory. Every write and the evictions it causes reach the
/// wrapped store as **one** `WriteBatch` (the write, then a delete per evicted key), so the
/// bound holds at every moment and is atomic with the write. Eviction by count is the only
/// expiry: nothing leaves by age.
///
/// For the in-memory LRU store of Kafka Streams, wrap a `MemoryStore`; to make it durable,
/// wrap a `LoggedStore` over one: evictions are then ordinary deletes in the changelog, in the
/// same commit as the write that caused them, and a restored store holds exactly the entries
/// that were not evicted. (An eviction hook inside the wrapped store would instead delete
/// entries at commit time, after the changelog append, so the log would not know them.)
///
/// Recency is not persisted: opening over a store that already holds entries (a restored
/// changelog, a persistent backend) treats them as used in ascending key order, the first key
/// the least recently used, and evicts from the start if they exceed the capacity. Writes that
/// bypass this wrapper and go to the wrapped store directly are not tracked.
///
/// ```
/// use std::sync::Arc;
/// use statestore_memory::{Config, MemoryStore};
/// use statestore_operator_stores::LruStore;
/// use store_api::KeyValueStore;
///
/// let cache = LruStore::new(Arc::new(MemoryStore::new(Config::default())), 2)?;
/// cache.put(b"a", b"1")?;
/// cache.put(b"b", b"2")?;
/// cache.get(b"a")?; // "a" is now more recently used than "b"
/// cache.put(b"c", b"3")?; // evicts "b"
/// assert_eq!(cache.get(b"b")?, None);
/// assert_eq!(cache.approximate_len()?, 2);
/// # Ok::<(), store_api::Error>(())
/// ```
pub struct LruStore {
    inner: Arc<dyn KeyValueStore>,
    capacity: usize,
    /// Held across every write to the wrapped store, so recency and contents change together.
    recency: Mutex<Recency>,
    closed: AtomicBool,
}

/// Which keys the store holds and when each was last used.
#[derive(Default)]
struct Recency {
    next_tick: u64,
    by_key: HashMap<Arc<[u8]>, u64>,
    by_tick: BTreeMap<u64, Arc<[u8]>>,
}

impl Recency {
    /// Marks `key` used now; returns the tick it had, or `None` if it was absent.
    fn touch(&mut self, key: &[u8]) -> Option<u64> {
        let tick = self.next_tick;
        self.next_tick += 1;
        let (key, previous) = match self.by_key.get_key_value(key) {
            Some((key, &previous)) => (Arc::clone(key), Some(previous)),
            None => (Arc::<[u8]>::from(key), None),
        };
        if let Some(previous) = previous {
            self.by_tick.remove(&previous);
        }
        self.by_key.insert(Arc::clone(&key), tick);
        self.by_tick.insert(tick, key);
        previous
    }

    /// Forgets `key`; returns the tick it had.
    fn remove(&mut self, key: &[u8]) -> Option<u64> {
        let tick = self.by_key.remove(key)?;
        self.by_tick.remove(&tick);
        Some(tick)
    }

    /// Puts `key` back as it was before a failed write: at `tick`, or absent.
    fn restore(&mut self, key: &[u8], tick: Option<u64>) {
        self.remove(key);
        if let Some(tick) = tick {
            let key = Arc::<[u8]>::from(key);
            self.by_key.insert(Arc::clone(&key), tick);
            self.by_tick.insert(tick, key);
        }
    }

    /// Forgets the least recently used key and returns it with its tick.
    fn pop_oldest(&mut self) -> Option<(Arc<[u8]>, u64)> {
        let (tick, key) = self.by_tick.pop_first()?;
        self.by_key.remove(&key);
        Some((key, tick))
    }

    fn len(&self) -> usize {
        self.by_key.len()
    }
}

impl LruStore {
    /// Bounds `inner` to `capacity` entries. Entries it already holds are taken as used in
    /// ascending key order; those beyond the capacity are evicted now, first keys first.
    ///
    /// # Errors
    /// `InvalidArgument` for a capacity of 0; the wrapped store's errors while scanning or
    /// evicting.
    pub fn new(inner: Arc<dyn KeyValueStore>, capacity: usize) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::invalid(
                "an LRU store needs a capacity of at least 1",
            ));
        }
        let mut recency = Recency::default();
        for entry in inner.range(Bound::Unbounded, Bound::Unbounded)? {
            let (key, _) = entry?;
            recency.touch(&key);
        }
        let store = LruStore {
            inner,
            capacity,
            recency: Mutex::new(recency),
            closed: AtomicBool::new(false),
        };
        store.apply(WriteBatch::new())?;
        Ok(store)
    }

    /// The maximum number of entries.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.inner
    }

    /// Writes `batch`, then deletes least recently used keys until at most `capacity` remain,
    /// all as one batch of the wrapped store. Recency changes only if that batch succeeds.
    fn apply(&self, batch: WriteBatch) -> Result<()> {
        self.check_open()?;
        batch.validate()?;
        self.apply_locked(&mut self.recency.lock(), batch)
    }

    /// As [`apply`](Self::apply), under the recency lock the caller holds.
    fn apply_locked(&self, recency: &mut Recency, batch: WriteBatch) -> Result<()> {
        // Each key's tick before this write, to undo the changes if the store refuses it.
        let mut undo: Vec<(Vec<u8>, Option<u64>)> = Vec::new();
        for op in batch.ops() {
            let previous = match op {
                BatchOp::Put { key, .. } => recency.touch(key),
                BatchOp::Delete { key } => recency.remove(key),
            };
            undo.push((op.key().to_vec(), previous));
        }
        let mut batch = batch;
        while recency.len() > self.capacity {
            let Some((evicted, tick)) = recency.pop_oldest() else {
                break;
            };
            batch.delete(evicted.to_vec());
            undo.push((evicted.to_vec(), Some(tick)));
        }
        if batch.is_empty() {
            return Ok(());
        }
        if let Err(err) = self.inner.write(batch) {
            for (key, tick) in undo.into_iter().rev() {
                recency.restore(&key, tick);
            }
            return Err(err);
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

impl KeyValueStore for LruStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        let value = self.inner.get(key)?;
        if value.is_some() {
            let mut recency = self.recency.lock();
            // A key deleted since the read is not brought back.
            if recency.by_key.contains_key(key) {
                recency.touch(key);
            }
        }
        Ok(value)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::with_capacity(2);
        batch.put(key, value);
        self.apply(batch)
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        store_api::limits::check_entry(key, value)?;
        // The lock is held from the lookup to the write, so no other write slips in between.
        let mut recency = self.recency.lock();
        if recency.by_key.contains_key(key)
            && let Some(existing) = self.inner.get(key)?
        {
            recency.touch(key);
            return Ok(Some(existing));
        }
        let mut batch = WriteBatch::with_capacity(2);
        batch.put(key, value);
        self.apply_locked(&mut recency, batch)?;
        Ok(None)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        let mut batch = WriteBatch::with_capacity(1);
        batch.delete(key);
        self.apply(batch)
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return self.check_open();
        }
        self.apply(batch)
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.check_open()?;
        self.inner.range(from, to)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.check_open()?;
        self.inner.reverse_range(from, to)
    }

    /// Exact: the number of keys tracked.
    fn approximate_len(&self) -> Result<u64> {
        self.check_open()?;
        Ok(self.recency.lock().len() as u64)
    }

    fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.inner.flush()
    }

    /// Closes the wrapped store; if that fails, this store stays open, so the caller can retry.
    fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.inner.close()?;
        self.closed.store(true, Ordering::Release);
        Ok(())
    }
}

impl fmt::Debug for LruStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LruStore")
            .field("inner", &self.inner)
            .field("capacity", &self.capacity)
            .field("len", &self.recency.lock().len())
            .finish_non_exhaustive()
    }
}
