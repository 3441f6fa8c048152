//! The application's configuration, in Kafka Streams' terms: [`TasksConfig`], its stores
//! ([`StoreSpec`], [`StoreKind`]) and its policies, and their validation. No runtime type.

mod client_file;
mod policies;
mod store;
#[cfg(test)]
mod tests;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use statestore_changelog::KafkaConfig;

pub use client_file::{parse_property, read_client_properties};
pub use policies::{
    AssignmentStrategy, ErrorAction, ProcessingGuarantee, ProductionErrorPolicy,
    UncaughtErrorPolicy,
};
pub use store::{StoreKind, StoreSpec};
pub(crate) use validate::changelog_topic_properties;
pub use validate::validate_application_id;

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
    /// `0_<p>` (`<sub>_<p>` for those of a sub-topology) owns partition `p` of each, so
    /// several need the `range` assignment strategy, the only one of librdkafka's that keeps
    /// them together.
    pub input_topics: Vec<String>,
    /// The input topics this application owns and creates when missing: a topology's
    /// repartition topics (`<application_id>-<name>-repartition`, see
    /// [`Topology::configure`](crate::topology::Topology::configure)), each also in
    /// `input_topics`. Created with the other inputs' partition count and the broker's
    /// defaults (`cleanup.policy=delete`, its retention); an existing one with another count
    /// is an error.
    pub repartition_topics: Vec<String>,
    /// How often, at most, the records of the repartition topics that their tasks committed
    /// past are deleted, after a commit (Kafka Streams' `repartition.purge.interval.ms`).
    /// Default 30 s.
    pub repartition_purge_interval_ms: u64,
    /// Under `at_least_once`, whether records sent to repartition topics carry their upstream
    /// task, input record and index (header `__statestore.upstream`, about 30 bytes), and a
    /// downstream task drops those it applied already: its state stays exactly once across
    /// the repartition when the processors are deterministic (docs/kafka.md, "Topologies").
    /// `false`: Kafka Streams' at least once across the repartition. Ignored under
    /// `exactly_once_v2`, where the transactions do it. Default true.
    pub repartition_dedup: bool,
    /// The stores of every task.
    pub stores: Vec<StoreSpec>,
    /// The sub-topologies of a topology (see
    /// [`Topology::configure`](crate::topology::Topology::configure)): each makes the tasks
    /// `<id>_<partition>`, which read its input topics and hold its stores. Empty: one
    /// sub-topology `0`, every input topic and store.
    pub subtopologies: Vec<SubtopologySpec>,
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
    /// Kafka Streams' `client.id`: what the `client.id` of each of this instance's clients
    /// starts with. Each client's is `<client_id>-<instance id>-<role>`, the role one of
    /// `consumer`, `producer`, `restore-consumer` and `admin`, and the instance id the
    /// `group_instance_id` when set, else one made up when the application starts, so
    /// every instance's clients differ and the brokers' logs, quotas and request metrics
    /// tell them apart. `[A-Za-z0-9._-]`. Default: the application id.
    pub client_id: Option<String>,
    /// Further librdkafka properties for every client (security, tuning). `client.id` is
    /// set through `client_id`.
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
    /// Kafka Streams' `processing.guarantee`: `at_least_once` (the default) or
    /// `exactly_once_v2` (one Kafka transaction per commit; see [`ProcessingGuarantee`]).
    pub processing_guarantee: ProcessingGuarantee,
    /// `transaction.timeout.ms` of the transactional producer under `exactly_once_v2`: the
    /// brokers abort a transaction not committed within it, which bounds how long a paused
    /// or dead owner's open transaction holds back readers of committed records (and a new
    /// owner's fence). A commit must end within it: a task commits at the latest when a
    /// store buffers `commit_bytes`, so a transaction holds at most about that much per
    /// store and task. At most the brokers' `transaction.max.timeout.ms` (15 minutes by
    /// default). Default 10 000 (Kafka Streams' under exactly-once).
    pub transaction_timeout_ms: u64,
    /// Snapshots of the tasks' logged stores in an object store (`docs/durability.md`,
    /// "Snapshots"): a task whose store has no local checkpoint loads the newest usable one
    /// and replays only the changelog after it; with `every_commits`, each store snapshots
    /// itself. `None` (the default): no snapshots.
    pub snapshots: Option<statestore_changelog::SnapshotConfig>,
}

