//! The application's configuration, in Kafka Streams' terms, and its validation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use statestore_changelog::{KafkaConfig, LoggedStoreConfig, validate_topic};

use store_api::{Error, Result};

/// What the runtime does with a record whose processing failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorAction {
    /// The task stops at the record, uncommitted, and the
    /// [`UncaughtErrorPolicy`] decides what comes next. Kafka Streams' `FAIL`
    /// (`LogAndFailExceptionHandler`, the default).
    #[default]
    Fail,
    /// Skip the record: none of its writes or outputs remain, and the task goes on after it
    /// (see the module docs). Kafka Streams' `CONTINUE` (`LogAndContinueExceptionHandler`).
    Continue,
    /// Send the record to the dead-letter topic with the error in its headers, then skip it
    /// as [`Continue`](ErrorAction::Continue) does (KIP-1034).
    DeadLetter,
}

/// What happens after a failure its handler answered [`ErrorAction::Fail`] (and after a
/// failed or panicking [`Processor::init`](crate::Processor::init)): Kafka Streams'
/// `StreamsUncaughtExceptionHandler` responses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UncaughtErrorPolicy {
    /// The application stops: `poll` returns the error and `run` closes the instance. The
    /// failed task is closed without committing; every other task commits what it finished,
    /// its outputs delivered first. Kafka Streams' `SHUTDOWN_CLIENT`, its default.
    #[default]
    ShutdownClient,
    /// The failed task goes back to its last commit and starts again from there (its
    /// processor's `init` runs again), and the instance keeps running; its other tasks are not
    /// touched. A record that fails every time is tried again and again: Kafka Streams'
    /// `REPLACE_THREAD`, with the thread's work reduced to the one task that failed.
    ReplaceThread,
}

/// What a task does with an output record the brokers did not acknowledge (refused as too
/// large, no such topic, not authorised, timed out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProductionErrorPolicy {
    /// Stop: the commit fails, nothing of the tasks is committed past the record, and
    /// [`poll`](crate::Application::poll) returns the error; closing the application then
    /// closes its tasks without committing, so whoever runs them next processes the record
    /// again. Kafka Streams' default (`DefaultProductionExceptionHandler`: FAIL).
    #[default]
    Fail,
    /// Log the failure, count it
    /// ([`Application::dropped_outputs`](crate::Application::dropped_outputs)) and commit as if the record had been delivered:
    /// the output is lost (Kafka Streams' CONTINUE).
    Continue,
}

/// How partitions are spread over the instances of a group (librdkafka's
/// `partition.assignment.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AssignmentStrategy {
    /// Eager `range`: every rebalance revokes every partition of every member, then assigns
    /// the new split. Simple; every task closes and reopens (restoring only its tail).
    #[default]
    Range,
    /// Eager `roundrobin`.
    Roundrobin,
    /// Incremental `cooperative-sticky`: only the partitions that move are revoked.
    CooperativeSticky,
}

impl AssignmentStrategy {
    /// librdkafka's name of the strategy.
    pub fn librdkafka_name(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => "range",
            AssignmentStrategy::Roundrobin => "roundrobin",
            AssignmentStrategy::CooperativeSticky => "cooperative-sticky",
        }
    }
}

/// One state store of every task: its name, its engine and the engine's options.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSpec {
    /// The store name: the changelog topic is `<application_id>-<name>-changelog`.
    pub name: String,
    /// The backend, by name: a built-in (`rocksdb`, `redb`, `sled`, `memory`) compiled into
    /// `statestore`, or one registered with `statestore::register`.
    pub backend: String,
    /// The backend's options (`null` for its defaults).
    #[serde(default)]
    pub options: serde_json::Value,
    /// Buffering and restore options of the logged store.
    #[serde(default)]
    pub logged: LoggedStoreConfig,
    /// What the store holds: `key-value` (the default; typed and timestamped stores are views
    /// of it), `lru`, `window`, `session` or `versioned`, with the kind's options
    /// (`{ type = "window", retention_ms = 3600000 }`).
    #[serde(default)]
    pub kind: StoreKind,
    /// Whether the store has a changelog. Default true. A store that is not logged keeps its
    /// content only on this machine: writes reach its engine as they are made, it holds no
    /// input position, no standby copies it, and a task that moves starts it empty. After a
    /// crash it may hold the writes of records processed again (at least once), as Kafka
    /// Streams' stores with logging disabled.
    #[serde(default = "logging_default")]
    pub logging: bool,
    /// The replication factor of the changelog topic, when this application creates it.
    /// Default: the application's `replication_factor`.
    #[serde(default)]
    pub replication_factor: Option<i32>,
    /// Properties of the changelog topic when this application creates it, such as
    /// `min.insync.replicas` or `max.message.bytes` (`cleanup.policy` is always `compact`).
    #[serde(default)]
    pub topic_properties: BTreeMap<String, String>,
}

