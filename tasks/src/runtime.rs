//! The runtime: [`Application`], one instance of a partitioned application, and what it runs
//! on: the state the poll loop and the rebalance callbacks share ([`shared`]), the restorer,
//! the standby copies, the outputs, the calls of user code and what answers their failures,
//! and the application's state.

mod batch;
mod commit;
mod coordinator;
pub mod driven;
mod exactly_once;
mod failures;
pub(crate) mod global;
pub mod handlers;
pub(crate) mod lifecycle;
pub(crate) mod outputs;
mod parallel;
mod processing;
mod purge;
mod rebalance;
pub(crate) mod restorer;
mod restores;
pub(crate) mod shared;
pub(crate) mod standby;
mod standbys;

pub use batch::ProcessorPool;
use standbys::StandbyThread;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use statestore_changelog::kafka_util::WatchedContext;
use statestore_changelog::{
    KafkaClients, NoopRestoreListener, RestoreListener, StateDirectory, TaskId,
};
use store_api::{Error, ErrorKind, Result};

use crate::config::TasksConfig;
use crate::group::client_config::{client_prefix, consumer_client_id, consumer_config};
use crate::group::topics::{self, convert};
use crate::processor::{Processor, ProcessorContext};
use crate::queries::{Queries, QueryState, describes_group};
use crate::runtime::coordinator::{GroupConsumer, commit_group};
use crate::runtime::global::GlobalStores;
use crate::runtime::handlers::{ConfiguredHandler, ErrorHandler, Failure};
use crate::runtime::lifecycle::{AppState, StateListener};
use crate::runtime::outputs::Outputs;
use crate::runtime::purge::Purger;
use crate::runtime::restorer::Restorer;
use crate::runtime::shared::{GroupCommits, GroupContext, Shared};
use crate::runtime::standby::Standbys;
use crate::topology::Topology;
use crate::topology::graph::TaskGraph;
use crate::{TaskEvent, TaskEventKind};
use commit::{commit_tasks, revive_if_outputs_lost, revive_on_timeout};
use processing::{process_message, punctuate_wall_clock};

/// How often wall-clock punctuators are looked at: their time resolution, and not once per
/// record, which would lock every task for each.
pub(crate) const WALL_CLOCK_CHECK_INTERVAL: Duration = Duration::from_millis(1);

/// `timeout` and 50 us more, unless zero. rdkafka's consumer poll waits in whole milliseconds
/// and then polls without waiting until its deadline has passed, a busy loop through the last
/// fraction of a millisecond of every wait; a deadline just past a whole millisecond is
/// reached by the wait itself (a wake-up is late by the timer slack, 50 us).
pub(crate) fn past_whole_ms(timeout: Duration) -> Duration {
    if timeout.is_zero() {
        timeout
    } else {
        timeout + Duration::from_micros(50)
    }
}

