//! The driver: one runtime task per sub-topology and partition, the topics between them held
//! in memory, every record processed to the end of its repartitions inside the call that
//! pipes it.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use statestore_changelog::StateDirectory;
use statestore_tasks::driven::{DrivenTask, Processed, check_topology, configured_handler};
use statestore_tasks::topology::Topology;
use statestore_tasks::{
    ErrorHandler, MemoryChangelogs, MemoryRecord, OutputRecord, Processor, TaskId, TasksConfig,
};
use store_api::{Error, Result};
use tempfile::TempDir;

use crate::topics::{TestInputTopic, TestOutputTopic, TestRecord};

/// What makes each task's processor.
enum Processors {
    Topology(Arc<Topology>),
    Supplier(Box<dyn Fn(TaskId) -> Box<dyn Processor>>),
}

/// Sets up a [`TestDriver`]: partition counts, the state directory, the changelogs (to restart
/// on those of a driver before), the error handler.
pub struct TestDriverBuilder {
    processors: Processors,
    config: TasksConfig,
    partitions: HashMap<String, u32>,
    state_dir: Option<PathBuf>,
    changelogs: MemoryChangelogs,
    handler: Option<Box<dyn ErrorHandler>>,
    wall_clock_ms: Option<i64>,
}

impl TestDriverBuilder {
    /// The driver's wall clock starts at `start_ms` (milliseconds since the epoch) rather
    /// than at the system's time (Kafka Streams' `initialWallClockTime`).
    #[must_use]
    pub fn wall_clock(mut self, start_ms: i64) -> Self {
        self.wall_clock_ms = Some(start_ms);
        self
    }

    /// Topic `topic` has `partitions` partitions (1 unless told). A repartition topic has
    /// the largest count of the application's other input topics unless told.
    #[must_use]
    pub fn partitions(mut self, topic: &str, partitions: u32) -> Self {
        self.partitions.insert(topic.to_owned(), partitions.max(1));
        self
    }

    /// The state directory (a temporary one, removed with the driver, unless told).
    #[must_use]
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// The changelogs the tasks restore from and write to: those of an earlier driver (see
    /// [`TestDriver::changelogs`]) to test a restart (new, empty ones unless told).
    #[must_use]
    pub fn changelogs(mut self, changelogs: MemoryChangelogs) -> Self {
        self.changelogs = changelogs;
        self
    }

    /// Failures of user code are answered by `handler` rather than by the configuration's
    /// `processing_error` and `deserialization_error`.
    #[must_use]
    pub fn error_handler(mut self, handler: impl ErrorHandler + 'static) -> Self {
        self.handler = Some(Box::new(handler));
        self
    }

    /// Opens (and restores) every task and initialises its processor.
    ///
    /// # Errors
    /// `InvalidArgument` for a configuration the runtime refuses
    /// ([`TasksConfig::validate`]) or that does not match the topology, or for
    /// topics of one sub-topology with different partition counts; the errors of opening a
    /// task (the state directory, a backend, a restore) and of its processor's `init`.
    pub fn build(self) -> Result<TestDriver> {
        let TestDriverBuilder {
            processors,
            mut config,
            partitions: declared,
            state_dir,
            changelogs,
            handler,
            wall_clock_ms,
        } = self;
        // As the runtime checks them, without contacting a broker.
        config.validate()?;
        if let Processors::Topology(topology) = &processors {
            check_topology(topology, &config)?;
        }
        let (temp, dir) = match state_dir {
            Some(dir) => (None, dir),
            None => {
                let temp =
                    tempfile::tempdir().map_err(|err| Error::io("a state directory", err))?;
                let dir = temp.path().to_owned();
                (Some(temp), dir)
            }
        };
        config.state_dir.clone_from(&dir);
        let state = StateDirectory::open(&dir, &config.application_id)?;
        let shapes: Vec<(u32, Vec<String>)> = if config.subtopologies.is_empty() {
            vec![(0, config.input_topics.clone())]
        } else {
            let subs = config.subtopologies.iter();
            subs.map(|sub| (sub.id, sub.input_topics.clone())).collect()
        };
        let partitions = partition_counts(&config, &declared);
        let mut readers = HashMap::new();
        let mut consumed = Vec::new();
        let mut tasks = BTreeMap::new();
        for (sub, topics) in &shapes {
            let count = co_partitioned(*sub, topics, &partitions)?;
            for topic in topics {
                readers.insert(topic.clone(), consumed.len());
                consumed.push(Consumed {
                    subtopology: *sub,
                    partitions: (0..count).map(|_| Log::default()).collect(),
                });
            }
            for partition in 0..count {
                let id = TaskId {
                    subtopology: *sub,
                    partition,
                };
                let task = match &processors {
                    Processors::Topology(topology) => DrivenTask::open_topology(
                        &state,
                        &config,
                        &changelogs,
                        (id, count),
                        topology,
                    )?,
                    Processors::Supplier(make) => {
                        DrivenTask::open(&state, &config, &changelogs, (id, count), make(id))?
                    }
                };
                let floors: Vec<Option<u64>> = topics
                    .iter()
                    .map(|topic| changelogs.committed_offset(topic, partition))
                    .collect();
                let mut task = task;
                task.start_from(&floors);
                for topic in topics {
                    let log = &mut consumed[readers[topic]].partitions[partition as usize];
                    log.base = task.next_offset(topic).unwrap_or(0);
                }
                tasks.insert(id, task);
            }
        }
        let handler = handler.unwrap_or_else(|| configured_handler(&config));
        let driver = TestDriver {
            inner: RefCell::new(Inner {
                tasks,
                config,
                handler,
                changelogs,
                readers,
                consumed,
                partitions,
                outputs: HashMap::new(),
                queue: VecDeque::new(),
                sent: Vec::new(),
                round_robin: 0,
                wall_clock_ms: wall_clock_ms.unwrap_or_else(system_clock_ms),
                _state: state,
                _temp: temp,
            }),
        };
        // As the runtime's first poll does: every task starts (its `init`) before a record.
        driver.advance_wall_clock(Duration::ZERO)?;
        Ok(driver)
    }
}

