//! [`Application`]: one instance of a partitioned application, and its processing loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use statestore_changelog::{
    KafkaClients, NoopRestoreListener, RestoreListener, StateDirectory, TaskId,
};
use store_api::{Error, ErrorKind, Result};

use crate::config::TasksConfig;
use crate::group::{GroupContext, Shared, commit_group, partition_id};
use crate::members;
use crate::outputs::{Output, Outputs};
use crate::restorer::Restorer;
use crate::standby::{Standby, Standbys, standby_tasks};
use crate::store::TaskStore;
use crate::task::Task;
use crate::topics::{self, convert};
use crate::{TaskEvent, TaskEventKind};

/// With `tansu_workarounds`, how long a broker may hold a fetch that finds nothing new, unless
/// the properties say otherwise: tansu 0.6 sleeps for half of it after every fetch, even one
/// that found records.
const TANSU_FETCH_WAIT_MS: &str = "20";

/// How often the group's assignment is read: standby copies follow it and catch up with their
/// changelogs, and a stale assignment is noticed.
const GROUP_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The longest the group-list request is left alone after it failed: a coordinator that cannot
/// describe groups (unpatched tansu 0.6 on SQLite, see `scripts/broker.sh`) also closes the
/// connection, which the group's heartbeats share.
const MAX_DESCRIBE_BACKOFF: Duration = Duration::from_secs(60);

/// One input record and the task it belongs to, handed to the processor.
pub struct ProcessorContext<'a> {
    task: &'a Task,
    message: &'a BorrowedMessage<'a>,
    /// The index of the record's topic among the input topics.
    topic: usize,
    offset: u64,
    partition: u32,
    outputs: &'a mut Vec<Output>,
}

impl ProcessorContext<'_> {
    /// The task: `0_<partition>`.
    pub fn task_id(&self) -> TaskId {
        TaskId::new(0, self.partition)
    }

    /// The input topic the record comes from.
    pub fn topic(&self) -> &str {
        self.message.topic()
    }

    /// The input partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The record's offset in its topic's partition.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The record's timestamp in milliseconds since the epoch, when it has one.
    pub fn timestamp(&self) -> Option<i64> {
        self.message.timestamp().to_millis()
    }

    /// The record's key.
    pub fn key(&self) -> Option<&[u8]> {
        self.message.key()
    }

    /// The record's value.
    pub fn value(&self) -> Option<&[u8]> {
        self.message.payload()
    }

    /// The task's store `name`.
    ///
    /// # Errors
    /// `InvalidArgument` for a store that is not configured.
    pub fn store(&self, name: &str) -> Result<TaskStore<'_>> {
        let slot = self
            .task
            .slots
            .iter()
            .find(|slot| slot.name == name)
            .ok_or_else(|| Error::invalid(format!("no store named {name:?} is configured")))?;
        Ok(TaskStore {
            store: &slot.store,
            replayed: self.offset < slot.position[self.topic],
        })
    }

    /// Sends a record to `topic` once the processor returns. Outputs are at least once: they
    /// are flushed before each commit, which fails if one was not acknowledged (see
    /// [`ProductionErrorPolicy`](crate::ProductionErrorPolicy)), and a record processed again
    /// after a crash sends its outputs again.
    pub fn send(&mut self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.outputs.push(Output {
            topic: topic.to_owned(),
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
        });
    }
}

/// One instance of a partitioned application: a member of the consumer group
/// `application_id`, owning the tasks of the partitions assigned to it.
pub struct Application {
    consumer: BaseConsumer<GroupContext>,
    shared: Arc<Shared>,
    last_commit: Instant,
    last_cleanup: Instant,
    last_group_check: Instant,
    /// The wait before the next `DescribeGroups`, doubled after each failure.
    describe_backoff: Duration,
    last_progress_check: Instant,
    /// The group offset of each input partition (topic, partition) owned elsewhere and
    /// lagging, and since when it has not moved.
    progress: BTreeMap<(String, u32), (Offset, Instant)>,
    /// The rebalance count when `progress` was started.
    progress_since: u64,
    closed: bool,
}

