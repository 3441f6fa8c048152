//! One memory budget shared by many stores of a process: a block cache and a write-buffer
//! manager charged to it (Kafka Streams' `BoundedMemoryRocksDBConfig`, as configuration).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rocksdb::{Cache, WriteBufferManager};
use serde::{Deserialize, Serialize};
use store_api::{Error, Result};

/// A memory budget that every RocksDB store naming it shares: one LRU block cache of
/// `total_bytes`, whose capacity also pays for the memtables of every sharing store (through
/// one write-buffer manager of `total_bytes * write_buffer_ratio`), and for their index and
/// filter blocks. So the memory of the block caches and memtables of all those stores stays
/// about `total_bytes` however many tasks the instance runs, where each store otherwise
/// has its own cache and memtables (50 MiB + up to 3 x 16 MiB by default).
///
/// Stores share a budget when their configurations give the same `name`; the first store to
/// open it sets its sizes, and a store that names a live budget with other sizes is refused.
/// The budget lives while a store uses it. Per-store options (`write_buffer_size`,
/// `max_write_buffer_number`, compression, bloom filter) still apply to each store;
/// `block_cache_size` is ignored, the budget's cache replacing the store's own.
///
/// ```
/// use statestore_rocksdb::{Config, MemoryBudget};
/// let config: Config = serde_json::from_value(serde_json::json!({
///     "memory_budget": { "total_bytes": 268435456 },
/// }))?;
/// assert_eq!(config.memory_budget.map(|budget| budget.name), Some("instance".to_string()));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryBudget {
    /// Stores naming the same budget share it. Default `"instance"`.
    pub name: String,
    /// Bytes of block cache, memtables, index and filter blocks together, for every store
    /// sharing the budget. Default 256 MiB.
    pub total_bytes: usize,
    /// The share of `total_bytes` memtables may take before the write-buffer manager flushes
    /// the largest, in `(0, 1]`. Default 0.5.
    pub write_buffer_ratio: f64,
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget {
            name: "instance".into(),
            total_bytes: 256 << 20,
            write_buffer_ratio: 0.5,
        }
    }
}

impl MemoryBudget {
    /// Checks the options.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name, a total under 1 MiB, or a ratio outside `(0, 1]`.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(Error::invalid("rocksdb option memory_budget.name is empty"));
        }
        if self.total_bytes < 1 << 20 {
            return Err(Error::invalid(format!(
                "rocksdb option memory_budget.total_bytes must be at least 1 MiB, got {}",
                self.total_bytes
            )));
        }
        if !(self.write_buffer_ratio > 0.0 && self.write_buffer_ratio <= 1.0) {
            return Err(Error::invalid(format!(
                "rocksdb option memory_budget.write_buffer_ratio must be in (0, 1], got {}",
                self.write_buffer_ratio
            )));
        }
        Ok(())
    }

    fn write_buffer_bytes(&self) -> usize {
        // In (0, 1] of a size: fits a usize, at least 1 byte.
        ((self.total_bytes as f64 * self.write_buffer_ratio) as usize).max(1)
    }
}

/// The cache and write-buffer manager of a live budget.
pub(crate) struct SharedMemory {
    pub(crate) budget: MemoryBudget,
    pub(crate) cache: Cache,
    pub(crate) write_buffers: WriteBufferManager,
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// The live budgets of the process, by name.
static BUDGETS: Mutex<Option<HashMap<String, Weak<SharedMemory>>>> = Mutex::new(None);

/// The live budget `budget` names, or a new one.
///
/// # Errors
/// `InvalidArgument` for bad options, or when a live budget of that name has other sizes.
pub(crate) fn shared(budget: &MemoryBudget) -> Result<Arc<SharedMemory>> {
    budget.validate()?;
    let mut budgets = BUDGETS.lock().unwrap_or_else(PoisonError::into_inner);
    let budgets = budgets.get_or_insert_with(HashMap::new);
    budgets.retain(|_, live| live.strong_count() > 0);
    if let Some(live) = budgets.get(&budget.name).and_then(Weak::upgrade) {
        if live.budget != *budget {
            return Err(Error::invalid(format!(
                "rocksdb memory budget {:?} is open with {:?}; a store asked for {:?}",
                budget.name, live.budget, budget
            )));
        }
        return Ok(live);
    }
    let cache = Cache::new_lru_cache(budget.total_bytes);
    let write_buffers = WriteBufferManager::new_write_buffer_manager_with_cache(
        budget.write_buffer_bytes(),
        false,
        cache.clone(),
    );
    let shared = Arc::new(SharedMemory {
        budget: budget.clone(),
        cache,
        write_buffers,
    });
    budgets.insert(budget.name.clone(), Arc::downgrade(&shared));
    Ok(shared)
}

/// What a budget holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetUsage {
    /// Bytes charged to the shared block cache: data, index and filter blocks, and the
    /// memtables' reservations.
    pub cache_bytes: usize,
    /// Bytes of memtables of every sharing store.
    pub write_buffer_bytes: usize,
    /// The budget's total.
    pub total_bytes: usize,
}

impl SharedMemory {
    pub(crate) fn usage(&self) -> BudgetUsage {
        BudgetUsage {
            cache_bytes: self.cache.get_usage(),
            write_buffer_bytes: self.write_buffers.get_usage(),
            total_bytes: self.budget.total_bytes,
        }
    }
}