impl std::fmt::Debug for TasksConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TasksConfig")
            .field("application_id", &self.application_id)
            .field("state_dir", &self.state_dir)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("input_topics", &self.input_topics)
            .field("repartition_topics", &self.repartition_topics)
            .field(
                "repartition_purge_interval_ms",
                &self.repartition_purge_interval_ms,
            )
            .field("repartition_dedup", &self.repartition_dedup)
            .field("stores", &self.stores)
            .field("subtopologies", &self.subtopologies)
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
            .field("client_id", &self.client_id)
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
            .field("processing_guarantee", &self.processing_guarantee)
            .field("transaction_timeout_ms", &self.transaction_timeout_ms)
            .field("snapshots", &self.snapshots)
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
            repartition_topics: Vec::new(),
            repartition_purge_interval_ms: 30_000,
            repartition_dedup: true,
            stores: Vec::new(),
            subtopologies: Vec::new(),
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
            client_id: None,
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
            processing_guarantee: ProcessingGuarantee::AtLeastOnce,
            transaction_timeout_ms: 10_000,
            snapshots: None,
        }
    }
}

/// The input topics and stores of the tasks of one sub-topology.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SubtopologySpec {
    /// Its number: its tasks are `<id>_<partition>`.
    pub id: u32,
    /// The input topics its tasks read, among `input_topics`.
    pub input_topics: Vec<String>,
    /// The names of the stores its tasks hold, among `stores`.
    pub stores: Vec<String>,
}

/// The input topics and store specs of one sub-topology's tasks, as the runtime opens them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskShape {
    pub id: u32,
    pub topics: Vec<String>,
    pub stores: Vec<StoreSpec>,
}

impl TasksConfig {
    /// The sub-topologies' tasks' topics and stores: those of `subtopologies`, or one
    /// sub-topology `0` with every input topic and store.
    pub(crate) fn task_shapes(&self) -> Vec<TaskShape> {
        if self.subtopologies.is_empty() {
            return vec![TaskShape {
                id: 0,
                topics: self.input_topics.clone(),
                stores: self.stores.clone(),
            }];
        }
        self.subtopologies
            .iter()
            .map(|sub| TaskShape {
                id: sub.id,
                topics: sub.input_topics.clone(),
                stores: self
                    .stores
                    .iter()
                    .filter(|spec| sub.stores.contains(&spec.name))
                    .cloned()
                    .collect(),
            })
            .collect()
    }

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

    /// [`repartition_purge_interval_ms`](Self::repartition_purge_interval_ms) as a `Duration`.
    pub fn repartition_purge_interval(&self) -> Duration {
        Duration::from_millis(self.repartition_purge_interval_ms)
    }

    /// The longest time between two commits: the commit interval, and under exactly-once at
    /// most half the transaction timeout, so that a transaction, open from the first output
    /// after a commit, commits well before the brokers would abort it.
    pub fn effective_commit_interval(&self) -> Duration {
        let interval = self.commit_interval();
        if self.exactly_once() {
            interval.min(self.transaction_timeout() / 2)
        } else {
            interval
        }
    }

    /// The transaction timeout.
    pub fn transaction_timeout(&self) -> Duration {
        Duration::from_millis(self.transaction_timeout_ms)
    }

    /// Whether commits are Kafka transactions (`exactly_once_v2`).
    pub fn exactly_once(&self) -> bool {
        self.processing_guarantee == ProcessingGuarantee::ExactlyOnceV2
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
}
