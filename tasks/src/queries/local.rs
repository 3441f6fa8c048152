//! Local reads: one store of this instance's active task for a partition, or of its standby
//! copy (see the `queries` module's docs for what each sees).

use std::ops::Bound;

use store_api::{KeyValueStore, KvIter};

use super::{LocalRead, Queries, QueryError, ReadFrom, ReadSource, Staleness};
use crate::store::{check_key, hide_reserved};

/// Entries read from this instance, in key order (reverse for a reverse range), the reserved
/// keys left out.
pub struct LocalRange {
    /// The entries. Iterated after the read returned, without any lock of the application:
    /// an active task's writes made meanwhile may or may not be seen (the store contract's
    /// iterator consistency), and an entry is `Err(Closed)` when the task or copy closed.
    pub entries: KvIter,
    /// The partition read.
    pub partition: u32,
    /// Whether the active task or a standby copy answered.
    pub source: ReadSource,
}

impl std::fmt::Debug for LocalRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRange")
            .field("partition", &self.partition)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Queries {
    /// As [`get`](Queries::get), in partition `partition`'s task, whatever the key's hash.
    ///
    /// # Errors
    /// As [`get`](Queries::get).
    pub fn get_in_partition(
        &self,
        store: &str,
        partition: u32,
        key: &[u8],
        from: ReadFrom,
    ) -> Result<LocalRead, QueryError> {
        check_key(key)?;
        let (value, source) = self.read(store, partition, from, |kv| kv.get(key))?;
        Ok(LocalRead {
            value,
            partition,
            source,
        })
    }

    /// The entries of store `store` in partition `partition`'s task with keys in the bounds
    /// (the store contract's bounds), in key order, or in reverse order with `reverse`. A
    /// range over every key of an instance reads each of its partitions.
    ///
    /// # Errors
    /// As [`get`](Queries::get).
    pub fn range(
        &self,
        store: &str,
        partition: u32,
        (from, to): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        read_from: ReadFrom,
    ) -> Result<LocalRange, QueryError> {
        let (entries, source) = self.read(store, partition, read_from, |kv| {
            if reverse {
                kv.reverse_range(from, to)
            } else {
                kv.range(from, to)
            }
        })?;
        Ok(LocalRange {
            entries: hide_reserved(entries),
            partition,
            source,
        })
    }

    /// The entries of store `store` in partition `partition`'s task whose keys start with
    /// `prefix`, in key order.
    ///
    /// # Errors
    /// As [`get`](Queries::get).
    pub fn prefix_scan(
        &self,
        store: &str,
        partition: u32,
        prefix: &[u8],
        read_from: ReadFrom,
    ) -> Result<LocalRange, QueryError> {
        let (entries, source) =
            self.read(store, partition, read_from, |kv| kv.prefix_scan(prefix))?;
        Ok(LocalRange {
            entries: hide_reserved(entries),
            partition,
            source,
        })
    }

    /// Runs `read` on store `store` of the active task of `partition` here (under the tasks'
    /// lock), or else, when `from` allows, of its standby copy here (under no lock).
    fn read<T>(
        &self,
        store: &str,
        partition: u32,
        from: ReadFrom,
        read: impl FnOnce(&dyn KeyValueStore) -> store_api::Result<T>,
    ) -> Result<(T, ReadSource), QueryError> {
        let shared = self.shared()?;
        if !shared.config.stores.iter().any(|spec| spec.name == store) {
            return Err(QueryError::UnknownStore(store.to_owned()));
        }
        {
            let tasks = shared.tasks.lock();
            if let Some(task) = tasks.get(&partition) {
                let slot = task.slots.iter().find(|slot| slot.name == store);
                let slot = slot.ok_or_else(|| QueryError::UnknownStore(store.to_owned()))?;
                return Ok((read(slot.open.kv.as_ref())?, ReadSource::Active));
            }
        }
        let not_local = QueryError::NotLocal { partition };
        if from == ReadFrom::Active {
            return Err(not_local);
        }
        let view = shared.queries.standbys.lock().get(&partition).cloned();
        let Some(view) = view else {
            return Err(not_local);
        };
        let Some((_, copy, behind)) = view.stores.iter().find(|(name, _, _)| name == store) else {
            return Err(QueryError::UnknownStore(store.to_owned()));
        };
        let value = match read(copy.as_ref()) {
            // Closed by the poll loop meanwhile: no longer wanted here, or promoted.
            Err(store_api::Error::Closed) => return Err(not_local),
            other => other?,
        };
        let staleness = Staleness {
            caught_up: view.caught_up,
            offsets_behind: *behind,
        };
        Ok((value, ReadSource::Standby(staleness)))
    }
}
