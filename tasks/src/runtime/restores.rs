//! Restored tasks taken in by the poll loop: each is opened on a restore thread (see the
//! `restorer` module), then sought to its position and resumed here; one whose restore timed
//! out is restored again, and a standby copy of it is retired first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer, RebalanceProtocol};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use statestore_changelog::TaskId;
use store_api::{Error, ErrorKind, Result};

use super::shared::*;
use crate::TaskEventKind;
use crate::group::topics::convert;
use crate::runtime::restorer::{Restored, Restoring};
use crate::state::task::{FenceGate, Opening, Task};

impl Shared {
    /// Opens and restores tasks `ids`, `restore_parallelism` at a time, and reports each
    /// one to `done` as soon as it is ready.
    pub(super) fn open_tasks(&self, ids: &[TaskId], done: &Sender<Restored>) {
        let next = AtomicUsize::new(0);
        let threads = self.config.restore_parallelism.min(ids.len());
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    while let Some(&id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let suspended = self.restorer.lock().suspended.remove(&id);
                        let task = match suspended.and_then(|task| resumed(task, self)) {
                            Some(task) => Ok(task),
                            None => {
                                self.promote_standby(id);
                                let opening = Opening {
                                    listener: &mut Locked(&self.listener),
                                    gate: self,
                                };
                                Task::open(
                                    &self.state,
                                    &self.config,
                                    &self.clients,
                                    id,
                                    self.partitions,
                                    opening,
                                )
                            }
                        };
                        if let Err(std::sync::mpsc::SendError((_, Ok(task)))) =
                            done.send((id, task))
                        {
                            // Nobody waits any more: the application is gone.
                            task.abandon();
                        }
                        self.restores_finished.fetch_add(1, Ordering::Release);
                    }
                });
            }
        });
    }

    /// Opens and restores tasks `ids` on a restore thread, reporting to `done`.
    pub(super) fn spawn_restores(self: &Arc<Self>, ids: Vec<TaskId>, done: Sender<Restored>) {
        let shared = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("statestore-restore".into())
            .spawn(move || shared.open_tasks(&ids, &done));
        if let Err(err) = spawned {
            self.fail(Error::io("starting a restore thread", err));
        }
    }

    /// Starts the restore of task `id` again, after one that timed out (no broker answered
    /// within the request timeout) or gave up its fence (the task was revoked then, and is
    /// assigned here again): its partitions stay paused meanwhile.
    pub(super) fn restore_again(self: &Arc<Self>, id: TaskId, restoring: Restoring) {
        let done = {
            let mut restorer = self.restorer.lock();
            let again = Restoring {
                fence_refused: false,
                started: Instant::now(),
                not_fetching_since: None,
                ..restoring
            };
            restorer.tasks.insert(id, again);
            restorer.reporter()
        };
        self.spawn_restores(vec![id], done);
    }

    /// Takes in every task whose restore finished: seeks its partitions to its position,
    /// calls `split` with it (which may move its records to queues of their own before they
    /// are fetched), and resumes them. A
    /// task revoked meanwhile is closed instead. A task whose partitions librdkafka has not
    /// started fetching yet (it still reads the group's offsets of a new assignment, which a
    /// task without logged stores can outrun) waits for the next call.
    ///
    /// Returns whether a restored task waits so, for the caller to call again soon.
    ///
    /// # Errors
    /// The first failed restore (one that timed out is started again instead), or a seek or
    /// resume librdkafka refuses.
    pub(crate) fn finish_restores(
        self: &Arc<Self>,
        consumer: &Arc<BaseConsumer<GroupContext>>,
        split: &mut dyn FnMut(&Task),
    ) -> Result<bool> {
        let mut waiting = Vec::new();
        let taken = self.take_in_restored(consumer, split, &mut waiting);
        let waits = !waiting.is_empty();
        let mut restorer = self.restorer.lock();
        for (id, restoring, task) in waiting {
            restorer.put_back(id, restoring, task);
        }
        taken.map(|()| waits)
    }

    /// [`finish_restores`](Shared::finish_restores), leaving the tasks that wait in `waiting`.
    fn take_in_restored(
        self: &Arc<Self>,
        consumer: &Arc<BaseConsumer<GroupContext>>,
        split: &mut dyn FnMut(&Task),
        waiting: &mut Vec<(TaskId, Restoring, Task)>,
    ) -> Result<()> {
        loop {
            let Some((restoring, (id, task))) = self.restorer.lock().next_done() else {
                return Ok(());
            };
            let Some(restoring) = restoring.filter(|restoring| !restoring.revoked) else {
                // Revoked while it restored: its new owner may have fenced it meanwhile, so a
                // failed restore is no error of this instance's.
                match task {
                    Ok(task) => task.abandon(),
                    Err(err) => tracing::info!(task = %id, %err, "a revoked task's restore failed"),
                }
                tracing::info!(task = %id, "restored a task revoked meanwhile: closed");
                continue;
            };
            if restoring.fence_refused {
                // Revoked when its restore came to the fence, assigned here again since.
                if let Ok(task) = task {
                    task.abandon();
                }
                tracing::info!(
                    task = %id,
                    "a task assigned here again after its restore gave it up: restoring it again"
                );
                self.restore_again(id, restoring);
                continue;
            }
            let mut task = match task {
                Ok(task) => task,
                Err(err) if err.kind() == ErrorKind::Timeout => {
                    tracing::warn!(task = %id, %err, "a task's restore timed out: restoring it again");
                    self.restore_again(id, restoring);
                    continue;
                }
                // A task still assigned here that another owner fenced while it restored: two
                // owners at once, which stops this instance rather than leave the task
                // paused.
                Err(err) => return Err(err),
            };
            let resumed = match self.seek_to_position(consumer, &restoring, &mut task)? {
                Sought::All(resumed) => resumed,
                Sought::NotFetching => {
                    let mut restoring = restoring;
                    let since = *restoring
                        .not_fetching_since
                        .get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.config.request_timeout() {
                        self.assign_again(consumer, &task)?;
                        restoring.not_fetching_since = Some(Instant::now());
                    } else {
                        tracing::debug!(task = %task.id, "partitions not fetched yet; seeking later");
                    }
                    waiting.push((id, restoring, task));
                    continue;
                }
                Sought::Lost => {
                    // librdkafka took the partition away while the task restored, before this
                    // instance saw a revocation (a member past max.poll.interval.ms loses its
                    // assignment at once): the task is not this instance's to process.
                    tracing::info!(task = %task.id, "a restored task's partition is no longer assigned here: closed");
                    task.abandon();
                    continue;
                }
            };
            // Before the resume (the partitions are paused, so nothing is fetched from the
            // position yet): every record from the position on can reach the task's own queues.
            split(&task);
            consumer
                .resume(&resumed)
                .map_err(|err| convert("resuming a restored task's partitions", err))?;
            let restored = task.restored();
            tracing::info!(task = %task.id, next = ?task.next_offsets(), ?restored, "task assigned");
            let next_offsets = task
                .topics
                .iter()
                .zip(task.next_offsets())
                .filter_map(|(input, next)| Some((input.clone(), (*next)?)))
                .collect();
            self.event(
                id,
                TaskEventKind::Assigned {
                    restored,
                    next_offset: task.next_offset(0),
                    next_offsets,
                    restore_time: restoring.started.elapsed(),
                    resumed: task.resumed(),
                },
            );
            if let Some(skips) = self.decided.lock().remove(&id) {
                task.remember_skips(skips);
            }
            self.tasks.lock().insert(id, task);
        }
    }

    /// Seeks each input partition of the restored `task` to the task's position (the group
    /// offset for a topic it never committed state for, else the earliest).
    ///
    /// # Errors
    /// `InvalidArgument` for a position beyond Kafka's range; a seek librdkafka refuses for a
    /// partition still assigned here and being fetched, or one that does not answer within
    /// the request timeout.
    fn seek_to_position(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        restoring: &Restoring,
        task: &mut Task,
    ) -> Result<Sought> {
        let partition = task.id.partition;
        let doing = "seeking to a restored task's position";
        // Where the task holds no position (it never committed state for a topic), the
        // group's offset, if any, is the floor; the group's offsets may also lag the stores'
        // positions (a group commit refused while the group rebalanced), which the next
        // commit brings up to the positions.
        task.start_from(&restoring.floors);
        let mut wanted = TopicPartitionList::new();
        self.add_positions(&mut wanted, task)?;
        let sought = consumer
            .seek_partitions(wanted, self.config.request_timeout())
            .map_err(|err| convert(doing, err))?;
        for elem in sought.elements() {
            match elem.error() {
                Ok(()) => {}
                Err(_) if !still_assigned(consumer, elem.topic(), partition) => {
                    return Ok(Sought::Lost);
                }
                // librdkafka starts fetching a newly assigned partition once it has read the
                // group's offset; until then it refuses to seek it (`Local: Erroneous state`).
                Err(err) if err.rdkafka_error_code() == Some(RDKafkaErrorCode::State) => {
                    return Ok(Sought::NotFetching);
                }
                Err(err) => return Err(convert(doing, err)),
            }
        }
        Ok(Sought::All(sought))
    }

    /// Assigns the input partitions of the restored `task` again, at its position, for
    /// librdkafka to start fetching them: it starts a newly assigned partition only once the
    /// group coordinator answered its committed offset, and leaves it unfetched (and
    /// unseekable) for good when that query fails, as it may when the coordinator was away
    /// (librdkafka's documented answer is an unassign and assign by the application). Under
    /// the cooperative protocol only the task's partitions are assigned again; under the eager
    /// one the whole assignment is, each open task's partitions at that task's position and
    /// the restoring tasks' at the group's offsets, paused again.
    ///
    /// # Errors
    /// An assignment or pause librdkafka refuses, or a position beyond Kafka's range.
    fn assign_again(&self, consumer: &BaseConsumer<GroupContext>, task: &Task) -> Result<()> {
        let doing = "assigning a restored task's partitions again";
        tracing::warn!(
            task = %task.id,
            next = ?task.next_offsets(),
            "librdkafka never started fetching a restored task's partitions: assigning them again"
        );
        let mut mine = TopicPartitionList::new();
        self.add_positions(&mut mine, task)?;
        if matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        ) {
            consumer
                .incremental_unassign(&mine)
                .and_then(|()| consumer.incremental_assign(&mine))
                .map_err(|err| convert(doing, err))?;
        } else {
            let assigned = consumer.assignment().map_err(|err| convert(doing, err))?;
            let mut others = self.partitions_of(&assigned);
            others.remove(&task.id);
            let mut all = TopicPartitionList::new();
            {
                let tasks = self.tasks.lock();
                for id in others {
                    if let Some(open) = tasks.get(&id) {
                        self.add_positions(&mut all, open)?;
                        continue;
                    }
                    for input in self.topics_of(id) {
                        all.add_partition_offset(input, partition_id(id.partition), Offset::Stored)
                            .map_err(|err| convert(doing, err))?;
                    }
                }
            }
            self.add_positions(&mut all, task)?;
            consumer.assign(&all).map_err(|err| convert(doing, err))?;
            self.pause_restoring(consumer, &all);
        }
        consumer.pause(&mine).map_err(|err| convert(doing, err))
    }

    /// Adds the input partitions of `task` to `tpl`, each at the task's next offset (the
    /// earliest where it has none).
    ///
    /// # Errors
    /// `InvalidArgument` for an offset beyond Kafka's range.
    fn add_positions(&self, tpl: &mut TopicPartitionList, task: &Task) -> Result<()> {
        for (topic, input) in task.topics.iter().enumerate() {
            let offset = match task.next_offset(topic).map(i64::try_from) {
                Some(Ok(offset)) => Offset::Offset(offset),
                Some(Err(_)) => {
                    return Err(Error::invalid(format!(
                        "task {} holds an offset beyond Kafka's range",
                        task.id
                    )));
                }
                None => Offset::Beginning,
            };
            tpl.add_partition_offset(input, partition_id(task.id.partition), offset)
                .map_err(|err| convert("listing a task's positions", err))?;
        }
        Ok(())
    }

    /// Waits up to `timeout` for the restores in flight and closes what they restored.
    pub(crate) fn abandon_restores(&self, timeout: std::time::Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let done = self.restorer.lock().next_done();
            match done {
                Some((_, (_, Ok(task)))) => task.abandon(),
                Some((_, (_, Err(err)))) => tracing::warn!(%err, "a restore failed on close"),
                None if self.restorer.lock().tasks.is_empty() => return,
                None if Instant::now() >= deadline => {
                    tracing::warn!("restores still running on close are left to finish");
                    return;
                }
                None => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    }

    /// Closes the standby copy of task `id`, which is about to be restored here: the
    /// task then restores only what its copy lacks. Runs on the restore thread, not in a
    /// rebalance callback, as it waits for a catch-up of the copy in flight.
    ///
    /// No copy of the task is open afterwards: a copy the standby thread dropped was closed
    /// before its slot left the map, the task's restore was registered in
    /// [`restorer`](Shared::restorer) before this thread started, and the standby thread
    /// adds no slot for a task restoring here (under the map's lock, see `app::standbys`).
    /// So the task opens its stores after every copy of them closed.
    pub(super) fn promote_standby(&self, id: TaskId) {
        let Some(slot) = self.standbys.lock().remove(&id) else {
            return;
        };
        match slot.retire(&self.queries) {
            Ok(replayed) => tracing::info!(task = %slot.id(), replayed, "promoting standby"),
            Err(err) => tracing::warn!(%err, task = %id, "closing a promoted standby"),
        }
    }
}

