//! The standby thread: keeps the standby copies this instance should hold (see the `standby`
//! module) and the group's description for queries, off the poll loop, as Kafka Streams'
//! state updater does. A copy's first catch-up is a full restore of its task, which may take
//! minutes; on the poll loop it would hold the poll past `max.poll.interval.ms` (the
//! instance leaves the group) and stall every task meanwhile.
//!
//! Every [`GROUP_CHECK_INTERVAL`] the thread describes the group, publishes its members for
//! queries, places the copies (new slots for the tasks wanted here, the unwanted ones
//! retired) and catches each copy up, publishing its read handles. A describe that fails
//! doubles the wait before the next one, up to [`MAX_DESCRIBE_BACKOFF`]. A copy that fails to
//! open or catch up is logged, closed and dropped, and opened again at a later check: a
//! standby is an optimisation, and its failures never reach the instance.
//!
//! Limit: a catch-up is not interrupted. Closing the application, and a restore thread about
//! to restore the task of a copy being caught up, wait for that catch-up to end.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;

use crate::group::members::{self, standby_tasks};
use crate::runtime::shared::Locked;
use crate::runtime::standby::{Standby, StandbySlot};

use super::*;

/// How often the group's assignment is read: standby copies follow it and catch up with their
/// changelogs, and queries see the group's members.
pub(super) const GROUP_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The longest the group-list request is left alone after it failed: a coordinator that cannot
/// describe groups may also close the connection, which the group's heartbeats share.
const MAX_DESCRIBE_BACKOFF: Duration = Duration::from_secs(60);

/// The running standby thread; [`stop`](StandbyThread::stop) ends and joins it.
pub(super) struct StandbyThread {
    /// Dropped to stop the thread: its waits end at once.
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

impl StandbyThread {
    /// Starts the thread, which describes the group with `consumer` (its own requests, never
    /// a poll).
    ///
    /// # Errors
    /// `Io` when the thread cannot be started.
    pub fn start(
        consumer: Arc<BaseConsumer<GroupContext>>,
        shared: Arc<Shared>,
    ) -> Result<StandbyThread> {
        let (stop, stopped) = mpsc::channel();
        let updater = Updater {
            consumer,
            shared,
            stopped,
            backoff: GROUP_CHECK_INTERVAL,
        };
        let handle = std::thread::Builder::new()
            .name("statestore-standbys".into())
            .spawn(move || updater.run())
            .map_err(|err| Error::io("starting the standby thread", err))?;
        Ok(StandbyThread { stop, handle })
    }

    /// Stops the thread and waits for it: a catch-up in flight ends first (the copies stay
    /// open, for the application's close to retire).
    pub fn stop(self) {
        drop(self.stop);
        if self.handle.join().is_err() {
            tracing::error!("the standby thread panicked");
        }
    }
}

/// What the standby thread owns.
struct Updater {
    consumer: Arc<BaseConsumer<GroupContext>>,
    shared: Arc<Shared>,
    /// Disconnected when the thread is to stop.
    stopped: Receiver<()>,
    /// The wait before the next check, doubled after each failed describe.
    backoff: Duration,
}

impl Updater {
    fn run(mut self) {
        while self.wait() {
            // A panic in a backend during a catch-up costs that check only.
            if catch_unwind(AssertUnwindSafe(|| self.check())).is_err() {
                tracing::error!("a standby check panicked; checking again later");
            }
        }
    }

    /// Waits for the next check; false once the thread is to stop.
    fn wait(&self) -> bool {
        matches!(
            self.stopped.recv_timeout(self.backoff),
            Err(RecvTimeoutError::Timeout)
        )
    }

    fn stopping(&self) -> bool {
        !matches!(self.stopped.try_recv(), Err(TryRecvError::Empty))
    }