impl Application {
    /// Validates `config`, checks the input topic, creates missing changelog topics, locks
    /// the state directory and subscribes to the input topic. Tasks are opened by the
    /// rebalances that [`poll`](Application::poll) serves.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad option, a missing input topic or a changelog topic whose
    /// partition count differs from the input's; `Locked` when another process holds the
    /// state directory; `Timeout` when no broker answers.
    pub fn new(config: TasksConfig) -> Result<Application> {
        Self::with_listener(config, Box::new(NoopRestoreListener))
    }

    /// As [`new`](Application::new), reporting every restore to `listener`.
    ///
    /// # Errors
    /// As [`new`](Application::new).
    pub fn with_listener(
        config: TasksConfig,
        listener: Box<dyn RestoreListener + Send>,
    ) -> Result<Application> {
        config.validate()?;
        let inputs = config.input_topics.clone();
        let state = StateDirectory::open(&config.state_dir, &config.application_id)?;
        let clients = config
            .stores
            .first()
            .map(|store| KafkaClients::new(&config.changelog_config(store, 1)))
            .ok_or_else(|| Error::invalid("no store is configured"))??;
        let partitions = topics::prepare(&clients, &config)?;
        let shared = Arc::new(Shared {
            inputs: inputs.clone(),
            partitions,
            state,
            tasks: Mutex::new(Default::default()),
            error: Mutex::new(None),
            events: Mutex::new(Vec::new()),
            listener: Mutex::new(listener),
            standbys: Mutex::new(Standbys::new()),
            client_id: unique_client_id(&config.application_id),
            rebalances: AtomicU64::new(0),
            clients,
            outputs: Mutex::new(Outputs::new(config.production_error)),
            restorer: Mutex::new(Restorer::new()),
            config,
        });
        let consumer: BaseConsumer<GroupContext> = consumer_config(&shared.config)
            .set("client.id", &shared.client_id)
            .create_with_context(GroupContext {
                shared: Arc::clone(&shared),
            })
            .map_err(|err| convert("creating the group consumer", err))?;
        let topics: Vec<&str> = inputs.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|err| convert(&format!("subscribing to {inputs:?}"), err))?;
        tracing::info!(
            application = shared.config.application_id,
            ?inputs,
            partitions,
            "started"
        );
        Ok(Application {
            consumer,
            shared,
            last_commit: Instant::now(),
            last_cleanup: Instant::now(),
            last_group_check: Instant::now(),
            describe_backoff: GROUP_CHECK_INTERVAL,
            last_progress_check: Instant::now(),
            progress: BTreeMap::new(),
            progress_since: 0,
            closed: false,
        })
    }

    /// The number of tasks: the input topics' partition count.
    pub fn partitions(&self) -> u32 {
        self.shared.partitions
    }

    /// The tasks this instance owns now.
    pub fn active_tasks(&self) -> Vec<TaskId> {
        self.shared
            .tasks
            .lock()
            .keys()
            .map(|&p| TaskId::new(0, p))
            .collect()
    }

    /// The tasks this instance keeps a standby copy of now.
    pub fn standby_tasks(&self) -> Vec<TaskId> {
        self.shared
            .standbys
            .lock()
            .keys()
            .map(|&p| TaskId::new(0, p))
            .collect()
    }

    /// Output records that were not delivered: dropped under
    /// [`ProductionErrorPolicy::Continue`](crate::ProductionErrorPolicy::Continue).
    pub fn dropped_outputs(&self) -> u64 {
        self.shared.outputs.lock().dropped()
    }

    /// The task events since the last call, oldest first.
    pub fn take_events(&self) -> Vec<TaskEvent> {
        std::mem::take(&mut *self.shared.events.lock())
    }

    /// Serves rebalances and processes at most one record with `process`, waiting up to
    /// `timeout` for it; commits when the commit interval has passed. Returns whether a
    /// record was processed.
    ///
    /// # Errors
    /// The first error of a rebalance (a task that could not be restored or committed), of
    /// the processor (its task is then never committed again, see
    /// [`close`](Application::close)), of a commit, or of the consumer.
    pub fn poll<F>(&mut self, timeout: Duration, process: &mut F) -> Result<bool>
    where
        F: FnMut(&mut ProcessorContext<'_>) -> Result<()>,
    {
        if self.closed {
            return Err(Error::Closed);
        }
        let polled = self.consumer.poll(timeout);
        if let Some(err) = self.shared.error.lock().take() {
            return Err(err);
        }
        self.shared.finish_restores(&self.consumer)?;
        let (processed, full) = match polled {
            None => (false, false),
            Some(Err(KafkaError::PartitionEOF(_))) => (false, false),
            Some(Err(err)) => {
                // librdkafka reports transient errors (a broker reconnecting) and retries.
                tracing::debug!(%err, "consumer error");
                (false, false)
            }
            Some(Ok(message)) => {
                let mut outputs = self.shared.outputs.lock();
                process_message(&self.shared, &message, outputs.pending(), process)?
            }
        };
        self.send_outputs()?;
        if full || self.last_commit.elapsed() >= self.shared.config.commit_interval() {
            self.commit()?;
        }
        if self.shared.config.num_standby_replicas > 0
            && self.last_group_check.elapsed() >= self.describe_backoff
        {
            self.maintain_standbys()?;
            self.last_group_check = Instant::now();
        }
        if self.shared.config.tansu_workarounds
            && self.last_progress_check.elapsed() >= self.shared.config.progress_check_interval()
        {
            self.check_progress()?;
            self.last_progress_check = Instant::now();
        }
        Ok(processed)
    }

    /// Polls and processes until `stop` is set, then closes.
    ///
    /// # Errors
    /// As [`poll`](Application::poll) and [`close`](Application::close).
    pub fn run<F>(mut self, stop: &AtomicBool, mut process: F) -> Result<()>
    where
        F: FnMut(&mut ProcessorContext<'_>) -> Result<()>,
    {
        while !stop.load(Ordering::Relaxed) {
            if let Err(err) = self.poll(Duration::from_millis(100), &mut process) {
                let _ = self.close();
                return Err(err);
            }
        }
        self.close()
    }

    /// Commits every task: outputs flushed, then each task's stores with its position, then
    /// the group offsets (a failure there is logged: the stores hold the positions). A task
    /// whose changelog a newer owner fenced is dropped as lost. Also removes the directories
    /// of tasks unassigned for longer than `state_cleanup_delay`.
    ///
    /// # Errors
    /// The first error of a flush or a store commit.
    pub fn commit(&mut self) -> Result<()> {
        self.flush_outputs()?;
        let mut offsets = Vec::new();
        {
            let mut tasks = self.shared.tasks.lock();
            let mut fenced = Vec::new();
            for (&partition, task) in tasks.iter_mut() {
                if task.committed_offset == task.next_offset && !task.needs_commit() {
                    continue;
                }
                match task.commit() {
                    Ok(committed) => {
                        offsets.extend(self.shared.group_offsets_of(partition, &committed))
                    }
                    Err(err) if err.kind() == ErrorKind::Fenced => {
                        tracing::warn!(task = %task.id, %err, "task fenced by a newer owner: dropped as lost");
                        fenced.push(partition);
                    }
                    Err(err) => return Err(err),
                }
            }
            for partition in fenced {
                if let Some(task) = tasks.remove(&partition) {
                    task.abandon();
                    self.shared.event(partition, TaskEventKind::Fenced);
                }
            }
        }
        if let Err(err) = commit_group(&self.consumer, &offsets) {
            // The stores hold the positions; the group offset is a floor and for monitoring,
            // and a commit racing a rebalance is refused.
            tracing::warn!(%err, "committing the group offsets failed");
        }
        self.last_commit = Instant::now();
        self.cleanup()
    }

    fn cleanup(&mut self) -> Result<()> {
        let delay = self.shared.config.state_cleanup_delay();
        if self.last_cleanup.elapsed() < delay.min(Duration::from_secs(60)) {
            return Ok(());
        }
        self.last_cleanup = Instant::now();
        let mut assigned = self.active_tasks();
        assigned.extend(self.standby_tasks());
        let removed = self.shared.state.cleanup(&assigned, delay)?;
        if !removed.is_empty() {
            tracing::info!(?removed, "removed unassigned task directories");
        }
        Ok(())
    }

    /// Commits and closes every task (keeping their files), then leaves the group, so the
    /// other instances take the partitions over at once. A task whose processor failed is
    /// closed without committing.
    ///
    /// # Errors
    /// The first commit error; every task is closed regardless.
    pub fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.shared
            .abandon_restores(self.shared.config.request_timeout());
        let flushed = self.flush_outputs();
        let tasks = std::mem::take(&mut *self.shared.tasks.lock());
        let standbys = std::mem::take(&mut *self.shared.standbys.lock());
        let mut first_error = flushed.err();
        for standby in standbys.into_values() {
            if let Err(err) = standby.close() {
                first_error = first_error.or(Some(err));
            }
        }
        let mut offsets = Vec::new();
        for (partition, task) in tasks {
            if task.poisoned || first_error.is_some() {
                task.abandon();
                self.shared.event(partition, TaskEventKind::Lost);
                continue;
            }
            match task.close() {
                Ok(committed) => {
                    offsets.extend(self.shared.group_offsets_of(partition, &committed))
                }
                Err(err) if err.kind() == ErrorKind::Fenced => {
                    tracing::warn!(partition, %err, "task fenced by a newer owner on close");
                    self.shared.event(partition, TaskEventKind::Fenced);
                    continue;
                }
                Err(err) => first_error = first_error.or(Some(err)),
            }
            self.shared.event(partition, TaskEventKind::Revoked);
        }
        if let Err(err) = commit_group(&self.consumer, &offsets) {
            tracing::warn!(%err, "committing the group offsets on close failed");
        }
        self.consumer.unsubscribe();
        first_error.map_or(Ok(()), Err)
    }

    /// Rejoins the group when a partition owned elsewhere has records waiting and its group
    /// offset has not moved for [`TasksConfig::stall_timeout`], while this instance owned
    /// tasks and saw no rebalance: nobody processes it.
    ///
    /// tansu 0.6 gets there when the group's leader misses its session timeout (a `kill -9`,
    /// a long pause) while the group is stable and another member's heartbeat notices it: the
    /// coordinator drops the leader from the members but keeps it as the leader, so every
    /// member that rejoins is handed its previous assignment back and the dead leader's
    /// partitions belong to no one. A member that leaves makes it forget that leader, and the
    /// next join rebalances every partition.
    fn check_progress(&mut self) -> Result<()> {
        let shared = &self.shared;
        let mine: Vec<u32> = shared.tasks.lock().keys().copied().collect();
        let rebalances = shared.rebalances.load(Ordering::Relaxed);
        if mine.is_empty() || rebalances != self.progress_since {
            // A rebalance stops every partition for a while, and without an assignment of
            // its own an instance cannot tell a rebalance from a stall.
            self.progress.clear();
            self.progress_since = rebalances;
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for input in &shared.inputs {
            for partition in (0..shared.partitions).filter(|p| !mine.contains(p)) {
                tpl.add_partition(input, partition_id(partition));
            }
        }
        let timeout = shared.config.request_timeout();
        let committed = match self.consumer.committed_offsets(tpl, timeout) {
            Ok(committed) => committed,
            Err(err) => {
                tracing::debug!(%err, "reading the group offsets failed");
                return Ok(());
            }
        };
        let now = Instant::now();
        let mut stalled = Vec::new();
        let mut lagging = BTreeMap::new();
        for elem in committed.elements() {
            let Ok(partition) = u32::try_from(elem.partition()) else {
                continue;
            };
            let high = self
                .consumer
                .fetch_watermarks(elem.topic(), elem.partition(), timeout)
                .map(|(_, high)| high);
            let behind = match (elem.offset(), high) {
                (Offset::Offset(at), Ok(high)) => at < high,
                (_, Ok(high)) => high > 0,
                (_, Err(_)) => false,
            };
            if !behind {
                continue;
            }
            let key = (elem.topic().to_owned(), partition);
            let since = match self.progress.get(&key) {
                Some(&(offset, since)) if offset == elem.offset() => since,
                _ => now,
            };
            if now.duration_since(since) >= shared.config.stall_timeout() {
                stalled.push(key.clone());
            }
            lagging.insert(key, (elem.offset(), since));
        }
        self.progress = lagging;
        if stalled.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            ?stalled,
            "partitions with records waiting made no progress in the group for {:?}: the \
             coordinator may hold a stale assignment; leaving and rejoining the group",
            shared.config.stall_timeout()
        );
        self.progress.clear();
        self.rejoin()
    }

    /// Leaves the group (every task is committed and closed by the revocation) and joins it
    /// again: a leave makes tansu 0.6 forget a departed leader, so the next join rebalances
    /// every partition.
    fn rejoin(&mut self) -> Result<()> {
        self.consumer.unsubscribe();
        let deadline = Instant::now() + self.shared.config.request_timeout();
        while !self.shared.tasks.lock().is_empty() && Instant::now() < deadline {
            // A record polled here is dropped: its task is being revoked, and whoever owns
            // it next resumes from the position committed with its state.
            drop(self.consumer.poll(Duration::from_millis(100)));
        }
        if let Some(err) = self.shared.error.lock().take() {
            return Err(err);
        }
        let inputs = &self.shared.inputs;
        let topics: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.consumer
            .subscribe(&topics)
            .map_err(|err| convert(&format!("subscribing to {inputs:?} again"), err))
    }

    /// Reads the group's members and their partitions (see the `members` module), opens the
    /// standby copies this instance should keep (see the `standby` module), closes the others,
    /// and brings every copy up to the end of its changelogs.
    fn maintain_standbys(&mut self) -> Result<()> {
        let view = match members::describe(
            &self.consumer,
            &self.shared.config.application_id,
            // Co-partitioned under the range assignor: every input topic is split alike.
            &self.shared.inputs[0],
            self.shared.partitions,
            self.shared.config.assignment_strategy,
            self.shared.config.request_timeout(),
        ) {
            Ok(view) => {
                self.describe_backoff = GROUP_CHECK_INTERVAL;
                view
            }
            Err(err) => {
                // Standbys are an optimisation: without the member list, keep what there is.
                self.describe_backoff = (self.describe_backoff * 2).min(MAX_DESCRIBE_BACKOFF);
                tracing::warn!(%err, retry_in = ?self.describe_backoff, "describing the consumer group failed; standbys unchanged");
                return Ok(());
            }
        };
        let Some(view) = view else {
            // Mid-rebalance the assignment is in flux: keep the copies as they are.
            return Ok(());
        };
        let shared = &self.shared;
        let mut active: Vec<u32> = shared.tasks.lock().keys().copied().collect();
        // A restoring task's directory is its restore's until the restore ends.
        active.extend(shared.restorer.lock().tasks.keys().copied());
        let replicas = shared.config.num_standby_replicas;
        let mut wanted = standby_tasks(&view.members, &shared.client_id, replicas);
        wanted.retain(|p| !active.contains(p));
        let mut standbys = shared.standbys.lock();
        let unwanted: Vec<u32> = standbys
            .keys()
            .filter(|p| !wanted.contains(p))
            .copied()
            .collect();
        for partition in unwanted {
            if let Some(standby) = standbys.remove(&partition) {
                tracing::info!(task = %standby.id, "standby no longer wanted here");
                standby.close()?;
            }
        }
        for &partition in &wanted {
            if let std::collections::btree_map::Entry::Vacant(slot) = standbys.entry(partition) {
                let id = TaskId::new(0, partition);
                let standby = Standby::open(
                    &shared.state,
                    &shared.config,
                    &shared.clients,
                    id,
                    shared.partitions,
                )?;
                tracing::info!(task = %id, "standby opened");
                slot.insert(standby);
            }
        }
        let mut listener = shared.listener.lock();
        for standby in standbys.values_mut() {
            standby.catch_up(&mut **listener)?;
        }
        Ok(())
    }

    fn send_outputs(&mut self) -> Result<()> {
        self.shared.send_outputs()
    }

    fn flush_outputs(&mut self) -> Result<()> {
        self.shared.flush_outputs()
    }
}

