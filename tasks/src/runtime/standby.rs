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
//!
//! # Who touches a copy
//! The standby thread (see `app::standbys`) opens the copies and catches them up, off the
//! poll loop. Each copy sits in a [`StandbySlot`] whose lock is held while the copy opens,
//! catches up or retires (its stores closed, for good); the map of slots is locked only to
//! insert, remove or clone slots. A copy's files are open only while its slot is in the map:
//! the standby thread retires a copy it drops (no longer wanted, or failed) before taking
//! its slot out, and a restore thread about to restore the copy's task here takes the slot
//! out and retires it, waiting for an open or catch-up in flight, before it opens the task's
//! stores. A retired slot is never opened or published again, and the standby thread adds no
//! slot for a task restoring or active here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

use statestore_changelog::{
    Changelog, KafkaClients, KafkaLog, RestoreListener, StateDirectory, TaskDirectory, TaskId,
    restore,
};
use store_api::{KeyValueStore, Result};

use crate::config::TasksConfig;
use crate::queries::{QueryState, StandbyView};

/// A standby copy of one task: its logged stores, kept up to date by replaying their
/// changelogs.
pub(crate) struct Standby {
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
        let shape = config
            .task_shapes()
            .into_iter()
            .find(|shape| shape.id == id.subtopology)
            .ok_or_else(|| store_api::Error::invalid(format!("task {id}: no such sub-topology")))?;
        let mut stores = Vec::with_capacity(shape.stores.len());
        // A store that is not logged has no changelog to copy.
        for spec in shape.stores.iter().filter(|spec| spec.logging) {
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

/// Standby copies by task.
pub(crate) type Standbys = BTreeMap<TaskId, Arc<StandbySlot>>;

/// The place of one standby copy: opened, caught up and retired under its lock (see "Who
/// touches a copy" above).
pub(crate) struct StandbySlot {
    id: TaskId,
    state: Mutex<SlotState>,
}

/// Where a standby copy is in its life.
enum SlotState {
    /// Placed here, not opened yet.
    New,
    Open(Standby),
    /// Promoted, no longer wanted, failed or closed: its stores are closed for good.
    Retired,
}

impl StandbySlot {
    /// A slot for a copy of task `id`, to be opened by its first catch-up.
    pub fn new(id: TaskId) -> Arc<StandbySlot> {
        Arc::new(StandbySlot {
            id,
            state: Mutex::new(SlotState::New),
        })
    }

    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Opens the copy with `open` if it is new, replays what its changelogs gained since the
    /// last catch-up and publishes its read handles to `queries`; the slot stays locked
    /// throughout. Returns the records replayed, or `None` for a retired slot, which is left
    /// alone.
    ///
    /// # Errors
    /// The failure of `open` or of the catch-up: the copy is then still open (or new), for
    /// its owner to retire.
    pub fn catch_up(
        &self,
        open: impl FnOnce() -> Result<Standby>,
        listener: &mut dyn RestoreListener,
        queries: &QueryState,
    ) -> Result<Option<u64>> {
        let mut state = self.state.lock();
        if matches!(*state, SlotState::New) {
            *state = SlotState::Open(open()?);
            tracing::info!(task = %self.id, "standby opened");
        }
        let SlotState::Open(standby) = &mut *state else {
            return Ok(None);
        };
        let records = standby.catch_up(listener)?;
        if let Some(view) = standby.view() {
            queries.standbys.lock().insert(self.id, view);
        }
        Ok(Some(records))
    }

    /// Retires the copy: waits for an open or catch-up in flight, drops its read handles
    /// from `queries` and closes its stores, keeping their files. Returns the records it
    /// replayed since it opened (0 when it never opened or was retired already).
    ///
    /// # Errors
    /// A store that failed to close; the copy is retired regardless.
    pub fn retire(&self, queries: &QueryState) -> Result<u64> {
        let mut state = self.state.lock();
        queries.forget_standby(self.id);
        match std::mem::replace(&mut *state, SlotState::Retired) {
            SlotState::Open(standby) => {
                let replayed = standby.replayed;
                standby.close().map(|()| replayed)
            }
            SlotState::New | SlotState::Retired => Ok(0),
        }
    }
}