/// Each consumed topic's partition count: declared, or for a repartition topic the largest
/// of the other inputs', or 1.
fn partition_counts(config: &TasksConfig, declared: &HashMap<String, u32>) -> HashMap<String, u32> {
    let mut counts = declared.clone();
    let widest = config
        .input_topics
        .iter()
        .filter(|topic| !config.repartition_topics.contains(topic))
        .map(|topic| declared.get(topic).copied().unwrap_or(1))
        .max()
        .unwrap_or(1);
    for topic in &config.input_topics {
        let default = if config.repartition_topics.contains(topic) {
            widest
        } else {
            1
        };
        counts.entry(topic.clone()).or_insert(default);
    }
    counts
}

/// The partition count of sub-topology `sub`'s topics, which must agree.
fn co_partitioned(sub: u32, topics: &[String], partitions: &HashMap<String, u32>) -> Result<u32> {
    let mut counts = topics.iter().map(|topic| (topic, partitions[topic]));
    let Some((first, count)) = counts.next() else {
        return Err(Error::invalid(format!("sub-topology {sub} reads no topic")));
    };
    if let Some((other, different)) = counts.find(|&(_, c)| c != count) {
        return Err(Error::invalid(format!(
            "sub-topology {sub} reads {first:?} ({count} partitions) and {other:?} \
             ({different} partitions): its topics must be co-partitioned"
        )));
    }
    Ok(count)
}

/// A topology (or a processor) run in-process, without a broker, on the runtime's own tasks,
/// stores, changelogs (in memory) and error handling (see the crate docs).
pub struct TestDriver {
    inner: RefCell<Inner>,
}

/// How many times the tasks may go back to their last commit in one call of the driver.
const MAX_REWINDS: u32 = 100;

/// The system's time in milliseconds since the epoch.
fn system_clock_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// A topic the application consumes.
struct Consumed {
    /// The sub-topology that reads it.
    subtopology: u32,
    partitions: Vec<Log>,
}

/// One partition of a consumed topic: its records from offset `base` on.
#[derive(Default)]
struct Log {
    base: u64,
    records: Vec<MemoryRecord>,
}

pub(crate) struct Inner {
    /// Declared first: the tasks close before the state directory's lock is released.
    tasks: BTreeMap<TaskId, DrivenTask>,
    pub config: TasksConfig,
    handler: Box<dyn ErrorHandler>,
    changelogs: MemoryChangelogs,
    /// The index in `consumed` of each topic the application consumes.
    readers: HashMap<String, usize>,
    consumed: Vec<Consumed>,
    /// The partition count of each topic declared or consumed (others have 1).
    partitions: HashMap<String, u32>,
    /// What reached each topic the application does not consume, in the order sent.
    pub outputs: HashMap<String, VecDeque<TestRecord>>,
    /// Records of consumed topics not processed yet, by (index in `consumed`, partition,
    /// offset).
    queue: VecDeque<(usize, u32, u64)>,
    /// The outputs of the call under way (reused).
    sent: Vec<OutputRecord>,
    round_robin: u32,
    /// The driver's wall clock, in milliseconds since the epoch: the system's when it
    /// opened, moved by [`TestDriver::advance_wall_clock`] alone.
    wall_clock_ms: i64,
    /// Held for its lock, released once the tasks closed.
    _state: StateDirectory,
    _temp: Option<TempDir>,
}

