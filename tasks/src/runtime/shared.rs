//! The consumer group's rebalance callbacks, which open, restore, commit and close tasks.
//!
//! librdkafka calls them from inside `BaseConsumer::poll`, on the application's own thread. On
//! assignment they only start the new tasks' restores on a restore thread and pause their
//! partitions (see the `restorer` module); the poll loop takes each task in once it is
//! restored. On revocation they commit and close the revoked tasks. Errors are kept and
//! returned by the next `poll` of the application.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::time::Instant;

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, Statistics, TopicPartitionList};
use statestore_changelog::{KafkaClients, RestoreListener, StateDirectory, TaskId};
use store_api::{Error, ErrorKind, Result};

use crate::config::TasksConfig;
use crate::group::topics::convert;
use crate::queries::QueryState;
use crate::runtime::outputs::Outputs;
use crate::runtime::restorer::{Restored, Restorer, Restoring};
use crate::runtime::standby::Standbys;
use crate::state::task::Task;
use crate::{TaskEvent, TaskEventKind};
use statestore_changelog::kafka_util::retry;

/// The most task events kept for [`Application::take_events`](crate::Application::take_events):
/// an application that never takes them keeps the latest.
pub(crate) const MAX_EVENTS: usize = 1024;

/// Everything the callbacks and the processing loop share.
pub(crate) struct Shared {
    pub config: TasksConfig,
    /// The input topics, co-partitioned: task `0_<p>` owns partition `p` of each.
    pub inputs: Vec<String>,
    pub partitions: u32,
    pub state: StateDirectory,
    /// The active tasks, shared with interactive queries.
    pub tasks: Arc<Mutex<BTreeMap<u32, Task>>>,
    pub error: Mutex<Option<Error>>,
    /// The task events not taken yet, the latest [`MAX_EVENTS`] of them.
    pub events: Mutex<std::collections::VecDeque<TaskEvent>>,
    /// The application's state and its listener.
    pub lifecycle: crate::runtime::lifecycle::Lifecycle,
    pub listener: Mutex<Box<dyn RestoreListener + Send>>,
    /// Standby copies of tasks other instances own.
    pub standbys: Mutex<Standbys>,
    /// This instance's `client.id`, unique in the group: standby placement tells members apart
    /// by it.
    pub client_id: String,
    /// Rebalance callbacks served so far: a partition's progress is judged only across a
    /// stretch without one.
    pub rebalances: Arc<AtomicU64>,
    /// The instance's Kafka clients: one producer for every changelog and output, shared
    /// reader consumers for restores and standbys.
    pub clients: KafkaClients,
    /// The output records of every task.
    pub outputs: Mutex<Outputs>,
    /// The tasks being restored on restore threads.
    pub restorer: Mutex<Restorer>,
    /// A rebalance callback found that outputs may be lost (their delivery timed out): every
    /// task must go back to its last commit.
    pub outputs_lost: std::sync::atomic::AtomicBool,
    /// What interactive queries read besides the tasks: the group's description and the
    /// standby copies' read handles.
    pub queries: Arc<QueryState>,
}

impl Shared {
    /// Hands the processors' outputs to the producer.
    pub(crate) fn send_outputs(&self) -> Result<()> {
        self.outputs.lock().send(&self.clients)
    }

    /// Waits until every output is acknowledged: a task commits only after this succeeded.
    pub(crate) fn flush_outputs(&self) -> Result<()> {
        self.outputs.lock().flush(&self.clients)
    }

