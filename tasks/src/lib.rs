//! Per-partition state for an application that runs as several instances of one Kafka consumer
//! group: what Kafka Streams' tasks are to its state stores.
//!
//! - One task per input partition, `0_<partition>`: with several input topics, which must be
//!   co-partitioned (the same partition count, keyed alike), the task owns partition
//!   `<partition>` of each, and the range assignor keeps them together. Its stores live in
//!   `<state_dir>/<application_id>/0_<partition>/<backend>/<store>/` and are logged to partition
//!   `<partition>` of the compacted topics `<application_id>-<store>-changelog`, which are
//!   created with the input's partition count when missing (a different count is an error).
//!   A [`topology`] has tasks `<subtopology>_<partition>` per sub-topology, each with the
//!   sub-topology's inputs and stores.
//! - Kafka's group protocol decides which instance owns which task ([`AssignmentStrategy`]);
//!   this crate adds no membership protocol. On assignment an instance restores the task's
//!   stores from their changelogs (only the tail past the task's checkpoint when its files are
//!   there; several tasks in parallel) on a restore thread, while it goes on polling and
//!   processing its other tasks, and only then processes the task's records. On revocation it
//!   commits the task and closes its stores, keeping the files for a later return. On loss
//!   (the instance missed its session timeout) it closes them without committing.
//! - Exactly-once state without broker transactions: each store keeps the input position it
//!   is complete up to, written in the same changelog commit as the state (see
//!   [`POSITION_KEY`] and the `task` module's docs). A task resumes from that position after a
//!   crash or a move, not from the group offset, which is committed too, for monitoring and as
//!   a floor for a task that never committed state.
//! - Interactive queries ([`Application::queries`], the [`queries`] module): read this
//!   instance's active and standby stores from any thread, and ask which instance owns a key,
//!   each instance advertising its [`application_server`](TasksConfig::application_server).
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use statestore_tasks::{Application, StoreSpec, TasksConfig};
//!
//! let config = TasksConfig {
//!     application_id: "wordcount".into(),
//!     bootstrap_servers: "127.0.0.1:9092".into(),
//!     input_topics: vec!["words".into()],
//!     stores: vec![StoreSpec::new("counts", "rocksdb")],
//!     ..TasksConfig::default()
//! };
//! let stop = AtomicBool::new(false);
//! Application::new(config)?.run(&stop, |ctx| {
//!     let word = ctx.key().unwrap_or_default().to_vec();
//!     let counts = ctx.store("counts")?;
//!     let count = counts
//!         .get(&word)?
//!         .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
//!         .map_or(0, u64::from_be_bytes);
//!     counts.put(&word, &(count + 1).to_be_bytes())
//! })?;
//! # Ok::<(), statestore_tasks::Error>(())
//! ```

mod config;
mod group;
mod processor;
pub mod queries;
mod record;
mod runtime;
mod state;
pub mod topology;

pub use config::StoreKind;
pub use config::{
    AssignmentStrategy, ErrorAction, ProcessingGuarantee, ProductionErrorPolicy, StoreSpec,
    SubtopologySpec, TasksConfig, UncaughtErrorPolicy, parse_property, read_client_properties,
    validate_application_id,
};
pub use group::partitioner::{KeyPartitioner, murmur2};
pub use group::topics::{create_topic, create_topic_with};
pub use processor::{Processor, ProcessorContext, TaskContext};
pub use queries::{
    InstanceMetadata, KeyQueryMetadata, LocalRange, LocalRead, Queries, QueryError, ReadFrom,
    ReadSource, Staleness,
};
/// The headers an [`OutputRecord`] carries (rdkafka's), and the trait that reads them.
pub use rdkafka::message::{Headers, OwnedHeaders};
pub use record::{InputRecord, MemoryRecord};
pub use runtime::driven;
pub use runtime::handlers;
pub use runtime::handlers::{ErrorHandler, FailedRecord, Failure, FailureStage};
pub use runtime::lifecycle::{AppState, StateListener};
pub use runtime::outputs::OutputRecord;
pub use runtime::{Application, ProcessorPool};
pub use state::changelogs::{ChangelogOpener, MemoryChangelogs};
pub use state::kv::{TaskKv, TaskStore};
pub use state::metrics;
pub use state::position::{POSITION_KEY, decode_task_position};
pub use state::punctuation::{Punctuation, PunctuationType, PunctuatorId};
pub use state::stores::{OpenStore, StoreHandle, StoreType};

// Everything an application names, so that this crate is its one dependency: the errors of
// every call, the stores a processor reads and writes, the backends, changelogs and restore
// outcomes.
/// The store API (`KeyValueStore`, `WriteBatch`, ...), the backends this build has (this
/// crate's features `memory`, `rocksdb`, `sled`, `redb`), opened by name, and the registry a
/// backend of your own joins (the `statestore` crate).
pub use statestore as store;
/// Changelogs: Kafka's configuration, restore outcomes and listeners, `LoggedStore`, the
/// embedded file log (the `statestore-changelog` crate).
pub use statestore_changelog as changelog;
pub use statestore_changelog::{RestoreOutcome, TaskId};
/// Typed, window, session, versioned and LRU stores, and their key and value codecs (the
/// `statestore-operator-stores` crate).
pub use statestore_operator_stores as operator_stores;
pub use store_api::{Error, ErrorKind, Result};

/// Something that happened to a task of this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEvent {
    /// The task.
    pub task: TaskId,
    /// What happened.
    pub kind: TaskEventKind,
}

/// What happened to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEventKind {
    /// The task was assigned here and its stores restored.
    Assigned {
        /// Each store's restore.
        restored: Vec<(String, RestoreOutcome)>,
        /// The offset processing resumes at in the first input topic (`None`: the earliest).
        next_offset: Option<u64>,
        /// The offset processing resumes at in each input topic that has one; the others
        /// start at the earliest.
        next_offsets: std::collections::BTreeMap<String, u64>,
        /// How long opening and restoring took, for every task assigned with this one (they
        /// restore in parallel).
        restore_time: std::time::Duration,
        /// The task was revoked by the eager rebalance that assigned it here again, and its
        /// stores stayed open: resumed (its changelogs fenced again), nothing restored.
        resumed: bool,
    },
    /// The task was revoked: committed and closed, its files kept. Under the eager protocol
    /// its stores stay open until the rebalance's assignment: a task assigned here again is
    /// resumed (an `Assigned` that restored nothing) rather than opened anew.
    Revoked,
    /// The task was lost (this instance missed its session timeout): closed without
    /// committing.
    Lost,
    /// A commit found that a newer owner had fenced the task's changelog (this instance was
    /// paused past its session timeout and the task moved): closed without committing, and
    /// nothing it appended counts.
    Fenced,
}