impl TestDriver {
    /// A driver of `topology`, with `config` from
    /// [`Topology::configure`](statestore_tasks::topology::Topology::configure) (no broker is
    /// contacted: `bootstrap_servers` is not used), every topic of one partition.
    ///
    /// # Errors
    /// As [`TestDriverBuilder::build`].
    pub fn new(topology: Topology, config: TasksConfig) -> Result<TestDriver> {
        Self::builder(topology, config).build()
    }

    /// A driver of `topology` to set up before it opens its tasks.
    pub fn builder(topology: Topology, config: TasksConfig) -> TestDriverBuilder {
        Self::builder_of(Processors::Topology(Arc::new(topology)), config)
    }

    /// A driver of one processor over `config`'s `input_topics` and `stores`, one made per
    /// task by `supplier`.
    pub fn processor<P, F>(config: TasksConfig, supplier: F) -> TestDriverBuilder
    where
        P: Processor + 'static,
        F: Fn(TaskId) -> P + 'static,
    {
        let make = move |id| Box::new(supplier(id)) as Box<dyn Processor>;
        Self::builder_of(Processors::Supplier(Box::new(make)), config)
    }

    fn builder_of(processors: Processors, config: TasksConfig) -> TestDriverBuilder {
        TestDriverBuilder {
            processors,
            config,
            partitions: HashMap::new(),
            state_dir: None,
            changelogs: MemoryChangelogs::new(),
            handler: None,
            wall_clock_ms: None,
        }
    }

    /// Input topic `topic`, to pipe records into.
    pub fn input(&self, topic: &str) -> TestInputTopic<'_> {
        TestInputTopic::new(self, topic)
    }

    /// Output topic `topic` (any topic the application does not consume, the dead-letter
    /// topic too), to read what the application sent to it.
    pub fn output(&self, topic: &str) -> TestOutputTopic<'_> {
        TestOutputTopic::new(self, topic)
    }

    /// The changelogs the tasks write to, for a driver that restarts on them.
    pub fn changelogs(&self) -> MemoryChangelogs {
        self.inner.borrow().changelogs.clone()
    }

    /// Moves the wall clock on by `by` and calls every task's wall-clock punctuators that
    /// came due, then processes what they sent to consumed topics and commits.
    ///
    /// The driver's clock starts at the system's time when it opens (or at
    /// [`TestDriverBuilder::wall_clock`]) and moves only here: a
    /// punctuator scheduled every `interval` fires each time the clock moved by `interval`
    /// (missed calls skipped, as in production), whatever time the test takes.
    ///
    /// # Errors
    /// A failure the error handler answers with `Fail`; a commit's error; as
    /// [`TestInputTopic::pipe_input`].
    pub fn advance_wall_clock(&self, by: Duration) -> Result<()> {
        let mut inner = self.inner_mut()?;
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        inner.wall_clock_ms = inner.wall_clock_ms.saturating_add(by);
        let now = inner.wall_clock_ms;
        let ids: Vec<TaskId> = inner.tasks.keys().copied().collect();
        for id in ids {
            let inner = &mut *inner;
            let Some(task) = inner.tasks.get_mut(&id) else {
                continue;
            };
            let done =
                task.punctuate_wall_clock(now, &inner.config, &*inner.handler, &mut inner.sent);
            inner.route_sent()?;
            if done? == Processed::Rewound {
                inner.replay(id);
            }
        }
        inner.drain()?;
        inner.commit()
    }

    /// Commits and closes every task, its files kept: a driver opened on the same state
    /// directory and changelogs restores nothing, one on the changelogs alone restores them.
    ///
    /// # Errors
    /// The first error of a task's close (the others close regardless).
    pub fn close(self) -> Result<()> {
        let mut inner = self.inner.into_inner();
        let mut first = Ok(());
        for (_, task) in std::mem::take(&mut inner.tasks) {
            let closed = task.close();
            if first.is_ok() {
                first = closed;
            }
        }
        first
    }

    pub(crate) fn inner(&self) -> &RefCell<Inner> {
        &self.inner
    }

    /// The driver's state, to process records in.
    ///
    /// # Errors
    /// `InvalidArgument` while a [`DriverStore`](crate::DriverStore) of the driver is held.
    pub(crate) fn inner_mut(&self) -> Result<std::cell::RefMut<'_, Inner>> {
        self.inner.try_borrow_mut().map_err(|_| {
            Error::invalid("a DriverStore of this driver is still held: drop it before piping")
        })
    }
}