fn logging_default() -> bool {
    true
}

impl StoreSpec {
    /// A store `name` on `backend` with default options.
    pub fn new(name: impl Into<String>, backend: impl Into<String>) -> StoreSpec {
        StoreSpec {
            name: name.into(),
            backend: backend.into(),
            options: serde_json::Value::Null,
            logged: LoggedStoreConfig::default(),
            kind: StoreKind::KeyValue,
            logging: true,
            replication_factor: None,
            topic_properties: BTreeMap::new(),
        }
    }

    /// The same store declared as `kind`.
    pub fn with_kind(mut self, kind: StoreKind) -> StoreSpec {
        self.kind = kind;
        self
    }

    /// The same store with its changelog on or off.
    pub fn with_logging(mut self, logging: bool) -> StoreSpec {
        self.logging = logging;
        self
    }
}

/// What a store of every task holds. Typed and timestamped stores are views of a key-value
/// store ([`StoreHandle<TypedStore<..>>`](crate::StoreHandle)), so they are declared as `key-value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StoreKind {
    /// Bytes to bytes (and typed or timestamped views of them).
    #[default]
    KeyValue,
    /// A key-value store bounded to `capacity` entries, evicting the least recently used
    /// ([`LruStore`](statestore_operator_stores::LruStore)); evictions are logged deletes.
    Lru {
        /// The most entries it keeps, at least 1.
        capacity: usize,
    },
    /// A window store ([`WindowStore`](statestore_operator_stores::window::WindowStore)).
    Window {
        /// How long a window is kept after the stream time passes its start, in milliseconds.
        retention_ms: i64,
        /// The width of a segment, the unit of expiry; default half the retention, at least a
        /// minute (Kafka Streams').
        #[serde(default)]
        segment_interval_ms: Option<i64>,
        /// Keep every value put for a key and window (stream-stream joins).
        #[serde(default)]
        retain_duplicates: bool,
    },
    /// A session store ([`SessionStore`](statestore_operator_stores::session::SessionStore)).
    Session {
        /// How long a session is kept after the stream time passes its end, in milliseconds.
        retention_ms: i64,
        /// The width of a segment; default half the retention, at least a minute.
        #[serde(default)]
        segment_interval_ms: Option<i64>,
    },
    /// A versioned key-value store
    /// ([`VersionedStore`](statestore_operator_stores::versioned::VersionedStore), Kafka Streams' KIP-889).
    Versioned {
        /// How long older versions are kept behind the stream time, in milliseconds.
        history_retention_ms: i64,
    },
}

impl StoreKind {
    /// Checks the options without opening anything.
    ///
    /// # Errors
    /// `InvalidArgument` naming the bad option.
    pub(crate) fn validate(&self, store: &str) -> Result<()> {
        let bad = |why: String| Err(Error::invalid(format!("store {store:?}: {why}")));
        match *self {
            StoreKind::KeyValue => Ok(()),
            StoreKind::Lru { capacity: 0 } => {
                bad("an LRU store needs a capacity of at least 1".into())
            }
            StoreKind::Lru { .. } => Ok(()),
            StoreKind::Window {
                retention_ms,
                segment_interval_ms,
                ..
            }
            | StoreKind::Session {
                retention_ms,
                segment_interval_ms,
            } => {
                if retention_ms <= 0 {
                    return bad(format!("retention_ms must be positive, not {retention_ms}"));
                }
                match segment_interval_ms {
                    Some(interval) if interval <= 0 => bad(format!(
                        "segment_interval_ms must be positive, not {interval}"
                    )),
                    _ => Ok(()),
                }
            }
            StoreKind::Versioned {
                history_retention_ms,
            } if history_retention_ms < 0 => bad(format!(
                "history_retention_ms must not be negative, not {history_retention_ms}"
            )),
            StoreKind::Versioned { .. } => Ok(()),
        }
    }

