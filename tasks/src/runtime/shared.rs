//! What the poll loop, the rebalance callbacks (see the `rebalance` module), the restore
//! threads (`restores`) and the standby thread share: [`Shared`], and the consumer's context
//! that carries it into the callbacks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use statestore_changelog::kafka_util::{
    WatchedContext, convert_because, is_fatal_for_consumer, is_retriable,
};
use statestore_changelog::{KafkaClients, RestoreListener, StateDirectory, TaskId};
use store_api::{Error, Result};

use crate::config::{TaskShape, TasksConfig};
use crate::queries::QueryState;
use crate::runtime::outputs::Outputs;
use crate::runtime::restorer::Restorer;
use crate::runtime::standby::Standbys;
use crate::state::task::Task;
use crate::{TaskEvent, TaskEventKind};

/// The most task events kept for [`Application::take_events`](crate::Application::take_events):
/// an application that never takes them keeps the latest.
pub(crate) const MAX_EVENTS: usize = 1024;

/// Everything the callbacks and the processing loop share.
pub(crate) struct Shared {
    pub config: TasksConfig,
    /// The input topics, co-partitioned: task `<sub>_<p>` owns partition `p` of those of
    /// its sub-topology.
    pub inputs: Vec<String>,
    /// Each sub-topology's input topics and stores.
    pub shapes: Vec<TaskShape>,
    pub partitions: u32,
    pub state: StateDirectory,
    /// The active tasks, shared with interactive queries.
    pub tasks: Arc<Mutex<BTreeMap<TaskId, Task>>>,
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
    /// Notified whenever a restore thread's fence ends (see [`Restorer::fencing`]).
    pub fences_done: parking_lot::Condvar,
    /// Restores finished so far (each reported to the restorer): a poll that waits for
    /// records stops waiting at the next one, for the poll loop to take the task in.
    pub restores_finished: AtomicU64,
    /// A rebalance callback found that outputs may be lost (their delivery timed out): every
    /// task must go back to its last commit.
    pub outputs_lost: std::sync::atomic::AtomicBool,
    /// A rebalance callback found the transaction fenced (exactly-once): every task must be
    /// dropped and the group rejoined.
    pub migrated: std::sync::atomic::AtomicBool,
    /// What interactive queries read besides the tasks: the group's description and the
    /// standby copies' read handles.
    pub queries: Arc<QueryState>,
    /// The group consumer's last connection failure, as librdkafka logged it (the poll
    /// returns only its code).
    pub connection: WatchedContext,
    /// The skips decided for tasks closed without committing, by partition, for the copy of
    /// the task opened next here: its error handler is not asked again about a record it
    /// answered (see [`Task::take_skips`]).
    pub decided: Mutex<BTreeMap<TaskId, crate::state::task::Skips>>,
    /// The commits of the group offsets, each waited for up to the request timeout.
    pub group_commits: GroupCommits,
}

impl Shared {
    /// Whether a task whose processor did not fail should commit now (see
    /// [`Task::needs_commit`]).
    /// For each repartition topic partition of a task here, the position its stores
    /// committed: what may be purged below.
    pub(crate) fn committed_repartition_positions(&self) -> crate::runtime::purge::Below {
        let mut below = crate::runtime::purge::Below::new();
        for (id, task) in self.tasks.lock().iter() {
            for (index, topic) in task.topics.iter().enumerate() {
                if !self.config.repartition_topics.contains(topic) {
                    continue;
                }
                if let Some(position) = task.committed_position(index) {
                    below.insert((topic.clone(), id.partition), position);
                }
            }
        }
        below
    }

    pub(crate) fn any_task_needs_commit(&self) -> bool {
        self.tasks
            .lock()
            .values()
            .any(|task| !task.is_poisoned() && task.needs_commit())
    }

    /// Keeps the skips of `task`, closed without committing, for its next copy here.
    pub(crate) fn keep_skips(&self, task: &mut Task) {
        let skips = task.take_skips();
        if !skips.is_empty() {
            self.decided.lock().insert(task.id, skips);
        }
    }

    /// Hands the processors' outputs to the producer.
    pub(crate) fn send_outputs(&self) -> Result<()> {
        self.outputs.lock().send(&self.clients)
    }

    /// Waits until every output is acknowledged: a task commits only after this succeeded.
    pub(crate) fn flush_outputs(&self) -> Result<()> {
        self.outputs.lock().flush(&self.clients)
    }

    /// The group offsets of task `id` from what [`Task::commit`] returned.
    pub(crate) fn group_offsets_of(
        &self,
        id: TaskId,
        committed: &[(usize, u64)],
    ) -> Vec<(&str, u32, u64)> {
        let topics = self.topics_of(id);
        committed
            .iter()
            .filter_map(|&(topic, offset)| {
                Some((topics.get(topic)?.as_str(), id.partition, offset))
            })
            .collect()
    }

    pub(crate) fn fail(&self, err: Error) {
        tracing::error!(%err, "task rebalance failed");
        let mut slot = self.error.lock();
        if slot.is_none() {
            *slot = Some(err);
        }
    }

