//! Interactive queries: read a running application's state from any thread, and ask which
//! instance holds a key.
//!
//! [`Application::queries`](crate::Application::queries) hands out a [`Queries`]: cheap to
//! clone, `Send + Sync`, usable from any thread while the application runs (it holds no
//! reference that keeps the application alive; once it is closed every call fails with
//! [`QueryError::Closed`]).
//!
//! # Metadata: key -> partition -> instance
//! A key's partition is the input producer's ([`KeyPartitioner`], from
//! [`TasksConfig::key_partitioner`](crate::TasksConfig::key_partitioner)); the partition's
//! task is owned by one instance and copied by the standby instances. Each instance
//! advertises its [`application_server`](crate::TasksConfig::application_server) in its
//! `client.id` (see the `endpoint` module), and the standby thread reads the group's members with
//! `DescribeGroups` every second when `application_server` is set or standbys are
//! configured; a querying thread never asks the coordinator itself. So the answer is at most
//! about a second old while the group is stable. While the group rebalances, after a
//! rebalance this instance saw since the last description, or when the last description is
//! older than [`MAX_VIEW_AGE`] (the coordinator did not answer), the metadata calls fail with
//! [`QueryError::Rebalancing`] or [`QueryError::NoMetadata`] rather than answer from a stale
//! assignment. The answer can still be overtaken by a rebalance that starts right after it: an
//! instance asked for a key it no longer owns answers [`QueryError::NotLocal`].
//!
//! # Local reads
//! [`Queries::get`] reads the store of this instance's active task for the key's partition,
//! or with [`ReadFrom::ActiveOrStandby`] its standby copy, and says which ([`ReadSource`]);
//! [`Queries::range`] and [`Queries::prefix_scan`] read a partition's entries the same way.
//! - An active task's read sees every write of the task, committed or not, as Kafka Streams'
//!   interactive queries do: a value read may be lost by a crash before the next commit and
//!   recomputed after it. The read takes the tasks' lock for one point lookup (or to open a
//!   range's iterator, which is then read without it), so it holds processing up for that
//!   long; it waits while a commit holds the lock.
//! - A standby copy holds only what its changelogs hold: the owner's writes up to its last
//!   commit (every `commit_interval_ms`), applied when the copy last caught up (every
//!   second). [`Staleness`] says when that was and how many changelog offsets it had not
//!   applied then. It is read without any lock of the application.
//! - The reserved keys ([`POSITION_KEY`](crate::POSITION_KEY) and the changelog's epoch key)
//!   are refused to `get` and left out of ranges, as a processor's reads do.
//!
//! # Limits
//! - Every instance is assumed to run with the same `num_standby_replicas` and
//!   `key_partitioner`: the standbys named are those placed by this instance's setting.
//! - The group is read on the standby thread, between the copies' catch-ups; a long first
//!   catch-up of a new standby copy delays it, and metadata then fails with `NoMetadata` until
//!   it is read again.
//! - With `cooperative-sticky` on a coordinator that reports no assignments the
//!   assignment cannot be computed: metadata always fails with `Rebalancing`.

mod local;
mod state;

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

pub use self::local::LocalRange;
pub use self::state::InstanceMetadata;
use self::state::current;
pub(crate) use self::state::{QueryState, StandbyView, describes_group};
use crate::group::partitioner::KeyPartitioner;

/// The oldest description of the group that metadata is answered from: five times the
/// one-second interval at which the standby thread reads it.
pub const MAX_VIEW_AGE: Duration = Duration::from_secs(5);

/// Why a query has no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The application was closed or dropped.
    #[error("the application is closed")]
    Closed,
    /// This instance has no task (or, when asked, standby copy) of the partition: another
    /// instance owns it, or it is being restored or moved here. A store that is not logged
    /// has no standby copy, so only the partition's active task answers for it.
    #[error("partition {partition} is not available here")]
    NotLocal {
        /// The partition.
        partition: u32,
    },
    /// No store has this name.
    #[error("no store is named {0:?}")]
    UnknownStore(String),
    /// The producer places this key at random (an empty key under
    /// [`KeyPartitioner::Crc32`]): it has no partition.
    #[error("the {0:?} partitioner places this key at random")]
    Unpartitioned(KeyPartitioner),
    /// The group is rebalancing, or rebalanced since it was last described: ask again.
    #[error("the group is rebalancing")]
    Rebalancing,
    /// No usable description of the group: not read yet, too old, or not read at all
    /// (neither `application_server` nor standbys are configured).
    #[error("no metadata: {0}")]
    NoMetadata(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store_api::Error),
}

/// Which partition holds a key, and which instances serve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyQueryMetadata {
    /// The partition, and so the task.
    pub partition: u32,
    /// The endpoint of the instance that owns the task; `None` when no instance owns it or
    /// the owner advertises none.
    pub active: Option<String>,
    /// The endpoints of the instances placed to keep standby copies of it.
    pub standbys: Vec<String>,
}

/// Where a local read may be answered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// Only this instance's active task.
    Active,
    /// The active task, or else a standby copy here.
    ActiveOrStandby,
}

/// What a local read was answered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadSource {
    /// This instance's active task: every write, committed or not.
    Active,
    /// A standby copy here, as of its last catch-up.
    Standby(Staleness),
}

/// How far a standby copy's store may be behind its active task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staleness {
    /// When the copy last caught up with its changelogs.
    pub caught_up: SystemTime,
    /// The store's changelog offsets past the last commit it had applied at that catch-up.
    /// Writes the owner has not committed yet are not counted: they are not in the log.
    pub offsets_behind: u64,
}