    /// The kind's name, as the configuration spells it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            StoreKind::KeyValue => "key-value",
            StoreKind::Lru { .. } => "lru",
            StoreKind::Window { .. } => "window",
            StoreKind::Session { .. } => "session",
            StoreKind::Versioned { .. } => "versioned",
        }
    }
}

/// The configuration of a partitioned application. Deserialize it from a configuration table;
/// unknown fields are rejected. `Debug` hides the value of every secret property (see
/// [`is_secret`](statestore_changelog::is_secret)).
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// `application.id`: the consumer group id, the state directory's name and the prefix of
    /// every changelog topic. Letters, digits, `.`, `_` and `-`, as in Kafka Streams.
    pub application_id: String,
    /// The state directory: tasks live in `<state_dir>/<application_id>/<task_id>/`.
    pub state_dir: PathBuf,
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// The input topics: at least one. Several must be co-partitioned (the same partition
    /// count, records keyed and partitioned alike), as for a Kafka Streams join: task
    /// `0_<p>` owns partition `p` of each, so several need the `range` assignment strategy,
    /// the only one of librdkafka's that keeps them together.
    pub input_topics: Vec<String>,
    /// The stores of every task.
    pub stores: Vec<StoreSpec>,
    /// How often every task's stores, then the group offsets, are committed. Default 30 s.
    pub commit_interval_ms: u64,
    /// Warm copies of each task kept by other instances. Default 0.
    pub num_standby_replicas: u32,
    /// How long the directory of a task no longer assigned here is kept. Default 10 min.
    pub state_cleanup_delay_ms: u64,
    /// Tasks restored at the same time after an assignment. Default: the number of CPUs.
    pub restore_parallelism: usize,
    /// The consumer group's `session.timeout.ms`: how long a crashed instance keeps its
    /// partitions. Default 45 s (Kafka's).
    pub session_timeout_ms: u64,
    /// `heartbeat.interval.ms`. Default 3 s (Kafka's); keep it under a third of the session
    /// timeout.
    pub heartbeat_interval_ms: u64,
    /// The group consumer's `max.poll.interval.ms`: the longest the instance may go without
    /// polling before it leaves the group. Restores and standby catch-ups run off the poll
    /// loop and do not count against it. Default 300 s (Kafka's).
    pub max_poll_interval_ms: u64,
    /// How partitions are spread over instances. Default `range`.
    pub assignment_strategy: AssignmentStrategy,
    /// The longest a metadata, topic or produce request waits, in milliseconds. Default 30 s.
    pub request_timeout_ms: u64,
    /// The replication factor of changelog topics this application creates (a store's
    /// `replication_factor` overrides it); `-1` asks for the broker's
    /// `default.replication.factor`, as Kafka Streams does since 3.0. Default -1.
    pub replication_factor: i32,
    /// `min.insync.replicas` of every changelog topic this application creates, unless the
    /// store's `topic_properties` name it: how many replicas hold a write before it counts
    /// (`acks=all`). Default none: the broker's.
    pub min_insync_replicas: Option<u32>,
    /// Kafka's `group.instance.id` (KIP-345, static membership): an instance that has one
    /// keeps its tasks when it stops, crashes or restarts and comes back within the session
    /// timeout; no other member sees a rebalance. It must be unique in the group and stable
    /// across restarts of the same instance (a host name and an index, with the same state
    /// directory). `[A-Za-z0-9._-]`, at most 249 characters. Default none (dynamic members,
    /// which leave the group when they close).
    pub group_instance_id: Option<String>,
    /// Further librdkafka properties for every client (security, tuning).
    pub properties: BTreeMap<String, String>,
    /// What to do with an output record the brokers did not acknowledge. Default `fail`.
    pub production_error: ProductionErrorPolicy,
    /// What happens to a record whose `process` (or a punctuation whose `punctuate`) returned
    /// an error or panicked: `fail`, `continue` (skip it) or `dead_letter` (see
    /// [`ErrorAction`]). Kafka Streams' `processing.exception.handler`. Default `fail`.
    pub processing_error: ErrorAction,
    /// As `processing_error`, for a record that
    /// [`key_as`](crate::ProcessorContext::key_as) or
    /// [`value_as`](crate::ProcessorContext::value_as) could not decode. Kafka Streams'
    /// `default.deserialization.exception.handler`. Default `fail`.
    pub deserialization_error: ErrorAction,
    /// Kafka Streams' `errors.dead.letter.queue.topic.name`: where a `dead_letter` action
    /// sends failed records. It must exist when the application starts. Default none.
    pub dead_letter_topic: Option<String>,
    /// What happens after a failure answered `fail`: `shutdown_client` (stop the instance) or
    /// `replace_thread` (start the failed task again from its last commit). Default
    /// `shutdown_client`, as Kafka Streams'.
    pub uncaught_error: UncaughtErrorPolicy,
    /// Kafka Streams' `application.server`: the `host:port` at which this instance answers
    /// interactive queries, advertised to the other instances through its `client.id` (see
    /// [`Queries`](crate::Queries)). Setting it makes the standby thread read the group's
    /// members every second. Default none.
    pub application_server: Option<String>,
    /// How the input's producers partition keys, for
    /// [`Queries::metadata_for_key`](crate::Queries::metadata_for_key). Default `murmur2`
    /// (Kafka's Java producer and Kafka Streams); librdkafka's own default is `crc32`.
    pub key_partitioner: crate::KeyPartitioner,
    /// Kafka Streams' `num.stream.threads`: the threads that process this instance's tasks
    /// when it runs with a [`ProcessorPool`](crate::ProcessorPool) (one processor per task). A
    /// task is processed by one thread at a time and its records in order; the instance is
    /// still one member of the group, with one state directory. Default 1.
    pub stream_threads: usize,
    /// `max.poll.records`: the most records one
    /// [`poll_tasks`](crate::Application::poll_tasks) takes from the consumer and processes
    /// before it commits (when due) and polls again. Default 1000 (Kafka's).
    pub max_poll_records: usize,
}