    /// Describes the group (see the `members` module), publishes it for queries, places the
    /// copies and catches each up.
    fn check(&mut self) {
        let shared = &self.shared;
        let rebalances = shared.rebalances.load(Ordering::Relaxed);
        let view = match members::describe(
            &self.consumer,
            &shared.config.application_id,
            // Co-partitioned under the range assignor: every input topic is split alike.
            &shared.inputs[0],
            shared.partitions,
            shared.config.assignment_strategy,
            shared.config.request_timeout(),
        ) {
            Ok(view) => {
                self.backoff = GROUP_CHECK_INTERVAL;
                view
            }
            Err(err) => {
                // Standbys are an optimisation: without the member list, keep what there is.
                self.backoff = (self.backoff * 2).min(MAX_DESCRIBE_BACKOFF);
                tracing::warn!(%err, retry_in = ?self.backoff, "describing the consumer group failed; standbys unchanged");
                return;
            }
        };
        let replicas = shared.config.num_standby_replicas;
        shared
            .queries
            .publish(view.as_ref(), rebalances, &shared.client_id, replicas);
        let Some(view) = view else {
            // Mid-rebalance the assignment is in flux: keep the copies as they are.
            return;
        };
        let wanted: BTreeSet<TaskId> = standby_tasks(&view.members, &shared.client_id, replicas)
            .into_iter()
            .flat_map(|partition| shared.tasks_of_partition(partition))
            .filter(|&id| shared.logs_state(id))
            .collect();
        for slot in self.place(&wanted) {
            if self.stopping() {
                return;
            }
            self.catch_up(&slot);
        }
    }

    /// Retires the copies no longer wanted here, adds a slot for each wanted task that is
    /// neither active nor restoring here, and returns every slot to catch up.
    ///
    /// The map stays locked while the active and restoring tasks are read and the new slots
    /// inserted: a task's restore is registered before its restore thread takes the task's
    /// slot out of the map (see `Shared::promote_standby`), so no slot of a task being
    /// restored is inserted after that.
    fn place(&self, wanted: &BTreeSet<TaskId>) -> Vec<Arc<StandbySlot>> {
        let shared = &self.shared;
        let (unwanted, slots) = {
            let mut standbys = shared.standbys.lock();
            let mut active: BTreeSet<TaskId> = shared.tasks.lock().keys().copied().collect();
            {
                let restorer = shared.restorer.lock();
                active.extend(restorer.tasks.keys().copied());
                active.extend(restorer.suspended.keys().copied());
            }
            let wanted: BTreeSet<TaskId> = wanted.difference(&active).copied().collect();
            let (unwanted, kept): (Vec<_>, Vec<_>) = standbys
                .iter()
                .map(|(id, slot)| (*id, Arc::clone(slot)))
                .partition(|(id, _)| !wanted.contains(id));
            let mut slots: Vec<Arc<StandbySlot>> = kept.into_iter().map(|(_, slot)| slot).collect();
            for &id in &wanted {
                if let std::collections::btree_map::Entry::Vacant(vacant) = standbys.entry(id) {
                    slots.push(Arc::clone(vacant.insert(StandbySlot::new(id))));
                }
            }
            (unwanted, slots)
        };
        for (_, slot) in unwanted {
            tracing::info!(task = %slot.id(), "standby no longer wanted here");
            self.drop_copy(&slot);
        }
        slots
    }

    /// Opens `slot`'s copy if it is new and catches it up; a failure drops the copy.
    fn catch_up(&self, slot: &Arc<StandbySlot>) {
        let shared = &self.shared;
        let id = slot.id();
        let open = || {
            Standby::open(
                &shared.state,
                &shared.config,
                &shared.clients,
                id,
                shared.partitions,
            )
        };
        let mut listener = Locked(&shared.listener);
        let Err(err) = slot.catch_up(open, &mut listener, &shared.queries) else {
            return;
        };
        if err.kind() == ErrorKind::Locked {
            // The task's directory is held by its active task here, which the group's
            // description does not show yet.
            tracing::debug!(task = %id, %err, "standby not opened: the task is open here");
        } else {
            tracing::warn!(task = %id, %err, "standby failed: dropped, opened again at a later check");
        }
        self.drop_copy(slot);
    }

    /// Retires `slot` and then takes it out of the map, unless another slot took its place.
    /// In this order, a copy's files are open only while its slot is in the map: a restore
    /// thread that finds no slot of its task there opens the task's stores safely.
    fn drop_copy(&self, slot: &Arc<StandbySlot>) {
        let shared = &self.shared;
        let id = slot.id();
        if let Err(err) = slot.retire(&shared.queries) {
            tracing::warn!(task = %id, %err, "closing a dropped standby");
        }
        let mut standbys = shared.standbys.lock();
        if standbys
            .get(&id)
            .is_some_and(|held| Arc::ptr_eq(held, slot))
        {
            standbys.remove(&id);
        }
    }
}
