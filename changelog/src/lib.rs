//! Durability for statestore: every update also goes to a changelog, and a store is rebuilt
//! from it anywhere.
//!
//! A [`Changelog`] is an append-only log of one (topic, partition): records of
//! `(offset, key, value or tombstone)`. Implementations: the embedded segment-file log (the
//! default, one machine), Kafka through rdkafka (many machines), and memory (tests).

mod checkpoint;
mod commits;
mod file;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
#[cfg(feature = "kafka")]
mod kafka;
mod logged;
mod memory;
mod record;
mod restore;
mod snapshot;
mod state_dir;

pub use checkpoint::{
    CHECKPOINT_FILE, CHECKPOINT_TMP_FILE, Checkpoint, CheckpointEntries, TopicPartition,
    read_checkpoint, write_checkpoint,
};
pub use commits::{CommitReader, Released, last_commit_end};
pub use file::{
    CompactionStats, DEFAULT_MAX_RECORD_BYTES, FileLog, FileLogConfig, RecoveryMode, SyncPolicy,
};
#[cfg(feature = "kafka")]
#[doc(hidden)]
pub use kafka::util as kafka_util;
#[cfg(feature = "kafka")]
pub use kafka::{
    Deliveries, KafkaClients, KafkaConfig, KafkaLog, ReportTo, SendRecord, is_secret,
    validate_topic,
};
pub use logged::{CheckpointPolicy, CommitPolicy, LoggedStore, LoggedStoreConfig};
pub use memory::{DEFAULT_MEMORY_MAX_RECORD_LEN, MemoryLog};
pub use record::{
    COMMIT_MARKER_KEY, Changelog, ChangelogRecord, EPOCH_KEY, Framing, RecordKind, check_append,
    check_record, marker_op,
};
pub use restore::{
    DEFAULT_RESTORE_BATCH_RECORDS, NoopRestoreListener, RestoreListener, RestoreOutcome, restore,
    stored_epoch,
};
pub use snapshot::{
    DEFAULT_SNAPSHOTS_KEPT, Snapshot, SnapshotConfig, SnapshotInfo, SnapshotStore,
    export as export_snapshot,
};
pub use state_dir::{
    LOCK_FILE, StateDirectory, TaskDirectory, TaskId, create_private_dir, validate_name,
};