impl std::fmt::Debug for TasksConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TasksConfig")
            .field("application_id", &self.application_id)
            .field("state_dir", &self.state_dir)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("input_topics", &self.input_topics)
            .field("stores", &self.stores)
            .field("commit_interval_ms", &self.commit_interval_ms)
            .field("num_standby_replicas", &self.num_standby_replicas)
            .field("state_cleanup_delay_ms", &self.state_cleanup_delay_ms)
            .field("restore_parallelism", &self.restore_parallelism)
            .field("session_timeout_ms", &self.session_timeout_ms)
            .field("heartbeat_interval_ms", &self.heartbeat_interval_ms)
            .field("max_poll_interval_ms", &self.max_poll_interval_ms)
            .field("assignment_strategy", &self.assignment_strategy)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("replication_factor", &self.replication_factor)
            .field("min_insync_replicas", &self.min_insync_replicas)
            .field("group_instance_id", &self.group_instance_id)
            .field("properties", &redacted(&self.properties))
            .field("production_error", &self.production_error)
            .field("processing_error", &self.processing_error)
            .field("deserialization_error", &self.deserialization_error)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("uncaught_error", &self.uncaught_error)
            .field("application_server", &self.application_server)
            .field("key_partitioner", &self.key_partitioner)
            .field("stream_threads", &self.stream_threads)
            .field("max_poll_records", &self.max_poll_records)
            .finish()
    }
}

/// `properties` with every secret value replaced, for `Debug`.
fn redacted(properties: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    properties
        .iter()
        .map(|(key, value)| {
            let shown = if statestore_changelog::is_secret(key) {
                "[redacted]"
            } else {
                value.as_str()
            };
            (key.as_str(), shown)
        })
        .collect()
}

/// The most processing threads an instance may run.
const MAX_STREAM_THREADS: usize = 1024;

