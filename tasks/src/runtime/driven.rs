//! A task driven from outside the Kafka runtime: the in-memory side of the runtime's boundary,
//! for the test driver (`statestore-test-driver`). A [`DrivenTask`] is the runtime's own
//! task (its stores, position, commits and rewinds), fed records by its caller and processed
//! by the runtime's own calls of user code and answers to its failures; only the consumer,
//! the producer and the group's offsets are left to the caller.

use std::sync::Arc;

use statestore_changelog::{NoopRestoreListener, StateDirectory, TaskId};
use store_api::{Error, Result};

use crate::config::TasksConfig;
use crate::processor::{Processor, store_named, store_of};
use crate::record::InputRecord;
use crate::runtime::failures::{Answer, answer};
use crate::runtime::handlers::{ConfiguredHandler, ErrorHandler, Failure, decide};
use crate::runtime::outputs::OutputRecord;
use crate::runtime::processing::{process_record, punctuate_task_wall_clock};
use crate::state::changelogs::ChangelogOpener;
use crate::state::kv::TaskStore;
use crate::state::stores::{StoreHandle, StoreType};
use crate::state::task::{FenceGate, Opening, Task};
use crate::topology::Topology;
use crate::topology::graph::TaskGraph;

/// Fences every changelog: a driven task is its driver's until it is closed.
struct Owned;

impl FenceGate for Owned {
    fn fence(&self, _: TaskId, fence: &mut dyn FnMut() -> Result<u64>) -> Result<u64> {
        fence()
    }
}

/// What a call of [`DrivenTask::process`] did with its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processed {
    /// The processor processed it, or the error handler said to skip it after a failure
    /// (its dead letter, if any, is among the outputs).
    Done,
    /// The task had processed it already, or it is poisoned: nothing happened.
    Passed,
    /// The failure's answer took the task back to its last commit (see the
    /// [`handlers`](crate::handlers) module): the caller feeds it again every record from
    /// [`next_offset`](DrivenTask::next_offset) of each of its topics.
    Rewound,
}

/// One task, opened and restored as the Kafka runtime opens it, fed by its caller.
pub struct DrivenTask {
    task: Task,
    processor: Box<dyn Processor>,
}

impl std::fmt::Debug for DrivenTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrivenTask")
            .field("id", &self.task.id)
            .finish_non_exhaustive()
    }
}

/// The error handler `config` describes: its `processing_error` and `deserialization_error`.
pub fn configured_handler(config: &TasksConfig) -> Box<dyn ErrorHandler> {
    Box::new(ConfiguredHandler {
        processing: config.processing_error,
        deserialization: config.deserialization_error,
    })
}

/// Checks that `config` (from [`Topology::configure`]) matches `topology`, as
/// [`Application::run_topology`](crate::Application::run_topology) does.
///
/// # Errors
/// `InvalidArgument` for a configuration that does not match.
pub fn check_topology(topology: &Topology, config: &TasksConfig) -> Result<()> {
    topology.check(config)
}

impl DrivenTask {
    /// Opens and restores every store of task `id` (its changelogs opened through
    /// `changelogs`, with `partitions` partitions), processed by `processor`.
    ///
    /// # Errors
    /// As the runtime's opening of a task: the state directory, a backend, a restore.
    pub fn open(
        state: &StateDirectory,
        config: &TasksConfig,
        changelogs: &dyn ChangelogOpener,
        (id, partitions): (TaskId, u32),
        processor: Box<dyn Processor>,
    ) -> Result<DrivenTask> {
        let opening = Opening {
            listener: &mut NoopRestoreListener,
            gate: &Owned,
        };
        let task = Task::open(state, config, changelogs, id, partitions, opening)?;
        Ok(DrivenTask { task, processor })
    }

    /// [`open`](DrivenTask::open) with the task's nodes of `topology` as its processor, made
    /// as the runtime makes them (without global stores).
    ///
    /// # Errors
    /// As [`open`](DrivenTask::open).
    pub fn open_topology(
        state: &StateDirectory,
        config: &TasksConfig,
        changelogs: &dyn ChangelogOpener,
        (id, partitions): (TaskId, u32),
        topology: &Arc<Topology>,
    ) -> Result<DrivenTask> {
        let graph = TaskGraph::new(Arc::clone(topology), None, &config.application_id, id);
        Self::open(state, config, changelogs, (id, partitions), Box::new(graph))
    }

    /// The task.
    pub fn id(&self) -> TaskId {
        self.task.id
    }

    /// Its input topics, in the configuration's order.
    pub fn topics(&self) -> &[String] {
        &self.task.topics
    }

    /// The next offset to process in input topic `topic` (`None`: from the start).
    pub fn next_offset(&self, topic: &str) -> Option<u64> {
        let index = self.task.topics.iter().position(|t| t == topic)?;
        self.task.next_offset(index)
    }