impl Inner {
    /// Puts `record` on its topic: in partition `partition`, else its key's, else the next
    /// one round robin.
    pub fn append(&mut self, mut record: MemoryRecord, partition: Option<u32>) -> Result<()> {
        let count = self.partitions.get(&record.topic).copied().unwrap_or(1);
        let partition = match (partition, &record.key) {
            (Some(p), _) if p < count => Some(p),
            (Some(p), _) => {
                return Err(Error::invalid(format!(
                    "topic {:?} has {count} partitions, not a partition {p}",
                    record.topic
                )));
            }
            (None, Some(key)) => self.config.key_partitioner.partition(key, count),
            (None, None) => None,
        }
        .unwrap_or_else(|| {
            self.round_robin = self.round_robin.wrapping_add(1);
            self.round_robin % count
        });
        if record.timestamp.is_none() {
            // As a producer stamps a record it is handed without a timestamp.
            record.timestamp = Some(self.wall_clock_ms);
        }
        if let Some(&index) = self.readers.get(&record.topic) {
            let log = &mut self.consumed[index].partitions[partition as usize];
            let offset = log.base + log.records.len() as u64;
            self.queue.push_back((index, partition, offset));
            log.records.push(record);
        } else {
            let outputs = self.outputs.entry(record.topic.clone()).or_default();
            outputs.push_back(TestRecord { partition, record });
        }
        Ok(())
    }

    /// Whether `topic` is one the application consumes.
    pub fn consumes(&self, topic: &str) -> bool {
        self.readers.contains_key(topic)
    }

    /// Puts what the last call sent on its topics.
    fn route_sent(&mut self) -> Result<()> {
        let mut sent = std::mem::take(&mut self.sent);
        let routed = sent.drain(..).try_for_each(|output| {
            let (partition, record) = output.into_input();
            self.append(record, partition)
        });
        self.sent = sent;
        routed
    }

    /// Processes every queued record, and what their processing sends to consumed topics, in
    /// order.
    pub fn drain(&mut self) -> Result<()> {
        let mut rewinds = 0;
        while let Some((index, partition, offset)) = self.queue.pop_front() {
            let consumed = &self.consumed[index];
            let id = TaskId {
                subtopology: consumed.subtopology,
                partition,
            };
            let Some(task) = self.tasks.get_mut(&id) else {
                continue;
            };
            task.set_wall_clock(self.wall_clock_ms);
            let log = &consumed.partitions[partition as usize];
            let Some(record) = offset
                .checked_sub(log.base)
                .and_then(|at| usize::try_from(at).ok())
                .and_then(|at| log.records.get(at))
            else {
                continue;
            };
            let done = task.process(
                (offset, record),
                &self.config,
                &*self.handler,
                &mut self.sent,
            );
            let full = task.needs_commit();
            self.route_sent()?;
            match done? {
                Processed::Rewound => {
                    rewinds += 1;
                    if rewinds > MAX_REWINDS {
                        // The runtime would retry for ever: a test should fail instead.
                        return Err(Error::invalid(format!(
                            "task {id} went back to its last commit {MAX_REWINDS} times in one \
                             call (replace_thread retries a record that keeps failing)"
                        )));
                    }
                    self.replay(id);
                }
                _ if full => {
                    if let Some(task) = self.tasks.get_mut(&id) {
                        task.commit()?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Queues again, first, every record of task `id` from its next offset on, as the
    /// runtime seeks a rewound task's partitions back to its last commit.
    fn replay(&mut self, id: TaskId) {
        let Some(task) = self.tasks.get(&id) else {
            return;
        };
        let consumed = &self.consumed;
        self.queue.retain(|&(index, partition, _)| {
            partition != id.partition || consumed[index].subtopology != id.subtopology
        });
        let mut again = Vec::new();
        for topic in task.topics() {
            let index = self.readers[topic];
            let log = &consumed[index].partitions[id.partition as usize];
            let end = log.base + log.records.len() as u64;
            let from = task.next_offset(topic).unwrap_or(0).max(log.base);
            again.extend((from..end).map(|offset| (index, id.partition, offset)));
        }
        for item in again.into_iter().rev() {
            self.queue.push_front(item);
        }
    }

    /// Commits every task a commit is due for, as a commit interval of 0 does, then drops
    /// the records of its topics it committed past, as the runtime purges repartition
    /// topics (nothing reads them again: a rewind goes back to the commit).
    pub fn commit(&mut self) -> Result<()> {
        for task in self.tasks.values_mut() {
            if !task.commit()? {
                continue;
            }
            let partition = task.id().partition as usize;
            for topic in task.topics() {
                let log = &mut self.consumed[self.readers[topic]].partitions[partition];
                let next = task.next_offset(topic).unwrap_or(0);
                // As the runtime commits the group's offsets after the stores.
                self.changelogs
                    .commit_offset(topic, task.id().partition, next);
                let past = usize::try_from(next.saturating_sub(log.base))
                    .unwrap_or(usize::MAX)
                    .min(log.records.len());
                log.records.drain(..past);
                log.base += past as u64;
            }
        }
        Ok(())
    }

    /// Every task.
    pub fn tasks(&self) -> impl Iterator<Item = &DrivenTask> {
        self.tasks.values()
    }
}