    /// The group offsets of task `partition` from what [`Task::commit`] returned.
    pub(crate) fn group_offsets_of<'a>(
        &'a self,
        partition: u32,
        committed: &[(usize, u64)],
    ) -> Vec<(&'a str, u32, u64)> {
        committed
            .iter()
            .filter_map(|&(topic, offset)| {
                Some((self.inputs.get(topic)?.as_str(), partition, offset))
            })
            .collect()
    }

    fn fail(&self, err: Error) {
        tracing::error!(%err, "task rebalance failed");
        let mut slot = self.error.lock();
        if slot.is_none() {
            *slot = Some(err);
        }
    }

    pub(crate) fn event(&self, partition: u32, kind: TaskEventKind) {
        let mut events = self.events.lock();
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(TaskEvent {
            task: TaskId::new(0, partition),
            kind,
        });
    }

    /// The index of input topic `topic` among [`inputs`](Shared::inputs).
    pub(crate) fn topic_index(&self, topic: &str) -> Option<usize> {
        self.inputs.iter().position(|input| input == topic)
    }

    /// The tasks of the input partitions in `tpl`: partition `p` of any input topic.
    fn partitions_of(&self, tpl: &TopicPartitionList) -> BTreeSet<u32> {
        self.inputs
            .iter()
            .flat_map(|input| tpl.elements_for_topic(input))
            .filter_map(|elem| u32::try_from(elem.partition()).ok())
            .collect()
    }

    /// Checks that `tpl` gives each of `partitions` in every input topic: a task owns the same
    /// partition of each, which only the range assignor guarantees (and the configuration
    /// asks for it when there are several input topics).
    fn check_co_partitioned(&self, tpl: &TopicPartitionList, partitions: &[u32]) -> Result<()> {
        for &partition in partitions {
            let missing: Vec<&str> = self
                .inputs
                .iter()
                .filter(|input| tpl.find_partition(input, partition_id(partition)).is_none())
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Err(Error::invalid(format!(
                    "the group assigned partition {partition} of some input topics here but \
                     not of {missing:?}: task 0_{partition} must own that partition of every \
                     input topic (do all instances subscribe to the same topics with the range \
                     assignor?)"
                )));
            }
        }
        Ok(())
    }

    /// Opens and restores the tasks of `partitions`, `restore_parallelism` at a time, and
    /// reports each one to `done` as soon as it is ready.
    fn open_tasks(&self, partitions: &[u32], done: &Sender<Restored>) {
        let next = AtomicUsize::new(0);
        let threads = self.config.restore_parallelism.min(partitions.len());
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    while let Some(&partition) =
                        partitions.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        let id = TaskId::new(0, partition);
                        self.promote_standby(partition);
                        let mut listener = Locked(&self.listener);
                        let task = Task::open(
                            &self.state,
                            &self.config,
                            &self.clients,
                            id,
                            self.partitions,
                            &mut listener,
                        );
                        if let Err(std::sync::mpsc::SendError((_, Ok(task)))) =
                            done.send((partition, task))
                        {
                            // Nobody waits any more: the application is gone.
                            task.abandon();
                        }
                    }
                });
            }
        });
    }

    /// Starts restoring the newly assigned tasks on a restore thread (see the `restorer`
    /// module); a task still restoring from an earlier assignment is kept.
    fn assign(self: &Arc<Self>, consumer: &BaseConsumer<GroupContext>, tpl: &TopicPartitionList) {
        let open: Vec<u32> = {
            let tasks = self.tasks.lock();
            let mut restorer = self.restorer.lock();
            let mut open = Vec::new();
            for partition in self.partitions_of(tpl) {
                if tasks.contains_key(&partition) {
                    continue;
                }
                match restorer.tasks.get_mut(&partition) {
                    Some(restoring) => restoring.revoked = false,
                    None => open.push(partition),
                }
            }
            open
        };
        if open.is_empty() {
            return;
        }
        if let Err(err) = self.check_co_partitioned(tpl, &open) {
            self.fail(err);
            return;
        }
        let floors = self.group_offsets(consumer, &open);
        let done = {
            let mut restorer = self.restorer.lock();
            for &partition in &open {
                let floors = (0..self.inputs.len())
                    .map(|topic| floors.get(&(topic, partition)).copied())
                    .collect();
                let restoring = Restoring {
                    revoked: false,
                    floors,
                    started: Instant::now(),
                };
                restorer.tasks.insert(partition, restoring);
            }
            restorer.reporter()
        };
        tracing::info!(tasks = ?open, "restoring assigned tasks");
        self.spawn_restores(open, done);
    }

    /// Opens and restores the tasks of `partitions` on a restore thread, reporting to `done`.
    fn spawn_restores(self: &Arc<Self>, partitions: Vec<u32>, done: Sender<Restored>) {
        let shared = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("statestore-restore".into())
            .spawn(move || shared.open_tasks(&partitions, &done));
        if let Err(err) = spawned {
            self.fail(Error::io("starting a restore thread", err));
        }
    }

    /// Starts the restore of task `partition` again, after one that timed out (no broker
    /// answered within the request timeout): its partitions stay paused meanwhile.
    fn restore_again(self: &Arc<Self>, partition: u32, restoring: Restoring) {
        let done = {
            let mut restorer = self.restorer.lock();
            let again = Restoring {
                started: Instant::now(),
                ..restoring
            };
            restorer.tasks.insert(partition, again);
            restorer.reporter()
        };
        self.spawn_restores(vec![partition], done);
    }

    /// Closes the tasks of `partitions` without committing and opens them again, restoring
    /// their stores from their changelogs, as an assignment does: Kafka Streams' dirty close
    /// and revival of a corrupted task. For tasks whose commit or outputs timed out: what they
    /// processed since their last commit is processed again, and a record whose output was
    /// lost is sent again.
    pub(crate) fn revive(
        self: &Arc<Self>,
        consumer: &BaseConsumer<GroupContext>,
        partitions: &[u32],
    ) {
        let mut revived = TopicPartitionList::new();
        {
            let mut tasks = self.tasks.lock();
            for &partition in partitions {
                let Some(task) = tasks.remove(&partition) else {
                    continue;
                };
                tracing::warn!(task = %task.id, "task closed without committing, to open again");
                task.abandon();
                self.event(partition, TaskEventKind::Lost);
                for input in &self.inputs {
                    revived.add_partition(input, partition_id(partition));
                }
            }
        }
        if revived.count() > 0 {
            self.assign(consumer, &revived);
            self.pause_restoring(consumer, &revived);
        }
    }

    /// Pauses the partitions of the tasks still restoring, which `assign` just assigned: they
    /// are resumed at each task's own position once it is restored.
    fn pause_restoring(&self, consumer: &BaseConsumer<GroupContext>, tpl: &TopicPartitionList) {
        let restoring = self.restorer.lock().wanted();
        let mut paused = TopicPartitionList::new();
        for input in &self.inputs {
            for &partition in &restoring {
                if tpl.find_partition(input, partition_id(partition)).is_some() {
                    paused.add_partition(input, partition_id(partition));
                }
            }
        }
        if paused.count() > 0
            && let Err(err) = consumer.pause(&paused)
        {
            self.fail(convert("pausing the partitions of restoring tasks", err));
        }
    }

    /// Takes in every task whose restore finished: seeks its partitions to its position,
    /// calls `split` with it (which may move its records to queues of their own before they
    /// are fetched), and resumes them. A
    /// task revoked meanwhile is closed instead. A task whose partitions librdkafka has not
    /// started fetching yet (it still reads the group's offsets of a new assignment, which a
    /// task without logged stores can outrun) waits for the next call.
    ///
    /// # Errors
    /// The first failed restore (one that timed out is started again instead), or a seek or
    /// resume librdkafka refuses.
    pub(crate) fn finish_restores(
        self: &Arc<Self>,
        consumer: &Arc<BaseConsumer<GroupContext>>,
        split: &mut dyn FnMut(&Task),
    ) -> Result<()> {
        let mut waiting = Vec::new();
        let taken = self.take_in_restored(consumer, split, &mut waiting);
        let mut restorer = self.restorer.lock();
        for (partition, restoring, task) in waiting {
            restorer.put_back(partition, restoring, task);
        }
        taken
    }

    /// [`finish_restores`](Shared::finish_restores), leaving the tasks that wait in `waiting`.
    fn take_in_restored(
        self: &Arc<Self>,
        consumer: &Arc<BaseConsumer<GroupContext>>,
        split: &mut dyn FnMut(&Task),
        waiting: &mut Vec<(u32, Restoring, Task)>,
    ) -> Result<()> {
        loop {
            let Some((restoring, (partition, task))) = self.restorer.lock().next_done() else {
                return Ok(());
            };
            let Some(restoring) = restoring.filter(|restoring| !restoring.revoked) else {
                // Revoked while it restored: its new owner may have fenced it meanwhile, so a
                // failed restore is no error of this instance's.
                match task {
                    Ok(task) => task.abandon(),
                    Err(err) => tracing::info!(partition, %err, "a revoked task's restore failed"),
                }
                tracing::info!(partition, "restored a task revoked meanwhile: closed");
                continue;
            };
            let mut task = match task {
                Ok(task) => task,
                Err(err) if err.kind() == ErrorKind::Timeout => {
                    tracing::warn!(partition, %err, "a task's restore timed out: restoring it again");
                    self.restore_again(partition, restoring);
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
                    tracing::debug!(task = %task.id, "partitions not fetched yet; seeking later");
                    waiting.push((partition, restoring, task));
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
            let next_offsets = self
                .inputs
                .iter()
                .zip(task.next_offsets())
                .filter_map(|(input, next)| Some((input.clone(), (*next)?)))
                .collect();
            self.event(
                partition,
                TaskEventKind::Assigned {
                    restored,
                    next_offset: task.next_offset(0),
                    next_offsets,
                    restore_time: restoring.started.elapsed(),
                },
            );
            self.tasks.lock().insert(partition, task);
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
        for (topic, input) in self.inputs.iter().enumerate() {
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
            wanted
                .add_partition_offset(input, partition_id(partition), offset)
                .map_err(|err| convert(doing, err))?;
        }
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

    /// Closes the standby copy of `partition`, whose task is about to be restored here: the
    /// task then restores only what its copy lacks. Runs on the restore thread, not in a
    /// rebalance callback, as it waits for a catch-up of the copy in flight.
    ///
    /// No copy of the task is open afterwards: a copy the standby thread dropped was closed
    /// before its slot left the map, the task's restore was registered in
    /// [`restorer`](Shared::restorer) before this thread started, and the standby thread
    /// adds no slot for a task restoring here (under the map's lock, see `app::standbys`).
    /// So the task opens its stores after every copy of them closed.
    fn promote_standby(&self, partition: u32) {
        let Some(slot) = self.standbys.lock().remove(&partition) else {
            return;
        };
        match slot.retire(&self.queries) {
            Ok(replayed) => tracing::info!(task = %slot.id(), replayed, "promoting standby"),
            Err(err) => tracing::warn!(%err, partition, "closing a promoted standby"),
        }
    }

    /// The group's committed offsets of `partitions` of every input topic, by (topic index,
    /// partition); empty when they cannot be read. A coordinator that moved or is down is
    /// waited for, up to the request timeout.
    fn group_offsets(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        partitions: &[u32],
    ) -> BTreeMap<(usize, u32), u64> {
        let mut tpl = TopicPartitionList::new();
        for input in &self.inputs {
            for &partition in partitions {
                tpl.add_partition(input, partition_id(partition));
            }
        }
        let committed = retry(
            "reading the group offsets",
            self.config.request_timeout(),
            |timeout| consumer.committed_offsets(tpl.clone(), timeout),
        );
        let committed = match committed {
            Ok(committed) => committed,
            Err(err) => {
                tracing::warn!(%err, "reading the group offsets failed; using the tasks' own");
                return BTreeMap::new();
            }
        };
        committed
            .elements()
            .iter()
            .filter_map(|elem| match elem.offset() {
                Offset::Offset(o) => Some((
                    (
                        self.topic_index(elem.topic())?,
                        u32::try_from(elem.partition()).ok()?,
                    ),
                    u64::try_from(o).ok()?,
                )),
                _ => None,
            })
            .collect()
    }

    /// Commits and closes the revoked tasks, or closes them without committing when the
    /// assignment was lost.
    fn revoke(&self, consumer: &BaseConsumer<GroupContext>, tpl: &TopicPartitionList) {
        // A revoked task commits only once its outputs are acknowledged.
        let flushed = self.flush_outputs();
        let lost = consumer.assignment_lost() || flushed.is_err();
        match flushed {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::Timeout => {
                // The revoked tasks close uncommitted; the others go back to their last
                // commit at the next poll.
                tracing::warn!(%err, "outputs timed out while tasks were revoked");
                self.outputs_lost.store(true, Ordering::Relaxed);
            }
            Err(err) => self.fail(err),
        }
        for partition in self.partitions_of(tpl) {
            if let Some(restoring) = self.restorer.lock().tasks.get_mut(&partition) {
                restoring.revoked = true;
                continue;
            }
            let Some(task) = self.tasks.lock().remove(&partition) else {
                continue;
            };
            if lost || task.is_poisoned() {
                // A task whose processor failed holds part of a record: never committed.
                tracing::warn!(task = %task.id, "task lost: closed without committing");
                task.abandon();
                self.event(partition, TaskEventKind::Lost);
                continue;
            }
            match task.close() {
                Ok(committed) => {
                    let offsets = self.group_offsets_of(partition, &committed);
                    if let Err(err) = commit_group(consumer, &offsets) {
                        // The state holds the position; the group offset is only a floor.
                        tracing::warn!(%err, partition, "committing the group offset failed");
                    }
                }
                Err(err) if err.kind() == ErrorKind::Fenced => {
                    tracing::warn!(partition, %err, "revoked task was fenced by a newer owner");
                    self.event(partition, TaskEventKind::Fenced);
                    continue;
                }
                Err(err) => self.fail(err),
            }
            self.event(partition, TaskEventKind::Revoked);
        }
    }
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

/// Commits `offsets` (topic, partition, next offset) to the group, synchronously.
pub(crate) fn commit_group(
    consumer: &BaseConsumer<GroupContext>,
    offsets: &[(&str, u32, u64)],
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for &(topic, partition, offset) in offsets {
        let offset = i64::try_from(offset)
            .map_err(|_| Error::invalid(format!("offset {offset} is beyond kafka's range")))?;
        tpl.add_partition_offset(topic, partition_id(partition), Offset::Offset(offset))
            .map_err(|err| convert("committing the group offsets", err))?;
    }
    consumer
        .commit(&tpl, CommitMode::Sync)
        .map_err(|err| convert("committing the group offsets", err))
}

/// Whether partition `partition` of `topic` is in `consumer`'s assignment (true when the
/// consumer cannot say, so that a failure is not mistaken for a lost partition).
pub(crate) fn still_assigned(
    consumer: &BaseConsumer<GroupContext>,
    topic: &str,
    partition: u32,
) -> bool {
    consumer.assignment().map_or(true, |assigned| {
        assigned
            .find_partition(topic, partition_id(partition))
            .is_some()
    })
}

pub(crate) fn partition_id(partition: u32) -> i32 {
    // Partitions come from Kafka metadata, where they are i32s.
    i32::try_from(partition).unwrap_or(i32::MAX)
}

/// The consumer's context: the rebalance callbacks.
pub(crate) struct GroupContext {
    pub shared: std::sync::Arc<Shared>,
}

impl ClientContext for GroupContext {
    /// librdkafka's statistics (every `statistics.interval.ms`): each task's lag, the records
    /// of its input partitions past the consumer's position.
    fn stats(&self, statistics: Statistics) {
        for (&partition, task) in self.shared.tasks.lock().iter() {
            let lags: Option<Vec<i64>> = self
                .shared
                .inputs
                .iter()
                .map(|input| {
                    let stats = statistics
                        .topics
                        .get(input)?
                        .partitions
                        .get(&partition_id(partition))?;
                    // librdkafka says -1 while it does not know.
                    (stats.consumer_lag >= 0).then_some(stats.consumer_lag)
                })
                .collect();
            if let Some(lags) = lags {
                #[allow(clippy::cast_precision_loss, reason = "a gauge is an f64")]
                task.metrics.lag.set(lags.iter().sum::<i64>() as f64);
            }
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let _span = tracing::info_span!("rebalance").entered();
        self.shared.rebalances.fetch_add(1, Ordering::Relaxed);
        self.shared.lifecycle.to(crate::AppState::Rebalancing);
        match rebalance {
            Rebalance::Assign(tpl) => self.shared.assign(consumer, tpl),
            Rebalance::Revoke(tpl) => self.shared.revoke(consumer, tpl),
            Rebalance::Error(err) => tracing::warn!(%err, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.shared.pause_restoring(consumer, tpl);
        }
    }
}

/// Shares one listener between restore threads and the standby thread, locking it per event.
pub(crate) struct Locked<'a>(pub &'a Mutex<Box<dyn RestoreListener + Send>>);

impl RestoreListener for Locked<'_> {
    fn on_start(&mut self, topic: &str, partition: u32, start: u64, end: u64) {
        self.0.lock().on_start(topic, partition, start, end);
    }

    fn on_batch(&mut self, topic: &str, partition: u32, batch_end_offset: u64, records: usize) {
        self.0
            .lock()
            .on_batch(topic, partition, batch_end_offset, records);
    }

    fn on_end(&mut self, topic: &str, partition: u32, total: u64) {
        self.0.lock().on_end(topic, partition, total);
    }
}