    /// The wall clock the task's punctuators are scheduled from, from now on (the system's
    /// until it is set): a driver that keeps its own clock sets it before each call.
    pub fn set_wall_clock(&mut self, now: i64) {
        self.task.punctuators.borrow_mut().set_wall_clock(now);
    }

    /// Processes `record`, at `offset` of the task's partition of its topic, as the runtime
    /// does (stream-time punctuators included); a failure is answered with `handler` under
    /// `config`'s policies, and a dead letter joins `outputs`.
    ///
    /// # Errors
    /// `InvalidArgument` for a topic the task does not read; the failure's error when the
    /// answer is to fail (`shutdown_client`): the task stays poisoned.
    pub fn process(
        &mut self,
        (offset, record): (u64, &dyn InputRecord),
        config: &TasksConfig,
        handler: &dyn ErrorHandler,
        outputs: &mut Vec<OutputRecord>,
    ) -> Result<Processed> {
        let Some(topic) = self.task.topics.iter().position(|t| t == record.topic()) else {
            return Err(Error::invalid(format!(
                "task {} reads no topic {:?}",
                self.task.id,
                record.topic()
            )));
        };
        let place = (self.task.id.partition, topic, offset);
        match process_record(&mut self.task, place, record, outputs, &mut *self.processor) {
            Ok((true, _)) => Ok(Processed::Done),
            Ok((false, _)) => Ok(Processed::Passed),
            Err(failure) => self.answer(*failure, config, handler, outputs),
        }
    }

    /// Calls the wall-clock punctuators due at `now` (milliseconds since the epoch), first
    /// initialising the task if it has not started, as the runtime does.
    ///
    /// # Errors
    /// As [`process`](DrivenTask::process).
    pub fn punctuate_wall_clock(
        &mut self,
        now: i64,
        config: &TasksConfig,
        handler: &dyn ErrorHandler,
        outputs: &mut Vec<OutputRecord>,
    ) -> Result<Processed> {
        self.set_wall_clock(now);
        match punctuate_task_wall_clock(&mut self.task, outputs, &mut *self.processor, now) {
            Ok(()) => Ok(Processed::Done),
            Err(failure) => self.answer(*failure, config, handler, outputs),
        }
    }

    fn answer(
        &mut self,
        failure: Failure,
        config: &TasksConfig,
        handler: &dyn ErrorHandler,
        outputs: &mut Vec<OutputRecord>,
    ) -> Result<Processed> {
        let action = decide(handler, &failure);
        match answer(config, action, failure, Some(&mut self.task))? {
            Answer::GoesOn(letter) => {
                outputs.extend(letter);
                Ok(Processed::Done)
            }
            Answer::Rewind(skip) => {
                self.task.rewind()?;
                if let Some(((topic, offset), letter)) = skip {
                    self.task.skip(topic, offset, letter);
                }
                Ok(Processed::Rewound)
            }
        }
    }

    /// Starts the task, where its stores hold no position for an input topic, from the
    /// group's committed offset of it (`floors`, by the task's topics), as the runtime does
    /// after a restore.
    pub fn start_from(&mut self, floors: &[Option<u64>]) {
        self.task.start_from(floors);
    }

    /// Whether a store's buffer is full or a punctuator wrote: the task should commit now.
    pub fn needs_commit(&self) -> bool {
        self.task.needs_commit()
    }

    /// Commits the task's stores with its position when a commit is due, as the runtime
    /// does under `at_least_once` once its outputs are flushed; returns whether it committed.
    /// A poisoned task never commits.
    ///
    /// # Errors
    /// A store's or the checkpoint's error.
    pub fn commit(&mut self) -> Result<bool> {
        if !self.task.commit_due() {
            return Ok(false);
        }
        self.task.commit()?;
        Ok(true)
    }

    /// The task's key-value store `name`, read and written as its processor does (reads see
    /// the writes not committed yet).
    ///
    /// # Errors
    /// `InvalidArgument` for a store that is not configured or not a key-value store.
    pub fn store(&self, name: &str) -> Result<TaskStore<'_>> {
        store_named(&self.task, name)
    }

    /// The task's store `handle` refers to, as its type (a window, session, versioned, TTL
    /// or LRU store too), as [`TaskContext::store_of`](crate::TaskContext::store_of) gives it.
    ///
    /// # Errors
    /// `InvalidArgument` for a handle of a store this task does not hold.
    pub fn store_of<T: StoreType + ?Sized>(&self, handle: &StoreHandle<T>) -> Result<T::View<'_>> {
        store_of(&self.task, handle)
    }

    /// Commits and closes the task, its files kept, as a revocation does.
    ///
    /// # Errors
    /// A store's or the checkpoint's error.
    pub fn close(self) -> Result<()> {
        self.task.close().map(drop)
    }
}
