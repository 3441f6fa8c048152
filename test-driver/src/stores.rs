//! Reading a key-value store of the tasks, across their partitions or in one.

use std::cell::Ref;
use std::collections::BTreeMap;
use std::ops::Bound;

use statestore_tasks::{POSITION_KEY, StoreHandle, StoreType};
use store_api::{Error, Result};

use crate::TestDriver;
use crate::driver::Inner;

/// Key-value store `name` of every task that holds it, read as its processor reads it (what
/// the call under way wrote too; between calls, what the tasks committed). The task's own
/// position key ([`POSITION_KEY`]) is left out.
pub struct DriverStore<'d> {
    inner: Ref<'d, Inner>,
    name: String,
}

impl TestDriver {
    /// Key-value store `name`, across the partitions of the tasks that hold it.
    ///
    /// # Errors
    /// `InvalidArgument` when no task holds a key-value store `name`.
    pub fn store(&self, name: &str) -> Result<DriverStore<'_>> {
        let inner = self.inner().borrow();
        if !inner.tasks().any(|task| task.store(name).is_ok()) {
            return Err(Error::invalid(format!(
                "no task holds a key-value store {name:?}"
            )));
        }
        Ok(DriverStore {
            inner,
            name: name.to_owned(),
        })
    }
}

impl TestDriver {
    /// Calls `read` with the store `handle` refers to (any kind: window, session, versioned,
    /// TTL, LRU, typed key-value) in partition `partition`'s task, as its processor sees it.
    ///
    /// # Errors
    /// `InvalidArgument` when no task of `partition` holds the store.
    pub fn with_store<T, R>(
        &self,
        partition: u32,
        handle: &StoreHandle<T>,
        read: impl FnOnce(T::View<'_>) -> R,
    ) -> Result<R>
    where
        T: StoreType + ?Sized,
    {
        let inner = self.inner().borrow();
        let view = inner
            .tasks()
            .filter(|task| task.id().partition == partition)
            .find_map(|task| task.store_of(handle).ok())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "no task of partition {partition} holds store {:?}",
                    handle.name()
                ))
            })?;
        Ok(read(view))
    }
}

impl DriverStore<'_> {
    /// The value of `key` in the first partition that holds it (a key lives in one
    /// partition when the store is keyed as its input).
    ///
    /// # Errors
    /// The store's error.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        for task in self.inner.tasks() {
            if let Ok(store) = task.store(&self.name)
                && let Some(value) = store.get(key)?
            {
                return Ok(Some(value));
            }
        }
        Ok(None)
    }

    /// The value of `key` in partition `partition`'s task.
    ///
    /// # Errors
    /// `InvalidArgument` for a partition without the store; the store's error.
    pub fn get_in(&self, partition: u32, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.partition(partition)?;
        for task in self
            .inner
            .tasks()
            .filter(|task| task.id().partition == partition)
        {
            if let Ok(store) = task.store(&self.name) {
                return store.get(key);
            }
        }
        Ok(None)
    }

    fn partition(&self, partition: u32) -> Result<()> {
        let held = self
            .inner
            .tasks()
            .any(|task| task.id().partition == partition && task.store(&self.name).is_ok());
        if held {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "no task of partition {partition} holds store {:?}",
                self.name
            )))
        }
    }

    /// Every entry of every partition, in key order (a key held in several partitions: the
    /// value of the last).
    ///
    /// # Errors
    /// The store's error.
    pub fn entries(&self) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        let mut entries = BTreeMap::new();
        for partition in self.partitions() {
            entries.extend(self.entries_in(partition)?);
        }
        Ok(entries)
    }

    /// Every entry of partition `partition`'s task, in key order.
    ///
    /// # Errors
    /// `InvalidArgument` for a partition without the store; the store's error.
    pub fn entries_in(&self, partition: u32) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        self.partition(partition)?;
        let mut entries = BTreeMap::new();
        for task in self
            .inner
            .tasks()
            .filter(|task| task.id().partition == partition)
        {
            let Ok(store) = task.store(&self.name) else {
                continue;
            };
            for entry in store.range(Bound::Unbounded, Bound::Unbounded)? {
                let (key, value) = entry?;
                if key != POSITION_KEY {
                    entries.insert(key, value);
                }
            }
        }
        Ok(entries)
    }

    /// The partitions whose tasks hold the store.
    pub fn partitions(&self) -> Vec<u32> {
        let mut partitions: Vec<u32> = self
            .inner
            .tasks()
            .filter(|task| task.store(&self.name).is_ok())
            .map(|task| task.id().partition)
            .collect();
        partitions.dedup();
        partitions
    }
}