impl Default for TasksConfig {
    fn default() -> Self {
        TasksConfig {
            application_id: String::new(),
            state_dir: PathBuf::from("state"),
            bootstrap_servers: "localhost:9092".to_owned(),
            input_topics: Vec::new(),
            stores: Vec::new(),
            commit_interval_ms: 30_000,
            num_standby_replicas: 0,
            state_cleanup_delay_ms: 600_000,
            restore_parallelism: std::thread::available_parallelism().map_or(1, usize::from),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            max_poll_interval_ms: 300_000,
            assignment_strategy: AssignmentStrategy::default(),
            request_timeout_ms: 30_000,
            replication_factor: -1,
            min_insync_replicas: None,
            group_instance_id: None,
            properties: BTreeMap::new(),
            production_error: ProductionErrorPolicy::Fail,
            processing_error: ErrorAction::Fail,
            deserialization_error: ErrorAction::Fail,
            dead_letter_topic: None,
            uncaught_error: UncaughtErrorPolicy::ShutdownClient,
            application_server: None,
            key_partitioner: crate::KeyPartitioner::default(),
            stream_threads: 1,
            max_poll_records: 1000,
        }
    }
}

impl TasksConfig {
    /// The commit interval.
    pub fn commit_interval(&self) -> Duration {
        Duration::from_millis(self.commit_interval_ms)
    }

    /// The cleanup delay.
    pub fn state_cleanup_delay(&self) -> Duration {
        Duration::from_millis(self.state_cleanup_delay_ms)
    }

