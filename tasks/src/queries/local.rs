//! Local reads: one store of this instance's active task for a partition, or of its standby
//! copy (see the `queries` module's docs for what each sees).

use std::ops::Bound;
use std::sync::Arc;

use store_api::{KeyValueStore, KvIter};

use super::{LocalRead, Queries, QueryError, ReadFrom, ReadSource, Staleness};
use crate::config::StoreKind;
use crate::state::kv::{Backing, TaskKv};
use crate::state::position::{check_key, hide_reserved};
use crate::state::stores::{OpenStore, StoreHandle, StoreType, StoreView};

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

    /// Runs `query` on the store `handle` names in partition `partition`'s task here, opened
    /// as its declared kind: a window store's `fetch`, a session store's `find_sessions`, a
    /// versioned store's `get_as_of`, a typed store's `range`. On the active task it runs
    /// under the tasks' lock (keep it short: the task does not process meanwhile) and sees
    /// every write; on a standby copy (when `from` allows) it runs on the copy as of its last
    /// catch-up, opened as its kind for this call, and anything the query writes is dropped.
    ///
    /// # Errors
    /// As [`get`](Queries::get); [`QueryError::UnknownStore`] for a handle made from another
    /// configuration.
    pub fn query<T, R>(
        &self,
        handle: &StoreHandle<T>,
        partition: u32,
        from: ReadFrom,
        query: impl FnOnce(T::View<'_>) -> store_api::Result<R>,
    ) -> Result<(R, ReadSource), QueryError>
    where
        T: StoreType + ?Sized,
    {
        let shared = self.shared()?;
        let unknown = || QueryError::UnknownStore(handle.name().to_owned());
        let spec = shared
            .config
            .stores
            .get(handle.index)
            .filter(|spec| spec.name == handle.name());
        let spec = spec.ok_or_else(unknown)?;
        {
            let tasks = shared.tasks.lock();
            if let Some(task) = shared.task_holding(&tasks, handle.name(), partition) {
                let slot = task
                    .slot_of(handle.index, handle.name())
                    .ok_or_else(unknown)?;
                let view = T::view(&slot.open).ok_or_else(unknown)?;
                return Ok((query(view)?, ReadSource::Active));
            }
        }
        let not_local = QueryError::NotLocal { partition };
        if from == ReadFrom::Active {
            return Err(not_local);
        }
        let copy = shared.standby_holding(handle.name(), partition);
        let Some(copy) = copy else {
            return Err(not_local);
        };
        let Some((_, store, behind)) = copy.stores.iter().find(|(name, _, _)| name == &spec.name)
        else {
            // An unlogged store has no standby copy: only its active task answers.
            return Err(not_local);
        };
        // Read only: the copy's writes come from its changelog alone.
        let kv = Arc::new(TaskKv::new(
            spec.name.clone(),
            Backing::Local(Arc::clone(store)),
        ));
        kv.set_replaying(true);
        let open = match StoreView::open(&kv, &spec.kind) {
            Err(store_api::Error::Closed) => return Err(not_local),
            other => OpenStore { view: other?, kv },
        };
        let value = match T::view(&open).map(query) {
            None => return Err(unknown()),
            Some(Err(store_api::Error::Closed)) => return Err(not_local),
            Some(other) => other?,
        };
        let staleness = Staleness {
            caught_up: copy.caught_up,
            offsets_behind: *behind,
        };
        Ok((value, ReadSource::Standby(staleness)))
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
            if let Some(task) = shared.task_holding(&tasks, store, partition) {
                let slot = task.slots.iter().find(|slot| slot.name == store);
                let slot = slot.ok_or_else(|| QueryError::UnknownStore(store.to_owned()))?;
                let value = match &slot.open.view {
                    // Through the TTL store: its values without their envelope, never an
                    // expired entry.
                    StoreView::Ttl(ttl) => read(ttl.as_ref())?,
                    _ => read(slot.open.kv.as_ref())?,
                };
                return Ok((value, ReadSource::Active));
            }
        }
        let not_local = QueryError::NotLocal { partition };
        if from == ReadFrom::Active {
            return Err(not_local);
        }
        let view = shared.standby_holding(store, partition);
        let Some(view) = view else {
            return Err(not_local);
        };
        let Some((_, copy, behind)) = view.stores.iter().find(|(name, _, _)| name == store) else {
            // An unlogged store has no standby copy: only its active task answers.
            return Err(not_local);
        };
        let spec = shared.config.stores.iter().find(|spec| spec.name == store);
        let read = match spec.map(|spec| &spec.kind) {
            Some(kind @ StoreKind::Ttl { .. }) => {
                // Read only, as the TTL store it is: the copy's writes come from its changelog.
                let kv = Arc::new(TaskKv::new(
                    store.to_owned(),
                    Backing::Local(Arc::clone(copy)),
                ));
                kv.set_replaying(true);
                match StoreView::open(&kv, kind) {
                    Ok(StoreView::Ttl(ttl)) => read(ttl.as_ref()),
                    Ok(_) => read(copy.as_ref()),
                    Err(err) => Err(err),
                }
            }
            _ => read(copy.as_ref()),
        };
        let value = match read {
            // Closed meanwhile: no longer wanted here, failed, or promoted.
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
