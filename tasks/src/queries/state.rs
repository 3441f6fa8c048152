//! What the standby thread publishes for queries: the group's members with their endpoints and
//! tasks, and read handles to this instance's standby copies. Queries only read it, so a
//! querying thread never talks to the coordinator and never waits for a standby's catch-up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

use parking_lot::{Mutex, RwLock};
use statestore_changelog::TaskId;
use store_api::KeyValueStore;

use crate::config::TasksConfig;
use crate::group::endpoint;
use crate::group::members::GroupView;
use crate::group::members::standby_members;
use crate::queries::{MAX_VIEW_AGE, QueryError};
use crate::state::global::GlobalReads;
use crate::state::task::Task;

/// One instance of the application as the group's coordinator last described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceMetadata {
    /// The endpoint it advertises (its `application_server`), if any.
    pub endpoint: Option<String>,
    /// Its member id in the consumer group.
    pub member_id: String,
    /// The partitions (tasks) it owns.
    pub active: BTreeSet<u32>,
    /// The partitions it keeps a standby copy of: placed as every instance places them, from
    /// this instance's `num_standby_replicas` (all instances are assumed to share it). A copy
    /// may still be opening or catching up.
    pub standby: BTreeSet<u32>,
    /// Whether it is this instance.
    pub local: bool,
}

/// The group as last described, or why there is no usable description.
pub(crate) enum GroupState {
    /// Not described yet.
    Unknown,
    /// The last description found the group rebalancing.
    Rebalancing,
    /// A stable group.
    Stable {
        instances: Arc<Vec<InstanceMetadata>>,
        /// When it was described.
        at: Instant,
        /// This instance's rebalance count just before: a rebalance since makes it stale.
        rebalances: u64,
    },
}

/// A standby copy's read handles and how far behind it was at its last catch-up.
#[derive(Clone)]
pub(crate) struct StandbyView {
    /// Each store: its name, the store, and the changelog offsets past the last commit it
    /// applied, at its last catch-up.
    pub stores: Vec<(String, Arc<dyn KeyValueStore>, u64)>,
    pub caught_up: SystemTime,
}

/// What [`Queries`](crate::Queries) read, and all they read: the configuration, the active
/// tasks (shared with the runtime), the standby copies' read handles and the group's
/// description the runtime publishes, and how many rebalances it has seen.
pub(crate) struct QueryState {
    pub config: TasksConfig,
    /// The number of tasks.
    pub partitions: u32,
    pub tasks: Arc<Mutex<BTreeMap<TaskId, Task>>>,
    pub rebalances: Arc<AtomicU64>,
    pub group: RwLock<GroupState>,
    pub standbys: Mutex<BTreeMap<TaskId, StandbyView>>,
    /// The global stores, once a topology's are restored.
    pub globals: Mutex<Option<Arc<GlobalReads>>>,
    closed: AtomicBool,
}

impl QueryState {
    pub fn new(
        config: TasksConfig,
        partitions: u32,
        tasks: Arc<Mutex<BTreeMap<TaskId, Task>>>,
        rebalances: Arc<AtomicU64>,
    ) -> QueryState {
        QueryState {
            config,
            partitions,
            tasks,
            rebalances,
            group: RwLock::new(GroupState::Unknown),
            standbys: Mutex::new(BTreeMap::new()),
            globals: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// Publishes a description of the group taken when this instance had seen `rebalances`
    /// rebalances (`None`: the group was rebalancing).
    pub fn publish(&self, view: Option<&GroupView>, rebalances: u64, me: &str, replicas: u32) {
        let state = match view {
            None => GroupState::Rebalancing,
            Some(view) => GroupState::Stable {
                instances: Arc::new(instances(view, me, replicas)),
                at: Instant::now(),
                rebalances,
            },
        };
        *self.group.write() = state;
    }

    /// Drops the read handles of the standby copy of task `id` (closed or promoted).
    pub fn forget_standby(&self, id: TaskId) {
        self.standbys.lock().remove(&id);
    }

    /// The sub-topology whose tasks hold store `store`.
    fn subtopology_of(&self, store: &str) -> u32 {
        self.config
            .subtopologies
            .iter()
            .find(|sub| sub.stores.iter().any(|name| name == store))
            .map_or(0, |sub| sub.id)
    }

    /// The active task here that holds store `store` for partition `partition`.
    pub fn task_holding<'t>(
        &self,
        tasks: &'t BTreeMap<TaskId, Task>,
        store: &str,
        partition: u32,
    ) -> Option<&'t Task> {
        tasks.get(&TaskId::new(self.subtopology_of(store), partition))
    }

    /// The read handles of the standby copy here that holds store `store` for partition
    /// `partition`.
    pub fn standby_holding(&self, store: &str, partition: u32) -> Option<StandbyView> {
        let id = TaskId::new(self.subtopology_of(store), partition);
        self.standbys.lock().get(&id).cloned()
    }

