//! Standby replicas: warm copies of other instances' tasks, kept by tailing their changelogs.
//!
//! # Placement
//! Every instance reads the group's members and their partitions (see the `members` module:
//! reported by Kafka, computed from the member ids with the eager assignors where the coordinator reports only those),
//! and, for each task, picks the `num_standby_replicas` members that follow the task's active
//! owner in member-id order, wrapping around and skipping the owner. Every instance computes
//! the same answer from the same list, so no extra protocol is needed, and a standby is never
//! placed on the active owner while another member exists.
//!
//! Limits: the list is read every second, so right after a rebalance a standby may briefly be
//! missing or duplicated; while the group rebalances the copies are left as they are. With
//! `cooperative-sticky` on a coordinator that does not report assignments no
//! standby is placed. The copy costs disk and changelog reads on the standby, nothing on the
//! owner.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use statestore_changelog::{
    Changelog, KafkaClients, KafkaLog, RestoreListener, StateDirectory, TaskDirectory, TaskId,
    restore,
};
use store_api::{KeyValueStore, Result};

use crate::config::TasksConfig;
use crate::queries::StandbyView;

/// A standby copy of one task: its logged stores, kept up to date by replaying their
/// changelogs.
pub(crate) struct Standby {
    pub id: TaskId,
    stores: Vec<CopiedStore>,
    /// Records replayed since the copy was opened.
    pub replayed: u64,
    /// When the last catch-up ended, and each store's changelog offsets past the last commit
    /// it applied then (records appended meanwhile, commit markers, a commit in progress).
    caught_up: Option<(SystemTime, Vec<u64>)>,
    dir: TaskDirectory,
}

/// One logged store of a standby copy: its name, the store, its changelog and the records
/// replayed per batch.
struct CopiedStore {
    name: String,
    store: Arc<dyn KeyValueStore>,
    log: KafkaLog,
    batch: usize,
}

impl Standby {
    /// Opens the stores of task `id` without restoring them yet.
    pub fn open(
        state: &StateDirectory,
        config: &TasksConfig,
        clients: &KafkaClients,
        id: TaskId,
        partitions: u32,
    ) -> Result<Standby> {
        let dir = state.task(id)?;
        let mut stores = Vec::with_capacity(config.stores.len());
        // A store that is not logged has no changelog to copy.
        for spec in config.stores.iter().filter(|spec| spec.logging) {
            let factory = statestore::resolve(&spec.backend)?;
            let (store, _) = dir.open_logged_store(factory, &spec.name, &spec.options)?;
            // Read only: a standby opens no producer.
            let log = clients.open(config.changelog_config(spec, partitions), id.partition)?;
            stores.push(CopiedStore {
                name: spec.name.clone(),
                store,
                log,
                batch: spec.logged.restore_batch_records,
            });
        }
        Ok(Standby {
            id,
            stores,
            replayed: 0,
            caught_up: None,
            dir,
        })
    }

    /// Replays what the changelogs gained since the last call (the first call restores from
    /// the task's checkpoint) and checkpoints it.
    pub fn catch_up(&mut self, listener: &mut dyn RestoreListener) -> Result<u64> {
        let mut records = 0;
        let mut behind = Vec::with_capacity(self.stores.len());
        for copied in &self.stores {
            let (store, log) = (copied.store.as_ref(), &copied.log);
            let outcome = restore(store, log, self.dir.checkpoint(), copied.batch, listener)?;
            records += outcome.records;
            // One more request per store and second; it is what a query's staleness says.
            let applied_up_to = outcome.checkpoint.map_or(outcome.from, |last| last + 1);
            behind.push(log.end_offset()?.saturating_sub(applied_up_to));
        }
        self.replayed += records;
        self.caught_up = Some((SystemTime::now(), behind));
        Ok(records)
    }

    /// Read handles to the stores for queries, by name, once the copy has caught up at least
    /// once. An unlogged store has none: it is not copied.
    pub fn view(&self) -> Option<StandbyView> {
        let (caught_up, behind) = self.caught_up.as_ref()?;
        let stores = self
            .stores
            .iter()
            .zip(behind)
            .map(|(copied, &behind)| (copied.name.clone(), Arc::clone(&copied.store), behind))
            .collect();
        Some(StandbyView {
            stores,
            caught_up: *caught_up,
        })
    }

    /// Flushes and closes the stores, keeping their files.
    pub fn close(self) -> Result<()> {
        for copied in &self.stores {
            copied.store.close()?;
        }
        Ok(())
    }
}

/// Standby copies by partition.
pub(crate) type Standbys = BTreeMap<u32, Standby>;
