//! The consumer group's rebalance callbacks, which start, commit and close tasks.
//!
//! librdkafka calls them from inside `BaseConsumer::poll`, on the application's own thread. On
//! assignment they only start the new tasks' restores on a restore thread and pause their
//! partitions (see the `restorer` module); the poll loop takes each task in once it is
//! restored. On revocation they commit and close the revoked tasks (under the eager protocol
//! they suspend them: the assignment that follows resumes those it assigns here again and
//! closes the others). Errors are kept and returned by the next `poll` of the application.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::{ClientContext, Offset, Statistics, TopicPartitionList};
use statestore_changelog::TaskId;
use store_api::ErrorKind;

use super::coordinator::{commit_group, commit_within};
use super::shared::*;
use crate::TaskEventKind;
use crate::group::topics::convert;
use crate::runtime::restorer::Restoring;
use crate::state::task::Task;
use statestore_changelog::kafka_util::retry;

impl Shared {
    /// Starts restoring the newly assigned tasks on a restore thread (see the `restorer`
    /// module); a task still restoring from an earlier assignment is kept.
    pub(super) fn assign(
        self: &Arc<Self>,
        consumer: &BaseConsumer<GroupContext>,
        tpl: &TopicPartitionList,
    ) {
        let open: Vec<TaskId> = {
            let tasks = self.tasks.lock();
            let mut restorer = self.restorer.lock();
            let mut open = Vec::new();
            for id in self.partitions_of(tpl) {
                if tasks.contains_key(&id) {
                    continue;
                }
                match restorer.tasks.get_mut(&id) {
                    Some(restoring) => restoring.revoked = false,
                    None => open.push(id),
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
            for &id in &open {
                let floors = (0..self.topics_of(id).len())
                    .map(|topic| floors.get(&(id, topic)).copied())
                    .collect();
                let restoring = Restoring {
                    revoked: false,
                    fence_refused: false,
                    floors,
                    started: Instant::now(),
                    not_fetching_since: None,
                };
                restorer.tasks.insert(id, restoring);
            }
            restorer.reporter()
        };
        tracing::info!(tasks = ?open, "restoring assigned tasks");
        self.spawn_restores(open, done);
    }

    /// Closes tasks `ids` without committing and opens them again, restoring
    /// their stores from their changelogs, as an assignment does: Kafka Streams' dirty close
    /// and revival of a corrupted task. For tasks whose commit or outputs timed out: what they
    /// processed since their last commit is processed again, and a record whose output was
    /// lost is sent again.
    ///
    /// Opening a task fences its changelogs, which only an owner in the group's current
    /// generation may do: the group coordinator is asked first (the group's offsets of the
    /// tasks committed again, unchanged), and a member it no longer knows in this generation
    /// drops the tasks and rejoins instead (see [`rejoin`](super::exactly_once::rejoin)). A
    /// coordinator that cannot answer leaves the question to the next heartbeat.
    pub(crate) fn revive(self: &Arc<Self>, consumer: &BaseConsumer<GroupContext>, ids: &[TaskId]) {
        let mut revived = TopicPartitionList::new();
        {
            let mut tasks = self.tasks.lock();
            for &id in ids {
                let Some(mut task) = tasks.remove(&id) else {
                    continue;
                };
                tracing::warn!(task = %task.id, "task closed without committing, to open again");
                self.keep_skips(&mut task);
                task.abandon();
                self.event(id, TaskEventKind::Lost);
                self.add_partitions(&mut revived, id);
            }
        }
        if revived.count() == 0 {
            return;
        }
        if let Err(err) = self.still_member(consumer, &revived) {
            tracing::warn!(%err, "no longer a member of the group's generation: rejoining instead of reopening tasks");
            super::exactly_once::rejoin(consumer, self);
            return;
        }
        self.assign(consumer, &revived);
        self.pause_restoring(consumer, &revived);
    }

    /// `Err` when the group coordinator refuses this member's commit of the group's own
    /// offsets of `partitions` (a stale generation, an unknown member, a rebalance under way
    /// or a fenced static member); `Ok` otherwise, also when it cannot tell.
    fn still_member(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        partitions: &TopicPartitionList,
    ) -> std::result::Result<(), rdkafka::error::KafkaError> {
        use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
        let committed = retry(
            "reading the group offsets (OffsetFetch)",
            self.config.request_timeout(),
            |timeout| consumer.committed_offsets(partitions.clone(), timeout),
        );
        let Ok(committed) = committed else {
            return Ok(());
        };
        let mut again = TopicPartitionList::new();
        for elem in committed.elements() {
            if let Offset::Offset(offset) = elem.offset() {
                // The list was built from these partitions: adding one back cannot fail.
                let _ = again.add_partition_offset(
                    elem.topic(),
                    elem.partition(),
                    Offset::Offset(offset),
                );
            }
        }
        if again.count() == 0 {
            return Ok(());
        }
        // No answer within the request timeout tells nothing either.
        match commit_within(consumer, self, again) {
            Ok(Err(
                err @ KafkaError::ConsumerCommit(
                    C::IllegalGeneration
                    | C::UnknownMemberId
                    | C::RebalanceInProgress
                    | C::FencedInstanceId,
                ),
            )) => Err(err),
            _ => Ok(()),
        }
    }

    /// Pauses the partitions of the tasks still restoring, which `assign` just assigned: they
    /// are resumed at each task's own position once it is restored.
    pub(super) fn pause_restoring(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        tpl: &TopicPartitionList,
    ) {
        let restoring = self.restorer.lock().wanted();
        let mut paused = TopicPartitionList::new();
        for id in restoring {
            for input in self.topics_of(id) {
                if tpl
                    .find_partition(input, partition_id(id.partition))
                    .is_some()
                {
                    paused.add_partition(input, partition_id(id.partition));
                }
            }
        }
        if paused.count() > 0
            && let Err(err) = consumer.pause(&paused)
        {
            self.fail(convert("pausing the partitions of restoring tasks", err));
        }
    }

    /// The group's committed offsets of the input partitions of tasks `ids`, by (task, topic
    /// index); empty when they cannot be read. A coordinator that moved or is down is waited
    /// for, up to the request timeout.
    pub(super) fn group_offsets(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        ids: &[TaskId],
    ) -> BTreeMap<(TaskId, usize), u64> {
        let mut tpl = TopicPartitionList::new();
        for &id in ids {
            self.add_partitions(&mut tpl, id);
        }
        let committed = retry(
            "reading the group offsets (OffsetFetch)",
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
                    self.locate_topic(elem.topic(), u32::try_from(elem.partition()).ok()?)?,
                    u64::try_from(o).ok()?,
                )),
                _ => None,
            })
            .collect()
    }

    /// Closes the tasks suspended by the eager revocation before this assignment that it does
    /// not assign here again. The standbys' map stays locked meanwhile, so that no standby
    /// copy of such a task opens its stores before they close.
    pub(super) fn close_suspended(&self, tpl: &TopicPartitionList) {
        let assigned = self.partitions_of(tpl);
        let _no_copy_placed = self.standbys.lock();
        let closing: Vec<Task> = {
            let mut restorer = self.restorer.lock();
            let gone: Vec<TaskId> = restorer
                .suspended
                .keys()
                .filter(|id| !assigned.contains(id))
                .copied()
                .collect();
            gone.iter()
                .filter_map(|id| restorer.suspended.remove(id))
                .collect()
        };
        for task in closing {
            let id = task.id;
            match task.close_suspended() {
                Ok(()) => tracing::info!(task = %id, "suspended task not assigned again: closed"),
                Err(err) => self.fail(err),
            }
        }
    }

    /// Commits and closes the revoked tasks, or closes them without committing when the
    /// assignment was lost. Under the eager protocol a committed task is suspended instead
    /// of closed (see the `restorer` module): the same rebalance may assign it here again.
    pub(super) fn revoke(&self, consumer: &BaseConsumer<GroupContext>, tpl: &TopicPartitionList) {
        let eager = !matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        // A revoked task commits only once its outputs are acknowledged (under exactly-once:
        // once every task's transaction committed).
        let flushed = self.commit_before_close(consumer);
        let lost = consumer.assignment_lost() || flushed.is_err();
        match flushed {
            Ok(()) => {}
            Err(err) if self.migrated(&err) => {
                tracing::warn!(%err, "transaction fenced while tasks were revoked");
                self.migrated.store(true, Ordering::Relaxed);
            }
            Err(err) if self.revives(&err) => {
                // The revoked tasks close uncommitted; the others go back to their last
                // commit at the next poll.
                tracing::warn!(%err, "outputs timed out while tasks were revoked");
                self.outputs_lost.store(true, Ordering::Relaxed);
            }
            Err(err) => self.fail(err),
        }
        for id in self.partitions_of(tpl) {
            {
                let mut restorer = self.restorer.lock();
                if let Some(restoring) = restorer.tasks.get_mut(&id) {
                    restoring.revoked = true;
                    // The revocation ends after any fence of the task under way here: the
                    // new owner's fence is the last.
                    while restorer.fencing.contains(&id) {
                        self.fences_done.wait(&mut restorer);
                    }
                    continue;
                }
            }
            let Some(mut task) = self.tasks.lock().remove(&id) else {
                continue;
            };
            if lost || task.is_poisoned() {
                // A task whose processor failed holds part of a record: never committed.
                tracing::warn!(task = %task.id, "task lost: closed without committing");
                task.abandon();
                self.event(id, TaskEventKind::Lost);
                continue;
            }
            let closed = if eager {
                match task.suspend() {
                    Ok(committed) => {
                        self.restorer.lock().suspended.insert(id, task);
                        Ok(committed)
                    }
                    Err(err) => {
                        task.abandon();
                        Err(err)
                    }
                }
            } else {
                task.close()
            };
            match closed {
                Ok(committed) => {
                    let offsets = self.group_offsets_of(id, &committed);
                    if let Err(err) = commit_group(consumer, self, &offsets) {
                        // The state holds the position; the group offset is only a floor.
                        tracing::warn!(%err, task = %id, "committing the group offset failed");
                    }
                }
                Err(err) if err.kind() == ErrorKind::Fenced => {
                    tracing::warn!(task = %id, %err, "revoked task was fenced by a newer owner");
                    self.event(id, TaskEventKind::Fenced);
                    continue;
                }
                Err(err) => self.fail(err),
            }
            self.event(id, TaskEventKind::Revoked);
        }
    }
}

impl ClientContext for GroupContext {
    /// Logs through `tracing` and keeps the last connection failure (see
    /// [`Shared::connection`](super::shared::Shared::connection)).
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.shared.connection.log(level, fac, log_message);
    }

    /// Logs through `tracing` and keeps the text of an authentication error (see
    /// [`Shared::connection`](super::shared::Shared::connection)).
    fn error(&self, error: KafkaError, reason: &str) {
        self.shared.connection.error(error, reason);
    }

    /// librdkafka's statistics (every `statistics.interval.ms`): each task's lag, the records
    /// of its input partitions past the consumer's position.
    fn stats(&self, statistics: Statistics) {
        for (id, task) in self.shared.tasks.lock().iter() {
            let lags: Option<Vec<i64>> = task
                .topics
                .iter()
                .map(|input| {
                    let stats = statistics
                        .topics
                        .get(input)?
                        .partitions
                        .get(&partition_id(id.partition))?;
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
            Rebalance::Assign(tpl) => {
                // An assignment is an answer of the group coordinator.
                self.shared.connection.answered();
                self.shared.close_suspended(tpl);
                self.shared.assign(consumer, tpl);
            }
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
