//! Standby replicas: warm copies of other instances' tasks, kept by tailing their changelogs.
//!
//! # Placement
//! Every instance reads the group's member list and current assignment from the group
//! coordinator (`DescribeGroups`, through librdkafka's group list), sorts the members by client
//! id, and, for each task, picks the `num_standby_replicas` members that follow the task's
//! active owner in that order, wrapping around and skipping the owner. Every instance computes
//! the same answer from the same list, so no extra protocol is needed, and a standby is never
//! placed on the active owner while another member exists.
//!
//! A coordinator that lists the members but not their assignments (tansu 0.6 answers
//! `DescribeGroups` with member ids only: empty client ids and assignments) leaves one safe
//! choice: when `num_standby_replicas` covers every other member, each instance keeps a copy
//! of every task it does not own; otherwise no standby is placed, and a warning says why.
//!
//! Limits: the list is read every second, so right after a rebalance a standby may
//! briefly be missing or duplicated; the copy costs disk and changelog reads on the standby,
//! nothing on the owner. A member that subscribes with an assignment the coordinator does not
//! report (an empty or undecodable assignment) owns nothing for placement.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use statestore_changelog::{
    KafkaLog, RestoreListener, StateDirectory, TaskDirectory, TaskId, restore,
};
use store_api::{KeyValueStore, Result};

use crate::config::TasksConfig;

/// A member of the group: its client id and the input partitions assigned to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub client_id: String,
    pub partitions: BTreeSet<u32>,
}

/// The tasks member `me` keeps a standby copy of.
pub(crate) fn standby_tasks(members: &[Member], me: &str, replicas: u32) -> BTreeSet<u32> {
    let mut sorted: Vec<&Member> = members.iter().collect();
    sorted.sort_by(|a, b| a.client_id.cmp(&b.client_id));
    let Some(my_index) = sorted.iter().position(|m| m.client_id == me) else {
        return BTreeSet::new();
    };
    let count = sorted.len();
    let mut mine = BTreeSet::new();
    for (owner, member) in sorted.iter().enumerate() {
        let chosen = (1..count)
            .map(|step| (owner + step) % count)
            .take(usize::try_from(replicas).unwrap_or(usize::MAX));
        if chosen.into_iter().any(|index| index == my_index) {
            mine.extend(member.partitions.iter().copied());
        }
    }
    mine
}

/// The standby tasks when the coordinator reports members without their assignments: every
/// task (the caller drops its active ones) when `replicas` covers every other member of
/// `members`, else none.
pub(crate) fn every_other_task(members: usize, replicas: u32, partitions: u32) -> BTreeSet<u32> {
    let others = members.saturating_sub(1);
    if others == 0 {
        return BTreeSet::new();
    }
    if usize::try_from(replicas).unwrap_or(usize::MAX) < others {
        tracing::warn!(
            members,
            replicas,
            "the group coordinator does not report assignments, and the standby replicas do \
             not cover every other member: no standby is placed"
        );
        return BTreeSet::new();
    }
    (0..partitions).collect()
}