    /// The request timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Checks the input topics: at least one, each a Kafka topic name, none twice, and several
    /// only with range assignment.
    fn validate_inputs(&self) -> Result<()> {
        if self.input_topics.is_empty() {
            return Err(Error::invalid("no input topic is configured"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for input in &self.input_topics {
            if let Err(err) = validate_topic(input) {
                return Err(Error::invalid(format!(
                    "input topic {input:?} is not a Kafka topic name: {err}"
                )));
            }
            if !seen.insert(input) {
                return Err(Error::invalid(format!(
                    "input topic {input:?} is configured twice"
                )));
            }
        }
        if self.input_topics.len() > 1 && self.assignment_strategy != AssignmentStrategy::Range {
            return Err(Error::invalid(format!(
                "{} input topics are configured with assignment_strategy {:?}: a task owns the \
                 same partition of every input topic, which of librdkafka's assignors only \
                 range guarantees",
                self.input_topics.len(),
                self.assignment_strategy.librdkafka_name()
            )));
        }
        Ok(())
    }

    /// The changelog configuration of `store` for task partition `partition`'s log, creating
    /// topics with `partitions` partitions.
    pub fn changelog_config(&self, store: &StoreSpec, partitions: u32) -> KafkaConfig {
        KafkaConfig {
            bootstrap_servers: self.bootstrap_servers.clone(),
            application_id: self.application_id.clone(),
            store_name: store.name.clone(),
            partitions,
            replication_factor: store.replication_factor.unwrap_or(self.replication_factor),
            produce_timeout_ms: self.request_timeout_ms,
            admin_timeout_ms: self.request_timeout_ms,
            topic_properties: changelog_topic_properties(self, store),
            properties: self.properties.clone(),
        }
    }

    /// Checks every option without contacting a broker.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad option.
    pub fn validate(&self) -> Result<()> {
        validate_application_id(&self.application_id)?;
        if self.bootstrap_servers.trim().is_empty() {
            return Err(Error::invalid("bootstrap_servers is empty"));
        }
        self.validate_inputs()?;
        if self.stores.is_empty() {
            return Err(Error::invalid("no store is configured"));
        }
        let mut names = std::collections::BTreeSet::new();
        for store in &self.stores {
            if !names.insert(store.name.as_str()) {
                return Err(Error::invalid(format!(
                    "store {:?} is configured twice",
                    store.name
                )));
            }
            if let Err(err) = statestore::resolve(&store.backend) {
                return Err(Error::invalid(format!("store {:?}: {err}", store.name)));
            }
            store.kind.validate(&store.name)?;
            let changelog = self.changelog_config(store, 1);
            changelog.validate()?;
            let topic = changelog.topic();
            if self.input_topics.contains(&topic) {
                return Err(Error::invalid(format!(
                    "input topic {topic:?} is the changelog topic of store {:?}: the application \
                     would process its own state updates",
                    store.name
                )));
            }
        }
        for (name, value) in [
            ("commit_interval_ms", self.commit_interval_ms),
            ("session_timeout_ms", self.session_timeout_ms),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("max_poll_interval_ms", self.max_poll_interval_ms),
            ("request_timeout_ms", self.request_timeout_ms),
        ] {
            if value == 0 || i32::try_from(value).is_err() {
                return Err(Error::invalid(format!(
                    "{name} must be between 1 and 2^31-1 milliseconds, not {value}"
                )));
            }
        }
        if self.max_poll_interval_ms < self.session_timeout_ms {
            return Err(Error::invalid(format!(
                "max_poll_interval_ms ({}) must be at least session_timeout_ms ({})",
                self.max_poll_interval_ms, self.session_timeout_ms
            )));
        }
        if self.heartbeat_interval_ms >= self.session_timeout_ms {
            return Err(Error::invalid(format!(
                "heartbeat_interval_ms ({}) must be below session_timeout_ms ({})",
                self.heartbeat_interval_ms, self.session_timeout_ms
            )));
        }
        if !(1..=MAX_STREAM_THREADS).contains(&self.stream_threads) {
            return Err(Error::invalid(format!(
                "stream_threads must be between 1 and {MAX_STREAM_THREADS}, not {}",
                self.stream_threads
            )));
        }
        if self.max_poll_records == 0 {
            return Err(Error::invalid("max_poll_records must be at least 1"));
        }
        if self.restore_parallelism == 0 {
            return Err(Error::invalid("restore_parallelism must be at least 1"));
        }
        validate_replication(self)?;
        validate_error_handling(self)?;
        if let Some(id) = &self.group_instance_id {
            validate_group_instance_id(id)?;
        }
        Ok(())
    }
}

/// Checks an application id as Kafka Streams does: not empty, only `[A-Za-z0-9._-]`.
///
/// # Errors
/// `InvalidArgument` naming the id and the rule.
pub fn validate_application_id(id: &str) -> Result<()> {
    if let Err(err) = validate_topic(id) {
        return Err(Error::invalid(format!(
            "application_id {id:?} is not valid, as a part of topic names: {err}"
        )));
    }
    Ok(())
}

/// The topic property that says how many replicas must hold a write before `acks=all` returns.
const MIN_INSYNC: &str = "min.insync.replicas";

/// The topic properties of `store`'s changelog topic: the store's own, with the application's
/// `min.insync.replicas` added unless the store names it.
pub(crate) fn changelog_topic_properties(
    config: &TasksConfig,
    store: &StoreSpec,
) -> BTreeMap<String, String> {
    let mut properties = store.topic_properties.clone();
    if let Some(min_insync) = config.min_insync_replicas {
        properties
            .entry(MIN_INSYNC.to_owned())
            .or_insert_with(|| min_insync.to_string());
    }
    properties
}

/// Checks `min.insync.replicas`, the application's and each changelog topic's: a whole number
/// of at least 1, and at most the topic's replication factor when that is given, since a topic
/// with fewer replicas than it needs in sync refuses every `acks=all` write.
///
/// # Errors
/// `InvalidArgument` naming the store or the option.
pub(crate) fn validate_replication(config: &TasksConfig) -> Result<()> {
    if config.min_insync_replicas == Some(0) {
        return Err(Error::invalid("min_insync_replicas must be at least 1"));
    }
    for store in config.stores.iter().filter(|store| store.logging) {
        let changelog = config.changelog_config(store, 1);
        let Some(value) = changelog.topic_properties.get(MIN_INSYNC) else {
            continue;
        };
        let min_insync = value
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "store {:?}: {MIN_INSYNC} must be a whole number of at least 1, not {value:?}",
                    store.name
                ))
            })?;
        let replicas = changelog.replication_factor;
        if replicas > 0 && min_insync > replicas {
            return Err(Error::invalid(format!(
                "store {:?}: {MIN_INSYNC} {min_insync} exceeds the changelog topic's \
                 replication factor {replicas}: no write could ever be acknowledged",
                store.name
            )));
        }
    }
    Ok(())
}

/// The longest `group.instance.id` accepted: Kafka's limit for names it keeps, as for topics.
const MAX_GROUP_INSTANCE_ID: usize = 249;