impl Drop for Application {
    fn drop(&mut self) {
        if let Err(err) = self.close() {
            tracing::warn!(%err, "closing a dropped application");
        }
    }
}

/// Hands `message` to `process` with its task, unless the task already processed it. Returns
/// whether it was processed, and whether a store of its task needs a commit now.
fn process_message<F>(
    shared: &Shared,
    message: &BorrowedMessage<'_>,
    outputs: &mut Vec<Output>,
    process: &mut F,
) -> Result<(bool, bool)>
where
    F: FnMut(&mut ProcessorContext<'_>) -> Result<()>,
{
    let (Ok(partition), Ok(offset), Some(topic)) = (
        u32::try_from(message.partition()),
        u64::try_from(message.offset()),
        shared.topic_index(message.topic()),
    ) else {
        return Ok((false, false));
    };
    let mut tasks = shared.tasks.lock();
    let Some(task) = tasks.get_mut(&partition) else {
        // A record fetched before its partition was revoked.
        return Ok((false, false));
    };
    if task.next_offset[topic].is_some_and(|next| offset < next) {
        return Ok((false, false));
    }
    let mut context = ProcessorContext {
        task,
        message,
        topic,
        offset,
        partition,
        outputs,
    };
    if let Err(err) = process(&mut context) {
        task.poisoned = true;
        return Err(err);
    }
    task.next_offset[topic] = Some(offset + 1);
    Ok((true, task.needs_commit()))
}

/// A `client.id` no other instance uses: `<application_id>-<pid>-<nanoseconds>`.
fn unique_client_id(application_id: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{application_id}-{}-{nanos}", std::process::id())
}

/// Bootstrap servers, the passthrough properties and the timeouts.
pub(crate) fn base_config(config: &TasksConfig) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in &config.properties {
        client.set(key, value);
    }
    client
        .set("bootstrap.servers", &config.bootstrap_servers)
        .set("socket.timeout.ms", config.request_timeout_ms.to_string());
    client
}

/// The group consumer: no automatic commits, positions from the tasks.
fn consumer_config(config: &TasksConfig) -> ClientConfig {
    let mut client = base_config(config);
    if config.tansu_workarounds && client.get("fetch.wait.max.ms").is_none() {
        client.set("fetch.wait.max.ms", TANSU_FETCH_WAIT_MS);
    }
    client
        .set("group.id", &config.application_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", config.session_timeout_ms.to_string())
        .set(
            "heartbeat.interval.ms",
            config.heartbeat_interval_ms.to_string(),
        )
        .set(
            "max.poll.interval.ms",
            config.max_poll_interval_ms.to_string(),
        )
        .set(
            "partition.assignment.strategy",
            config.assignment_strategy.librdkafka_name(),
        );
    client
}