    /// The application closed: every query fails from now on.
    /// Makes `globals` the global stores queries read.
    pub fn set_globals(&self, globals: Option<Arc<GlobalReads>>) {
        *self.globals.lock() = globals;
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.standbys.lock().clear();
        *self.group.write() = GroupState::Unknown;
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

/// The instances of `group` if it is a current description: stable, taken since this
/// instance's last rebalance (it has seen `rebalances`), and at most [`MAX_VIEW_AGE`] old.
/// `described` says whether the standby thread describes the group at all.
///
/// # Errors
/// [`QueryError::Rebalancing`] or [`QueryError::NoMetadata`] saying why it is not.
pub(crate) fn current(
    group: &GroupState,
    rebalances: u64,
    described: bool,
) -> Result<Arc<Vec<InstanceMetadata>>, QueryError> {
    match group {
        GroupState::Unknown if described => Err(QueryError::NoMetadata(
            "the group has not been described yet".into(),
        )),
        GroupState::Unknown => Err(QueryError::NoMetadata(
            "the group is not described: set application_server".into(),
        )),
        GroupState::Rebalancing => Err(QueryError::Rebalancing),
        GroupState::Stable {
            rebalances: seen, ..
        } if *seen != rebalances => Err(QueryError::Rebalancing),
        GroupState::Stable { at, .. } if at.elapsed() > MAX_VIEW_AGE => {
            Err(QueryError::NoMetadata(format!(
                "the group was last described {:?} ago",
                at.elapsed()
            )))
        }
        GroupState::Stable { instances, .. } => Ok(Arc::clone(instances)),
    }
}

/// Whether the standby thread describes the group: for queries (`application_server` set) or for
/// standby placement.
pub(crate) fn describes_group(config: &TasksConfig) -> bool {
    config.application_server.is_some() || config.num_standby_replicas > 0
}

/// The members of `view` with their endpoints, active partitions and standby partitions;
/// `me` is this instance's client id.
pub(crate) fn instances(view: &GroupView, me: &str, replicas: u32) -> Vec<InstanceMetadata> {
    let members = &view.members;
    let mut standby: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); members.len()];
    for (owner, member) in members.iter().enumerate() {
        for index in standby_members(members.len(), owner, replicas) {
            standby[index].extend(member.partitions.iter().copied());
        }
    }
    members
        .iter()
        .zip(standby)
        .map(|(member, standby)| InstanceMetadata {
            endpoint: endpoint::of_member(member),
            member_id: member.id.clone(),
            active: member.partitions.clone(),
            standby,
            local: member.is(me),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::group::members::Member;

    #[test]
    fn instances_carry_endpoints_tasks_and_standbys() {
        let member = |client: &str, endpoint: Option<&str>, partitions: &[u32]| Member {
            id: format!("{}-uuid", endpoint::encode(client, endpoint)),
            client_id: String::new(),
            partitions: partitions.iter().copied().collect(),
        };
        let view = GroupView {
            members: vec![
                member("a", Some("h1:1"), &[0, 1]),
                member("b", Some("h2:2"), &[2, 3]),
                member("c", None, &[]),
            ],
        };
        let me = endpoint::encode("b", Some("h2:2"));
        let all = instances(&view, &me, 1);
        let endpoints: Vec<_> = all.iter().map(|i| i.endpoint.as_deref()).collect();
        assert_eq!(endpoints, [Some("h1:1"), Some("h2:2"), None]);
        assert_eq!(all[1].active, BTreeSet::from([2, 3]));
        assert_eq!(all[1].standby, BTreeSet::from([0, 1]));
        assert_eq!(all[2].standby, BTreeSet::from([2, 3]));
        assert!(all[0].standby.is_empty());
        assert_eq!(
            all.iter().map(|i| i.local).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert!(
            instances(&view, &me, 0)
                .iter()
                .all(|i| i.standby.is_empty())
        );
    }

    /// Metadata is answered only from a stable description taken since this instance's last
    /// rebalance, and not older than `MAX_VIEW_AGE`.
    #[test]
    fn only_a_current_description_is_answered_from() {
        let stable = |rebalances, age| GroupState::Stable {
            instances: Arc::new(Vec::new()),
            at: Instant::now() - age,
            rebalances,
        };
        let fresh = Duration::from_millis(10);
        assert!(current(&stable(4, fresh), 4, true).is_ok());
        assert!(matches!(
            current(&stable(4, fresh), 6, true),
            Err(QueryError::Rebalancing)
        ));
        assert!(matches!(
            current(&GroupState::Rebalancing, 4, true),
            Err(QueryError::Rebalancing)
        ));
        assert!(matches!(
            current(&stable(4, MAX_VIEW_AGE * 2), 4, true),
            Err(QueryError::NoMetadata(why)) if why.contains("last described")
        ));
        for described in [true, false] {
            assert!(matches!(
                current(&GroupState::Unknown, 0, described),
                Err(QueryError::NoMetadata(_))
            ));
        }
    }
}
