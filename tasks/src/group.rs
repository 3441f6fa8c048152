//! The consumer group's rebalance callbacks, which open, restore, commit and close tasks.
//!
//! librdkafka calls them from inside `BaseConsumer::poll`, on the application's own thread, so
//! restoring there blocks only this instance's processing: heartbeats go on from librdkafka's
//! background thread. On assignment the tasks are restored *before* the partitions are
//! assigned, and the assignment carries each task's own input position as its offset, so no
//! record is fetched from the group offset first. Errors are kept and returned by the next
//! `poll` of the application.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use statestore_changelog::{RestoreListener, StateDirectory, TaskId};
use store_api::{Error, ErrorKind, Result};

use crate::app::base_config;
use crate::config::TasksConfig;
use crate::outputs::Outputs;
use crate::standby::Standbys;
use crate::task::Task;
use crate::topics::convert;
use crate::{TaskEvent, TaskEventKind};

/// Everything the callbacks and the processing loop share.
pub(crate) struct Shared {
    pub config: TasksConfig,
    /// The input topics, co-partitioned: task `0_<p>` owns partition `p` of each.
    pub inputs: Vec<String>,
    pub partitions: u32,
    pub state: StateDirectory,
    pub tasks: Mutex<BTreeMap<u32, Task>>,
    pub error: Mutex<Option<Error>>,
    pub events: Mutex<Vec<TaskEvent>>,
    pub listener: Mutex<Box<dyn RestoreListener + Send>>,
    /// Standby copies of tasks other instances own.
    pub standbys: Mutex<Standbys>,
    /// This instance's `client.id`, unique in the group: standby placement tells members apart
    /// by it.
    pub client_id: String,
    /// Rebalance callbacks served so far: a partition's progress is judged only across a
    /// stretch without one.
    pub rebalances: AtomicU64,
    /// The output records of every task, and their producer.
    pub outputs: Mutex<Outputs>,
}

impl Shared {
    /// Hands the processors' outputs to the producer.
    pub(crate) fn send_outputs(&self) -> Result<()> {
        let config = &self.config;
        self.outputs.lock().send(config, || base_config(config))
    }

    /// Waits until every output is acknowledged: a task commits only after this succeeded.
    pub(crate) fn flush_outputs(&self) -> Result<()> {
        let config = &self.config;
        self.outputs.lock().flush(config, || base_config(config))
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
        self.events.lock().push(TaskEvent {
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

    /// Opens and restores the tasks of `partitions`, `restore_parallelism` at a time.
    fn open_tasks(&self, partitions: &[u32]) -> Vec<(u32, Result<Task>)> {
        let next = AtomicUsize::new(0);
        let results = Mutex::new(Vec::with_capacity(partitions.len()));
        let threads = self.config.restore_parallelism.min(partitions.len());
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    while let Some(&partition) =
                        partitions.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        let id = TaskId::new(0, partition);
                        let mut listener = Locked(&self.listener);
                        let task = Task::open(
                            &self.state,
                            &self.config,
                            id,
                            self.partitions,
                            &mut listener,
                        );
                        results.lock().push((partition, task));
                    }
                });
            }
        });
        results.into_inner()
    }

    /// Restores the newly assigned tasks and writes their positions into the assignment.
    fn assign(&self, consumer: &BaseConsumer<GroupContext>, tpl: &TopicPartitionList) {
        let open: Vec<u32> = {
            let tasks = self.tasks.lock();
            self.partitions_of(tpl)
                .into_iter()
                .filter(|p| !tasks.contains_key(p))
                .collect()
        };
        if open.is_empty() {
            return;
        }
        if let Err(err) = self.check_co_partitioned(tpl, &open) {
            self.fail(err);
            return;
        }
        let started = Instant::now();
        self.close_standbys(&open);
        let floors = self.group_offsets(consumer, &open);
        let opened = self.open_tasks(&open);
        let restore_time = started.elapsed();
        for (partition, task) in opened {
            let mut task = match task {
                Ok(task) => task,
                Err(err) => {
                    self.fail(err);
                    continue;
                }
            };
            for (topic, input) in self.inputs.iter().enumerate() {
                let next = &mut task.next_offset[topic];
                if next.is_none() {
                    // The task never committed state for this topic: the group offset, if
                    // any, is the floor.
                    *next = floors.get(&(topic, partition)).copied();
                }
                if let Some(offset) = *next
                    && let Some(mut elem) = tpl.find_partition(input, partition_id(partition))
                    && let Ok(offset) = i64::try_from(offset)
                    && let Err(err) = elem.set_offset(Offset::Offset(offset))
                {
                    self.fail(convert("setting the start offset", err));
                }
            }
            let restored = task.restored();
            tracing::info!(task = %task.id, next = ?task.next_offset, ?restored, "task assigned");
            let next_offsets = self
                .inputs
                .iter()
                .zip(&task.next_offset)
                .filter_map(|(input, next)| Some((input.clone(), (*next)?)))
                .collect();
            self.event(
                partition,
                TaskEventKind::Assigned {
                    restored,
                    next_offset: task.next_offset[0],
                    next_offsets,
                    restore_time,
                },
            );
            self.tasks.lock().insert(partition, task);
        }
        tracing::info!(tasks = open.len(), elapsed = ?restore_time, "tasks restored");
    }

    /// Closes the standby copies of `partitions`, which are about to become active here: the
    /// task then restores only what its copy lacks.
    fn close_standbys(&self, partitions: &[u32]) {
        let mut standbys = self.standbys.lock();
        for partition in partitions {
            if let Some(standby) = standbys.remove(partition) {
                tracing::info!(task = %standby.id, replayed = standby.replayed, "promoting standby");
                if let Err(err) = standby.close() {
                    tracing::warn!(%err, partition, "closing a promoted standby");
                }
            }
        }
    }

    /// The group's committed offsets of `partitions` of every input topic, by (topic index,
    /// partition); empty when they cannot be read.
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
        let committed = consumer.committed_offsets(tpl, self.config.request_timeout());
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
        if let Err(err) = flushed {
            self.fail(err);
        }
        for partition in self.partitions_of(tpl) {
            let Some(task) = self.tasks.lock().remove(&partition) else {
                continue;
            };
            if lost {
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

pub(crate) fn partition_id(partition: u32) -> i32 {
    // Partitions come from Kafka metadata, where they are i32s.
    i32::try_from(partition).unwrap_or(i32::MAX)
}

/// The consumer's context: the rebalance callbacks.
pub(crate) struct GroupContext {
    pub shared: std::sync::Arc<Shared>,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.shared.rebalances.fetch_add(1, Ordering::Relaxed);
        match rebalance {
            Rebalance::Assign(tpl) => self.shared.assign(consumer, tpl),
            Rebalance::Revoke(tpl) => self.shared.revoke(consumer, tpl),
            Rebalance::Error(err) => tracing::warn!(%err, "rebalance error"),
        }
    }
}

/// Shares one listener between restore threads, locking it per event.
struct Locked<'a>(&'a Mutex<Box<dyn RestoreListener + Send>>);

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