    /// Answers an error the group consumer's poll returned: one that no retry can change
    /// (authentication, authorisation, a record that cannot be read; see
    /// [`is_fatal_for_consumer`]) is kept for the poll loop to return to the error policy;
    /// any other is transient, and librdkafka retries it.
    ///
    /// A broker that refused the consumer's certificate is fatal too, though librdkafka
    /// reports it as a lost connection (see [`WatchedContext`]). A refused refresh of the
    /// OAUTHBEARER token of a consumer that authenticated before is not (see
    /// [`WatchedContext::only_token_refresh`]): it goes on with the token it holds, until the
    /// broker refuses that one.
    pub(crate) fn consumer_error(&self, err: KafkaError) {
        if self.connection.only_token_refresh(&err) {
            let reason = self.connection.last_failure();
            tracing::warn!(
                reason,
                "the OAUTHBEARER token could not be refreshed: going on with the one held"
            );
            return;
        }
        let refused = is_retriable(&err) && self.connection.certificate_refused().is_some();
        if !is_fatal_for_consumer(&err) && !refused {
            tracing::debug!(%err, "consumer error");
            return;
        }
        let reason = self.connection.explain(&err);
        let err = convert_because(
            &format!(
                "consuming input topics {:?} as group {} (Fetch, JoinGroup, OffsetFetch)",
                self.inputs, self.config.application_id
            ),
            err,
            reason,
        );
        tracing::error!(%err, "the group consumer cannot go on");
        let mut slot = self.error.lock();
        if slot.is_none() {
            *slot = Some(err);
        }
    }

    pub(crate) fn event(&self, task: TaskId, kind: TaskEventKind) {
        let mut events = self.events.lock();
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(TaskEvent { task, kind });
    }

    /// The task that input topic `topic`'s partition `partition` belongs to, and the index
    /// of `topic` among that task's topics.
    pub(crate) fn locate_topic(&self, topic: &str, partition: u32) -> Option<(TaskId, usize)> {
        self.shapes.iter().find_map(|shape| {
            let index = shape.topics.iter().position(|input| input == topic)?;
            Some((TaskId::new(shape.id, partition), index))
        })
    }

    /// The input topics of task `id`, in the order of its positions.
    pub(crate) fn topics_of(&self, id: TaskId) -> &[String] {
        self.shapes
            .iter()
            .find(|shape| shape.id == id.subtopology)
            .map_or(&[], |shape| shape.topics.as_slice())
    }

    /// Whether task `id` holds a logged store: one a standby copy can keep.
    pub(crate) fn logs_state(&self, id: TaskId) -> bool {
        self.shapes
            .iter()
            .find(|shape| shape.id == id.subtopology)
            .is_some_and(|shape| shape.stores.iter().any(|spec| spec.logging))
    }

    /// The tasks of partition `partition`, one per sub-topology.
    pub(crate) fn tasks_of_partition(&self, partition: u32) -> impl Iterator<Item = TaskId> + '_ {
        self.shapes
            .iter()
            .map(move |shape| TaskId::new(shape.id, partition))
    }

    /// The tasks of the input partitions in `tpl`: partition `p` of any input topic of a
    /// sub-topology.
    pub(super) fn partitions_of(&self, tpl: &TopicPartitionList) -> BTreeSet<TaskId> {
        self.shapes
            .iter()
            .flat_map(|shape| {
                shape
                    .topics
                    .iter()
                    .flat_map(|input| tpl.elements_for_topic(input))
                    .filter_map(|elem| u32::try_from(elem.partition()).ok())
                    .map(|partition| TaskId::new(shape.id, partition))
            })
            .collect()
    }

    /// Adds the input partitions of task `id` to `tpl`.
    pub(crate) fn add_partitions(&self, tpl: &mut TopicPartitionList, id: TaskId) {
        for input in self.topics_of(id) {
            tpl.add_partition(input, partition_id(id.partition));
        }
    }

    /// Checks that `tpl` gives each of `tasks` in every input topic of its sub-topology: a
    /// task owns the same partition of each, which only the range assignor guarantees (and
    /// the configuration asks for it when there are several input topics).
    pub(super) fn check_co_partitioned(
        &self,
        tpl: &TopicPartitionList,
        tasks: &[TaskId],
    ) -> Result<()> {
        for &id in tasks {
            let missing: Vec<&str> = self
                .topics_of(id)
                .iter()
                .filter(|input| {
                    tpl.find_partition(input, partition_id(id.partition))
                        .is_none()
                })
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Err(Error::invalid(format!(
                    "the group assigned partition {} of some input topics here but not of \
                     {missing:?}: task {id} must own that partition of every input topic of \
                     its sub-topology (do all instances subscribe to the same topics with the \
                     range assignor?)",
                    id.partition
                )));
            }
        }
        Ok(())
    }
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

/// The commits of the group offsets made on threads of their own: the consumer to make them
/// with, and whether one has gone unanswered.
#[derive(Default)]
pub(crate) struct GroupCommits {
    /// The group consumer, set once it is made. Weak: the consumer's context holds the
    /// [`Shared`] state that holds this. (Made by the `coordinator` module's commits.)
    pub(crate) consumer: std::sync::OnceLock<std::sync::Weak<BaseConsumer<GroupContext>>>,
    /// A commit's thread still waits for librdkafka's answer.
    pub(crate) unanswered: Arc<std::sync::atomic::AtomicBool>,
}

impl GroupCommits {
    /// Makes the commits with `consumer`, the group consumer.
    pub(crate) fn set_consumer(&self, consumer: &Arc<BaseConsumer<GroupContext>>) {
        let _ = self.consumer.set(Arc::downgrade(consumer));
    }
}