/// Checks a `group.instance.id` as Kafka does: 1 to 249 characters of `[A-Za-z0-9._-]`.
///
/// # Errors
/// `InvalidArgument` naming the id and the rule.
pub(crate) fn validate_group_instance_id(id: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > MAX_GROUP_INSTANCE_ID || !id.chars().all(allowed) {
        return Err(Error::invalid(format!(
            "group_instance_id {id:?} must hold 1 to {MAX_GROUP_INSTANCE_ID} letters, digits, \
             '.', '_' or '-'"
        )));
    }
    Ok(())
}

/// Checks the handlers' options: a dead-letter action needs a topic.
///
/// # Errors
/// `InvalidArgument` naming the option.
fn validate_error_handling(config: &TasksConfig) -> Result<()> {
    let dead_letters =
        [config.processing_error, config.deserialization_error].contains(&ErrorAction::DeadLetter);
    match &config.dead_letter_topic {
        None if dead_letters => Err(Error::invalid(
            "a dead_letter error action needs dead_letter_topic: the topic failed records go to",
        )),
        Some(topic) if config.input_topics.contains(topic) => Err(Error::invalid(format!(
            "dead_letter_topic {topic:?} is an input topic: the application would process its \
             own dead letters"
        ))),
        Some(topic) => validate_topic(topic).map_err(|err| {
            Error::invalid(format!(
                "dead_letter_topic {topic:?} is not a Kafka topic name: {err}"
            ))
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> TasksConfig {
        TasksConfig {
            application_id: "app".into(),
            input_topics: vec!["input".into()],
            stores: vec![StoreSpec::new("counts", "memory")],
            ..TasksConfig::default()
        }
    }

    #[test]
    fn debug_hides_secret_properties() {
        let config = TasksConfig {
            properties: BTreeMap::from([
                ("sasl.password".to_owned(), "hunter2".to_owned()),
                ("sasl.username".to_owned(), "alice".to_owned()),
            ]),
            ..valid()
        };
        let printed = format!("{config:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("alice"), "{printed}");
        assert!(printed.contains("max_poll_records"), "{printed}");
    }

    #[test]
    fn dead_letters_need_a_topic_that_is_not_an_input() {
        let err = TasksConfig {
            processing_error: ErrorAction::DeadLetter,
            ..valid()
        }
        .validate()
        .expect_err("no topic");
        assert!(err.to_string().contains("dead_letter_topic"), "{err}");
        let err = TasksConfig {
            deserialization_error: ErrorAction::DeadLetter,
            dead_letter_topic: Some("input".into()),
            ..valid()
        }
        .validate()
        .expect_err("an input topic");
        assert!(err.to_string().contains("input topic"), "{err}");
        TasksConfig {
            deserialization_error: ErrorAction::DeadLetter,
            dead_letter_topic: Some("failed".into()),
            ..valid()
        }
        .validate()
        .expect("a topic of its own");
    }

    #[test]
    fn application_ids_follow_kafka_streams() {
        for good in ["a", "word-count_v1.2", "A9"] {
            validate_application_id(good).expect(good);
        }
        for bad in ["", ".", "..", "a b", "a/b", "wörd", "a:b", "a\0"] {
            let err = validate_application_id(bad).expect_err(bad);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains("application_id"), "{err}");
        }
    }

    #[test]
    fn validation_names_the_bad_option() {
        valid().validate().expect("valid");
        TasksConfig {
            input_topics: vec!["clicks".into(), "views".into()],
            ..valid()
        }
        .validate()
        .expect("co-partitioned topics under range assignment");
        let cases: Vec<(TasksConfig, &str)> = vec![
            (
                TasksConfig {
                    input_topics: vec![],
                    ..valid()
                },
                "no input topic",
            ),
            (
                TasksConfig {
                    input_topics: vec!["a".into(), "b".into()],
                    assignment_strategy: AssignmentStrategy::CooperativeSticky,
                    ..valid()
                },
                "2 input topics are configured with assignment_strategy \"cooperative-sticky\"",
            ),
            (
                TasksConfig {
                    input_topics: vec!["a".into(), "b".into(), "a".into()],
                    ..valid()
                },
                "input topic \"a\" is configured twice",
            ),
            (
                TasksConfig {
                    input_topics: vec!["a".into(), "b/c".into()],
                    ..valid()
                },
                "\"b/c\" is not a Kafka topic name",
            ),
            (
                TasksConfig {
                    input_topics: vec!["input".into(), "app-counts-changelog".into()],
                    ..valid()
                },
                "\"app-counts-changelog\" is the changelog topic of store \"counts\"",
            ),
            (
                TasksConfig {
                    stores: vec![StoreSpec::new("s", "nope")],
                    ..valid()
                },
                "unknown backend",
            ),
            (
                TasksConfig {
                    stores: vec![StoreSpec::new("s", "memory"), StoreSpec::new("s", "memory")],
                    ..valid()
                },
                "configured twice",
            ),
            (
                TasksConfig {
                    heartbeat_interval_ms: 50_000,
                    ..valid()
                },
                "heartbeat_interval_ms",
            ),
            (
                TasksConfig {
                    commit_interval_ms: 0,
                    ..valid()
                },
                "commit_interval_ms",
            ),
            (
                TasksConfig {
                    restore_parallelism: 0,
                    ..valid()
                },
                "restore_parallelism",
            ),
        ];
        for (config, expected) in cases {
            let err = config.validate().expect_err(expected);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains(expected), "{err}");
        }
    }

    #[test]
    fn defaults_are_kafka_streams_defaults() {
        let config = TasksConfig::default();
        assert_eq!(config.commit_interval(), Duration::from_secs(30));
        assert_eq!(config.num_standby_replicas, 0);
        assert_eq!(config.state_cleanup_delay(), Duration::from_secs(600));
    }

    #[test]
    fn group_instance_ids_follow_kafka() {
        for good in ["host-1", "a", "web_3.eu-west", &"i".repeat(249)] {
            validate_group_instance_id(good).expect(good);
        }
        for bad in ["", "a b", "host/1", "wörd", "a:b", &"i".repeat(250)] {
            let err = validate_group_instance_id(bad).expect_err(bad);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains("group_instance_id"), "{err}");
        }
    }

    #[test]
    fn changelogs_take_the_applications_min_insync_unless_the_store_names_one() {
        let mut own = StoreSpec::new("own", "memory");
        own.topic_properties.insert(MIN_INSYNC.into(), "1".into());
        let config = TasksConfig {
            min_insync_replicas: Some(2),
            stores: vec![StoreSpec::new("counts", "memory"), own],
            ..valid()
        };
        config.validate().expect("valid");
        let properties = |store| {
            config
                .changelog_config(&config.stores[store], 1)
                .topic_properties
        };
        assert_eq!(properties(0)[MIN_INSYNC], "2");
        assert_eq!(properties(1)[MIN_INSYNC], "1");
        let plain = valid();
        let changelog = plain.changelog_config(&plain.stores[0], 1);
        assert!(!changelog.topic_properties.contains_key(MIN_INSYNC));
        assert_eq!(changelog.replication_factor, -1, "the broker's default");
    }

    #[test]
    fn min_insync_is_at_least_one_and_at_most_the_replicas() {
        let mut two = StoreSpec::new("two", "memory");
        two.replication_factor = Some(2);
        let mut word = StoreSpec::new("word", "memory");
        word.topic_properties
            .insert(MIN_INSYNC.into(), "two".into());
        let cases = [
            (
                TasksConfig {
                    min_insync_replicas: Some(0),
                    ..valid()
                },
                "min_insync_replicas must be at least 1",
            ),
            (
                TasksConfig {
                    min_insync_replicas: Some(3),
                    stores: vec![two.clone()],
                    ..valid()
                },
                "store \"two\": min.insync.replicas 3 exceeds",
            ),
            (
                TasksConfig {
                    stores: vec![word],
                    ..valid()
                },
                "not \"two\"",
            ),
        ];
        for (config, expected) in cases {
            let err = config.validate().expect_err(expected);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains(expected), "{err}");
        }
        // With the broker's replication factor (-1) there is nothing to compare with.
        TasksConfig {
            min_insync_replicas: Some(3),
            ..valid()
        }
        .validate()
        .expect("unknown replication factor");
    }
}