/// One instance of a partitioned application: a member of the consumer group
/// `application_id`, owning the tasks of the partitions assigned to it.
pub struct Application {
    consumer: GroupConsumer,
    /// The input partitions' own queues, with several processing threads.
    queues: batch::PartitionQueues,
    shared: Arc<Shared>,
    last_commit: Instant,
    /// Deletes what the tasks committed past in the repartition topics.
    purger: Option<Purger>,
    last_cleanup: Instant,
    /// Keeps the standby copies and the group's description for queries, when the
    /// configuration needs them (see the `standbys` module); stopped by `close`.
    standbys: Option<StandbyThread>,
    /// When the tasks' wall-clock punctuators were last looked at.
    last_wall_clock: Instant,
    /// Answers failures of the processors.
    handler: Box<dyn ErrorHandler>,
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
        // Every client of this instance, the changelogs' too, is named after this prefix.
        let mut config = config;
        let prefix = client_prefix(&config);
        config
            .properties
            .insert("client.id".to_owned(), prefix.clone());
        if let Some(endpoint) = &config.application_server {
            crate::group::endpoint::validate(endpoint)?;
        }
        let inputs = config.input_topics.clone();
        let state = StateDirectory::open(&config.state_dir, &config.application_id)?;
        let clients = config
            .stores
            .first()
            .map(|store| KafkaClients::new(&config.changelog_config(store, 1)))
            .ok_or_else(|| Error::invalid("no store is configured"))??;
        let partitions = topics::prepare(&clients, &config)?;
        let purger = Purger::start(&config)?;
        if config.exactly_once() {
            let id = exactly_once::transactional_id(&config, &state)?;
            clients.set_transactional(&id, config.transaction_timeout())?;
        }
        let tasks = Arc::new(Mutex::new(std::collections::BTreeMap::new()));
        let rebalances = Arc::new(AtomicU64::new(0));
        let queries = Arc::new(QueryState::new(
            config.clone(),
            partitions,
            Arc::clone(&tasks),
            Arc::clone(&rebalances),
        ));
        let shared = Arc::new(Shared {
            inputs: inputs.clone(),
            shapes: config.task_shapes(),
            partitions,
            state,
            tasks,
            error: Mutex::new(None),
            events: Mutex::new(std::collections::VecDeque::new()),
            lifecycle: crate::runtime::lifecycle::Lifecycle::new(),
            listener: Mutex::new(listener),
            standbys: Mutex::new(Standbys::new()),
            client_id: consumer_client_id(&prefix, config.application_server.as_deref()),
            rebalances,
            clients,
            outputs: Mutex::new(Outputs::new(
                config.production_error,
                config.key_partitioner,
            )),
            restorer: Mutex::new(Restorer::new()),
            fences_done: parking_lot::Condvar::new(),
            restores_finished: AtomicU64::new(0),
            outputs_lost: AtomicBool::new(false),
            migrated: AtomicBool::new(false),
            queries,
            connection: WatchedContext::default(),
            decided: Mutex::new(std::collections::BTreeMap::new()),
            group_commits: GroupCommits::default(),
            config,
        });
        let mut consumer: BaseConsumer<GroupContext> = consumer_config(&shared.config)
            .set("client.id", &shared.client_id)
            .create_with_context(GroupContext {
                shared: Arc::clone(&shared),
            })
            .map_err(|err| convert("creating the group consumer", err))?;
        let queues = batch::PartitionQueues::default();
        if shared.config.stream_threads > 1 {
            queues.watch_consumer(&mut consumer);
        }
        let consumer = Arc::new(consumer);
        shared.group_commits.set_consumer(&consumer);
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
        let handler = Box::new(ConfiguredHandler {
            processing: shared.config.processing_error,
            deserialization: shared.config.deserialization_error,
        });
        let standbys = describes_group(&shared.config)
            .then(|| StandbyThread::start(Arc::clone(&consumer), Arc::clone(&shared)))
            .transpose()?;
        Ok(Application {
            consumer: GroupConsumer::new(consumer),
            queues,
            shared,
            last_commit: Instant::now(),
            purger,
            last_cleanup: Instant::now(),
            standbys,
            last_wall_clock: Instant::now(),
            handler,
            closed: false,
        })
    }

    /// Replaces the handler of failed records, which the configuration's
    /// [`processing_error`](TasksConfig::processing_error) and
    /// [`deserialization_error`](TasksConfig::deserialization_error) make by default (see
    /// the [`handlers`](crate::handlers) module). Its `DeadLetter` answers need
    /// [`dead_letter_topic`](TasksConfig::dead_letter_topic); without one they skip the
    /// record as `Continue` does.
    pub fn set_error_handler(&mut self, handler: impl ErrorHandler + 'static) {
        self.handler = Box::new(handler);
    }

    /// Answers a failure of the processor (see [`failures::handle`]). Returns whether the
    /// failed task was rewound to its last commit (its records after the failed one come
    /// again from the consumer); under exactly-once the open transaction is then aborted and
    /// every other task goes back to its last commit too.
    fn handle_failure(&self, failure: Failure) -> Result<bool> {
        let id = failure.task;
        let handled = failures::handle(&self.consumer, &self.shared, &*self.handler, failure)?;
        if handled.rewound {
            exactly_once::abort_after_rewind(&self.consumer, &self.shared, id);
        }
        // A task dropped meanwhile (fenced) is another member's: its dead letter is too.
        let owned = self.shared.tasks.lock().contains_key(&id);
        if let (Some(letter), true) = (handled.dead_letter, owned) {
            self.shared.outputs.lock().pending().push(letter);
        }
        Ok(handled.rewound)
    }

    /// The number of tasks: the input topics' partition count.
    pub fn partitions(&self) -> u32 {
        self.shared.partitions
    }

    /// The tasks this instance owns now.
    pub fn active_tasks(&self) -> Vec<TaskId> {
        self.shared.tasks.lock().keys().copied().collect()
    }

    /// The tasks this instance keeps a standby copy of now.
    pub fn standby_tasks(&self) -> Vec<TaskId> {
        self.shared.standbys.lock().keys().copied().collect()
    }

    /// A handle for interactive queries from any thread (see [`Queries`]).
    pub fn queries(&self) -> Queries {
        Queries::new(&self.shared.queries)
    }

    /// Output records that were not delivered: dropped under
    /// [`ProductionErrorPolicy::Continue`](crate::ProductionErrorPolicy::Continue).
    pub fn dropped_outputs(&self) -> u64 {
        self.shared.outputs.lock().dropped()
    }

    /// The task events since the last call, oldest first: the latest 1024 of them.
    pub fn take_events(&self) -> Vec<TaskEvent> {
        std::mem::take(&mut *self.shared.events.lock()).into()
    }

    /// The application's state now.
    pub fn state(&self) -> AppState {
        self.shared.lifecycle.state()
    }

    /// Tells `listener` of every change of the application's state from now on (see
    /// [`StateListener`]), replacing any listener set before.
    pub fn set_state_listener(&self, listener: impl StateListener + 'static) {
        self.shared.lifecycle.set_listener(Box::new(listener));
    }

    /// Moves the state on after a poll: `Error` when it failed, `Running` once the group
    /// assigned this instance its partitions (none, possibly) and no assigned task is
    /// restoring, `Rebalancing` before.
    fn after_poll<T>(&self, polled: Result<T>) -> Result<T> {
        let assigned = self.shared.rebalances.load(Ordering::Relaxed) > 0;
        match &polled {
            Err(Error::Closed) => {}
            Err(_) => self.shared.lifecycle.to(AppState::Error),
            Ok(_) if assigned && self.shared.restorer.lock().tasks.is_empty() => {
                self.shared.lifecycle.to(AppState::Running);
            }
            Ok(_) => self.shared.lifecycle.to(AppState::Rebalancing),
        }
        polled
    }

    /// One step of a loop the caller drives, with one processor for every task on the calling
    /// thread: serves rebalances and processes at most one record with `processor`, waiting
    /// up to `timeout` for it; starts the tasks restored meanwhile ([`Processor::init`]),
    /// calls the punctuators that came due, and commits when the commit interval has passed.
    /// Returns whether a record was processed. [`run_tasks`](Application::run_tasks) is the
    /// usual way to run; [`poll_tasks`](Application::poll_tasks) is its step.
    ///
    /// # Errors
    /// `InvalidArgument` when [`stream_threads`](TasksConfig::stream_threads) is above 1 (one
    /// processor cannot serve several threads: use `poll_tasks`). The first error of a
    /// rebalance (a task that could not be restored or committed), of the processor under
    /// the `fail` answer and `shutdown_client` (see the [`handlers`](crate::handlers) module),
    /// of a commit, or of the consumer.
    pub fn poll<P>(&mut self, timeout: Duration, processor: &mut P) -> Result<bool>
    where
        P: Processor + ?Sized,
    {
        let polled = self.poll_once(timeout, processor);
        self.after_poll(polled)
    }

    fn poll_once<P>(&mut self, timeout: Duration, processor: &mut P) -> Result<bool>
    where
        P: Processor + ?Sized,
    {
        if self.closed {
            return Err(Error::Closed);
        }
        if self.shared.config.stream_threads > 1 {
            return Err(Error::invalid(format!(
                "poll runs one processor for every task on the calling thread, so it cannot \
                 use stream_threads = {}: run with run_tasks or poll_tasks",
                self.shared.config.stream_threads
            )));
        }
        let polled = match self.consumer.poll(past_whole_ms(timeout)) {
            Some(Ok(message)) => Some(message),
            Some(Err(KafkaError::PartitionEOF(_))) | None => None,
            Some(Err(err)) => {
                self.shared.consumer_error(err);
                None
            }
        };
        if let Some(err) = self.shared.error.lock().take() {
            return Err(err);
        }
        revive_if_outputs_lost(&self.consumer, &self.shared);
        self.shared.finish_restores(&self.consumer, &mut |_| {})?;
        let (processed, full) = match polled {
            None => (false, false),
            Some(message) => {
                let processed = {
                    let mut outputs = self.shared.outputs.lock();
                    process_message(&self.shared, &message, outputs.pending(), processor)
                };
                drop(message);
                match processed {
                    Ok(processed) => processed,
                    Err(failure) => {
                        self.handle_failure(*failure)?;
                        (false, false)
                    }
                }
            }
        };
        if self.last_wall_clock.elapsed() >= WALL_CLOCK_CHECK_INTERVAL {
            // Starts idle tasks too, so that their wall-clock punctuators run without records.
            let punctuated = punctuate_wall_clock(
                &self.shared,
                self.shared.outputs.lock().pending(),
                processor,
            );
            if let Err(failure) = punctuated {
                self.handle_failure(*failure)?;
            }
            self.last_wall_clock = Instant::now();
        }
        self.send_outputs()?;
        self.maintain(full)?;
        Ok(processed)
    }

    /// Hands the processors' outputs to the producer; a timeout revives every task (see
    /// [`revive_on_timeout`]).
    fn send_outputs(&self) -> Result<()> {
        match self.shared.send_outputs() {
            Ok(()) => Ok(()),
            Err(err) => revive_on_timeout(&self.consumer, &self.shared, err),
        }
    }

    /// What every poll does after processing: commits when a store is `full` or the commit
    /// interval has passed. (The standby copies are kept on a thread of their own.)
    fn maintain(&mut self, full: bool) -> Result<()> {
        if full || self.last_commit.elapsed() >= self.shared.config.effective_commit_interval() {
            self.commit()?;
        }
        Ok(())
    }

    /// Processes every record with a copy of `process` per task until `stop` is set, then
    /// closes: [`run_tasks`](Application::run_tasks) with a supplier that clones `process`.
    ///
    /// # Errors
    /// As [`run_tasks`](Application::run_tasks).
    pub fn run<F>(self, stop: &AtomicBool, process: F) -> Result<()>
    where
        F: FnMut(&mut ProcessorContext<'_>) -> Result<()> + Clone + Send + Sync,
    {
        self.run_tasks(stop, move |_| process.clone())
    }

    /// As [`run`](Application::run), with a [`Processor`] that may punctuate: each task gets a
    /// clone of `processor`, whose [`init`](Processor::init) runs before its first record.
    ///
    /// # Errors
    /// As [`run_tasks`](Application::run_tasks).
    pub fn run_processor<P>(self, stop: &AtomicBool, processor: P) -> Result<()>
    where
        P: Processor + Clone + Send + Sync,
    {
        self.run_tasks(stop, move |_| processor.clone())
    }

    /// Processes every record until `stop` is set, then closes: the one way an application
    /// runs. Each task gets its own processor, made by `supplier` when the task starts here
    /// (see [`ProcessorPool`]), and the tasks are processed on
    /// [`stream_threads`](TasksConfig::stream_threads) threads, in batches of up to
    /// [`max_poll_records`](TasksConfig::max_poll_records).
    ///
    /// # Errors
    /// As [`poll_tasks`](Application::poll_tasks) and [`close`](Application::close).
    pub fn run_tasks<P, S>(mut self, stop: &AtomicBool, supplier: S) -> Result<()>
    where
        P: Processor + Send,
        S: Fn(TaskId) -> P + Sync,
    {
        let mut pool = ProcessorPool::new(supplier);
        while !stop.load(Ordering::Relaxed) {
            if let Err(err) = self.poll_tasks(Duration::from_millis(100), &mut pool) {
                let _ = self.close();
                return Err(err);
            }
        }
        self.close()
    }

    /// Runs `topology` until `stop` is set, then closes: each task makes its own processors
    /// from it (see the [`topology`](crate::topology) module). The application's
    /// configuration must come from [`Topology::configure`](crate::topology::Topology::configure).
    ///
    /// # Errors
    /// `InvalidArgument` for a configuration that does not match the topology, or a topology
    /// this version cannot run yet; a global store that cannot be opened or restored;
    /// otherwise as [`run_tasks`](Application::run_tasks).
    pub fn run_topology(self, stop: &AtomicBool, topology: Topology) -> Result<()> {
        topology.check(&self.shared.config)?;
        // Restored whole before any task starts.
        let globals = GlobalStores::start(&self.shared.config, &topology)?;
        let reads = globals.as_ref().map(GlobalStores::reads);
        self.shared.queries.set_globals(reads.clone());
        let topology = Arc::new(topology);
        let application_id = self.shared.config.application_id.clone();
        let ran = self.run_tasks(stop, |id| {
            TaskGraph::new(Arc::clone(&topology), reads.clone(), &application_id, id)
        });
        if let Some(globals) = &globals {
            globals.stop();
        }
        ran
    }

    /// Commits every task: outputs flushed, then each task's stores with its position (the
    /// tasks in parallel, each on a thread of its own), then the group offsets (a failure there is logged: the stores hold the positions). A task
    /// whose changelog a newer owner fenced is dropped as lost. Also removes the directories
    /// of tasks unassigned for longer than `state_cleanup_delay`.
    ///
    /// # Errors
    /// The first error of a flush or a store commit (the other tasks commit regardless).
    pub fn commit(&mut self) -> Result<()> {
        commit_tasks(&self.consumer, &self.shared)?;
        self.last_commit = Instant::now();
        if let Some(purger) = &mut self.purger {
            let shared = &self.shared;
            purger.maybe_purge(|| shared.committed_repartition_positions());
        }
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
    /// A static member (`group_instance_id` set) does not leave: the group keeps its
    /// partitions for it until the session timeout, so an instance that restarts within it
    /// gets them back without a rebalance.
    ///
    /// A close never hangs on unreachable brokers: the commit of the group offsets waits up
    /// to the request timeout, and one without an answer by then is logged and left (the
    /// stores hold the tasks' positions); the drop of the application waits as long again
    /// for the group consumer's close, which then goes on in the background.
    ///
    /// # Errors
    /// The first commit error; every task is closed regardless.
    pub fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.shared.lifecycle.to(AppState::PendingShutdown);
        if let Some(standbys) = self.standbys.take() {
            // Before the copies are closed, and before the consumer it describes the group
            // with goes away.
            standbys.stop();
        }
        let closed = self.close_tasks();
        self.shared.lifecycle.to(AppState::NotRunning);
        closed
    }

    fn close_tasks(&mut self) -> Result<()> {
        self.shared.queries.close();
        self.shared
            .abandon_restores(self.shared.config.request_timeout());
        let flushed = self.shared.commit_before_close(&self.consumer);
        let tasks = std::mem::take(&mut *self.shared.tasks.lock());
        // Revoked already (their event told), their group offsets committed then: another
        // member may own them by now, so they only close.
        let suspended = std::mem::take(&mut self.shared.restorer.lock().suspended);
        let standbys = std::mem::take(&mut *self.shared.standbys.lock());
        let mut first_error = flushed.err();
        for slot in standbys.into_values() {
            if let Err(err) = slot.retire(&self.shared.queries) {
                first_error = first_error.or(Some(err));
            }
        }
        let mut offsets = Vec::new();
        for task in suspended.into_values() {
            if let Err(err) = task.close_suspended() {
                first_error = first_error.or(Some(err));
            }
        }
        for (id, task) in tasks {
            if task.is_poisoned() || first_error.is_some() {
                task.abandon();
                self.shared.event(id, TaskEventKind::Lost);
                continue;
            }
            match task.close() {
                Ok(committed) => offsets.extend(self.shared.group_offsets_of(id, &committed)),
                Err(err) if err.kind() == ErrorKind::Fenced => {
                    tracing::warn!(task = %id, %err, "task fenced by a newer owner on close");
                    self.shared.event(id, TaskEventKind::Fenced);
                    continue;
                }
                Err(err) => first_error = first_error.or(Some(err)),
            }
            self.shared.event(id, TaskEventKind::Revoked);
        }
        if let Err(err) = commit_group(&self.consumer, &self.shared, &offsets) {
            // The tasks closed committed: their stores hold their positions, which a new
            // owner resumes from; the group offsets are only a floor. Under at-least-once a
            // new owner without the stores (or a reader of the group offsets) may process
            // records after the floor again, but never skips one.
            tracing::warn!(%err, "committing the group offsets on close failed; closing anyway");
        }
        // For a static member this sends no LeaveGroup: librdkafka leaves only once the
        // revocation is served, which after `closed` is set happens only when the consumer is
        // dropped and closes, and then it skips LeaveGroup for a static member (KIP-345).
        self.consumer.unsubscribe();
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Application {
    /// Closes the application, then its group consumer, waiting for the consumer's close up to
    /// the request timeout (see `GroupConsumer::close_within`).
    fn drop(&mut self) {
        if let Err(err) = self.close() {
            tracing::warn!(%err, "closing a dropped application");
        }
        // They own the consumer too: its close waits for its last owner.
        self.queues = batch::PartitionQueues::default();
        let timeout = self.shared.config.request_timeout();
        self.consumer
            .close_within(&self.shared.group_commits, timeout);
    }
}