impl Staleness {
    /// How long ago the copy last caught up.
    pub fn age(&self) -> Duration {
        self.caught_up.elapsed().unwrap_or_default()
    }
}

/// A value read from this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRead {
    /// The value, or `None` when the key is absent.
    pub value: Option<Vec<u8>>,
    /// The partition read.
    pub partition: u32,
    /// Whether the active task or a standby copy answered.
    pub source: ReadSource,
}

/// Interactive queries on a running [`Application`](crate::Application) (see the module docs).
#[derive(Clone)]
pub struct Queries {
    state: Weak<QueryState>,
}

impl std::fmt::Debug for Queries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queries").finish_non_exhaustive()
    }
}

impl Queries {
    pub(crate) fn new(state: &Arc<QueryState>) -> Queries {
        Queries {
            state: Arc::downgrade(state),
        }
    }

    pub(crate) fn shared(&self) -> Result<Arc<QueryState>, QueryError> {
        self.state
            .upgrade()
            .filter(|state| !state.is_closed())
            .ok_or(QueryError::Closed)
    }

    /// This instance's endpoint, its `application_server`.
    ///
    /// # Errors
    /// [`QueryError::Closed`].
    pub fn endpoint(&self) -> Result<Option<String>, QueryError> {
        Ok(self.shared()?.config.application_server.clone())
    }

    /// The partition of `key`, as the configured [`KeyPartitioner`] places it.
    ///
    /// # Errors
    /// [`QueryError::Unpartitioned`] for a key the producer places at random;
    /// [`QueryError::Closed`].
    pub fn partition_of(&self, key: &[u8]) -> Result<u32, QueryError> {
        let shared = self.shared()?;
        let partitioner = shared.config.key_partitioner;
        partitioner
            .partition(key, shared.partitions)
            .ok_or(QueryError::Unpartitioned(partitioner))
    }

    /// Every instance of the group, as last described.
    ///
    /// # Errors
    /// [`QueryError::Rebalancing`] or [`QueryError::NoMetadata`] when there is no current
    /// description (see the module docs); [`QueryError::Closed`].
    pub fn all_metadata(&self) -> Result<Vec<InstanceMetadata>, QueryError> {
        Ok(self.instances()?.as_ref().clone())
    }

    /// The partition of `key` and the instances that own it and keep standby copies of it.
    ///
    /// # Errors
    /// As [`all_metadata`](Queries::all_metadata) and [`partition_of`](Queries::partition_of).
    pub fn metadata_for_key(&self, key: &[u8]) -> Result<KeyQueryMetadata, QueryError> {
        self.metadata_for_partition(self.partition_of(key)?)
    }

    /// The instances that own partition `partition` and keep standby copies of it: for keys
    /// that a producer with another partitioner wrote.
    ///
    /// # Errors
    /// As [`all_metadata`](Queries::all_metadata).
    pub fn metadata_for_partition(&self, partition: u32) -> Result<KeyQueryMetadata, QueryError> {
        let instances = self.instances()?;
        let active = instances
            .iter()
            .find(|i| i.active.contains(&partition))
            .and_then(|i| i.endpoint.clone());
        let standbys = instances
            .iter()
            .filter(|i| i.standby.contains(&partition))
            .filter_map(|i| i.endpoint.clone())
            .collect();
        Ok(KeyQueryMetadata {
            partition,
            active,
            standbys,
        })
    }

    fn instances(&self) -> Result<Arc<Vec<InstanceMetadata>>, QueryError> {
        let shared = self.shared()?;
        let rebalances = shared.rebalances.load(std::sync::atomic::Ordering::Relaxed);
        let group = shared.group.read();
        current(&group, rebalances, describes_group(&shared.config))
    }

    /// The value of `key` in store `store` of this instance's task for the key's partition
    /// (see the module docs for what each source sees).
    ///
    /// # Errors
    /// [`QueryError::NotLocal`] when `from` allows no local task or copy of the partition;
    /// [`QueryError::UnknownStore`]; [`QueryError::Unpartitioned`]; [`QueryError::Store`] for
    /// a store error or a reserved key; [`QueryError::Closed`].
    pub fn get(&self, store: &str, key: &[u8], from: ReadFrom) -> Result<LocalRead, QueryError> {
        let partition = self.partition_of(key)?;
        self.get_in_partition(store, partition, key, from)
    }

    /// The value of `key` in global store `store`, which every instance keeps whole (see
    /// [`add_global_store`](crate::topology::TopologyBuilder::add_global_store)): as its
    /// topic's records last set it here.
    ///
    /// # Errors
    /// [`QueryError::UnknownStore`] for a store that is not global (or before the topology's
    /// global stores are restored); [`QueryError::Store`] for a store error, or once the
    /// thread keeping the global stores failed; [`QueryError::Closed`].
    pub fn get_global(&self, store: &str, key: &[u8]) -> Result<Option<Vec<u8>>, QueryError> {
        let shared = self.shared()?;
        let globals = shared.globals.lock().clone();
        let found = match &globals {
            Some(globals) => globals.store(store)?,
            None => None,
        };
        let store = found.ok_or_else(|| QueryError::UnknownStore(store.to_owned()))?;
        Ok(store.get(key)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_shared_across_threads() {
        fn shareable<T: Send + Sync + Clone + 'static>() {}
        shareable::<Queries>();
        let handle = Queries { state: Weak::new() };
        assert!(matches!(handle.partition_of(b"k"), Err(QueryError::Closed)));
        assert!(matches!(handle.all_metadata(), Err(QueryError::Closed)));
    }
}