/// The suspended `task`, resumed; `None` when it cannot be (another owner committed to it
/// since it was suspended, or its fence failed): it is then closed without committing, to be
/// opened anew.
fn resumed(mut task: Task, gate: &dyn FenceGate) -> Option<Task> {
    match task.resume(gate) {
        Ok(true) => {
            tracing::info!(task = %task.id, "resuming a task suspended by the rebalance");
            return Some(task);
        }
        Ok(false) => {
            tracing::info!(task = %task.id, "another owner committed to a suspended task: restoring it");
        }
        Err(err) => {
            tracing::warn!(task = %task.id, %err, "resuming a suspended task failed: restoring it");
        }
    }
    task.abandon();
    None
}

/// What seeking a restored task's partitions to its position came to.
enum Sought {
    /// Every partition was sought: these are to be resumed.
    All(TopicPartitionList),
    /// librdkafka does not fetch some partition yet: seek again later.
    NotFetching,
    /// Some partition is no longer assigned here.
    Lost,
}

/// A restore thread fences a task's changelogs only while the task is still restoring here
/// and not revoked, and a revocation waits for a fence under way (see
/// [`Restorer::fencing`](crate::runtime::restorer::Restorer::fencing)).
impl FenceGate for Shared {
    fn fence(&self, id: TaskId, fence: &mut dyn FnMut() -> Result<u64>) -> Result<u64> {
        {
            let mut restorer = self.restorer.lock();
            let refused = match restorer.tasks.get_mut(&id) {
                Some(restoring) if !restoring.revoked => false,
                Some(restoring) => {
                    restoring.fence_refused = true;
                    true
                }
                None => true,
            };
            if refused {
                return Err(Error::Fenced(format!(
                    "task {id} was revoked while it restored: its changelogs are its new \
                     owner's to fence"
                )));
            }
            restorer.fencing.insert(id);
        }
        /// Ends the fence in the restorer, also when `fence` panics.
        struct Ended<'a>(&'a Shared, TaskId);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.restorer.lock().fencing.remove(&self.1);
                self.0.fences_done.notify_all();
            }
        }
        let _ended = Ended(self, id);
        fence()
    }
}