/// Decodes the topics and partitions of a consumer-protocol assignment (`version: i16`, then
/// `[topic: string, partitions: [i32]]`); the partitions of `topic`. `None` when malformed.
pub(crate) fn decode_assignment(bytes: &[u8], topic: &str) -> Option<BTreeSet<u32>> {
    let mut reader = Reader(bytes);
    let _version = reader.i16()?;
    let topics = reader.i32()?;
    let mut partitions = BTreeSet::new();
    for _ in 0..topics.max(0) {
        let len = usize::try_from(reader.i16()?).ok()?;
        let name = reader.take(len)?;
        let count = reader.i32()?;
        for _ in 0..count.max(0) {
            let partition = reader.i32()?;
            if name == topic.as_bytes() {
                partitions.insert(u32::try_from(partition).ok()?);
            }
        }
    }
    Some(partitions)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// A standby copy of one task: its stores, kept up to date by replaying their changelogs.
pub(crate) struct Standby {
    pub id: TaskId,
    stores: Vec<(Arc<dyn KeyValueStore>, KafkaLog, usize)>,
    /// Records replayed since the copy was opened.
    pub replayed: u64,
    dir: TaskDirectory,
}

impl Standby {
    /// Opens the stores of task `id` without restoring them yet.
    pub fn open(
        state: &StateDirectory,
        config: &TasksConfig,
        id: TaskId,
        partitions: u32,
    ) -> Result<Standby> {
        let dir = state.task(id)?;
        let mut stores = Vec::with_capacity(config.stores.len());
        for spec in &config.stores {
            let factory = statestore::factory(&spec.backend).ok_or_else(|| {
                store_api::Error::invalid(format!("unknown backend {:?}", spec.backend))
            })?;
            let store = dir.open_store(factory, &spec.name, &spec.options)?;
            let log = KafkaLog::open(config.changelog_config(spec, partitions), id.partition)?;
            stores.push((store, log, spec.logged.restore_batch_records));
        }
        Ok(Standby {
            id,
            stores,
            replayed: 0,
            dir,
        })
    }

    /// Replays what the changelogs gained since the last call (the first call restores from
    /// the task's checkpoint) and checkpoints it.
    pub fn catch_up(&mut self, listener: &mut dyn RestoreListener) -> Result<u64> {
        let mut records = 0;
        for (store, log, batch) in &self.stores {
            let outcome = restore(store.as_ref(), log, self.dir.checkpoint(), *batch, listener)?;
            records += outcome.records;
        }
        self.replayed += records;
        Ok(records)
    }

    /// Flushes and closes the stores, keeping their files.
    pub fn close(self) -> Result<()> {
        for (store, _, _) in &self.stores {
            store.close()?;
        }
        Ok(())
    }
}

/// Standby copies by partition.
pub(crate) type Standbys = BTreeMap<u32, Standby>;

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, partitions: &[u32]) -> Member {
        Member {
            client_id: id.to_owned(),
            partitions: partitions.iter().copied().collect(),
        }
    }

    #[test]
    fn standbys_follow_the_owner_and_never_land_on_it() {
        let members = [member("c", &[3]), member("a", &[0, 1]), member("b", &[2])];
        assert_eq!(standby_tasks(&members, "a", 1), BTreeSet::from([3]));
        assert_eq!(standby_tasks(&members, "b", 1), BTreeSet::from([0, 1]));
        assert_eq!(standby_tasks(&members, "c", 1), BTreeSet::from([2]));
        assert_eq!(standby_tasks(&members, "a", 2), BTreeSet::from([2, 3]));
        // More replicas than other members: each other member once, never the owner.
        assert_eq!(standby_tasks(&members, "a", 5), BTreeSet::from([2, 3]));
        let alone = [member("a", &[0, 1, 2, 3])];
        assert!(standby_tasks(&alone, "a", 1).is_empty());
        assert!(standby_tasks(&members, "stranger", 1).is_empty());
    }

    #[test]
    fn without_assignments_standbys_go_everywhere_only_when_replicas_cover_every_member() {
        assert_eq!(every_other_task(2, 1, 4), BTreeSet::from([0, 1, 2, 3]));
        assert_eq!(every_other_task(3, 2, 2), BTreeSet::from([0, 1]));
        assert!(every_other_task(3, 1, 4).is_empty());
        assert!(every_other_task(1, 1, 4).is_empty());
        assert!(every_other_task(0, 1, 4).is_empty());
    }

    #[test]
    fn assignments_decode_and_garbage_does_not_panic() {
        let mut bytes = vec![0, 1, 0, 0, 0, 2];
        for (topic, parts) in [("in", &[1i32, 3][..]), ("other", &[0i32][..])] {
            bytes.extend((topic.len() as i16).to_be_bytes());
            bytes.extend(topic.as_bytes());
            bytes.extend((parts.len() as i32).to_be_bytes());
            for p in parts {
                bytes.extend(p.to_be_bytes());
            }
        }
        bytes.extend((-1i32).to_be_bytes());
        assert_eq!(
            decode_assignment(&bytes, "in"),
            Some(BTreeSet::from([1, 3]))
        );
        for cut in 0..bytes.len() - 4 {
            let _ = decode_assignment(&bytes[..cut], "in");
        }
        assert_eq!(decode_assignment(&[0, 1, 0, 0, 0, 9], "in"), None);
    }
}
