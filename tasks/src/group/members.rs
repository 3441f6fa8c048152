//! The group as its coordinator describes it: the members and which input partitions each
//! owns, read with `DescribeGroups`.
//!
//! Kafka reports each member's client id and assignment. A coordinator may send only the
//! member ids (empty client ids and assignments); a member id is `<client.id>-<uuid>`,
//! and with the eager `range` or `roundrobin` assignor the assignment is a function of the
//! sorted member ids and the partition count (librdkafka's assignors sort members by member
//! id, memcmp order, as Kafka's do). So the view computes what the coordinator does not
//! report. `cooperative-sticky` depends on the previous assignment and cannot be computed.

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;

use crate::config::AssignmentStrategy;

/// A member of the group and the input partitions assigned to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// The member id.
    pub id: String,
    /// The member's `client.id`, as reported (empty when the coordinator does not report it).
    pub client_id: String,
    pub partitions: BTreeSet<u32>,
}

impl Member {
    /// Whether this member is the client `client_id` (unique per instance).
    pub fn is(&self, client_id: &str) -> bool {
        if self.client_id.is_empty() {
            self.id
                .strip_prefix(client_id)
                .is_some_and(|rest| rest.starts_with('-'))
        } else {
            self.client_id == client_id
        }
    }
}

/// A stable group's members with their partitions, sorted by member id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupView {
    pub members: Vec<Member>,
}

/// Describes group `group`: `None` while it rebalances or when the assignment is neither
/// reported nor computable.
///
/// # Errors
/// The coordinator's failure to describe the group.
pub(crate) fn describe<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    group: &str,
    topic: &str,
    partitions: u32,
    strategy: AssignmentStrategy,
    timeout: Duration,
) -> Result<Option<GroupView>, KafkaError> {
    let groups = consumer.fetch_group_list(Some(group), timeout)?;
    let Some(described) = groups.groups().iter().find(|g| g.name() == group) else {
        return Ok(None);
    };
    if described.state() != "Stable" {
        return Ok(None);
    }
    let mut members: Vec<Member> = described
        .members()
        .iter()
        .map(|m| Member {
            id: m.id().to_owned(),
            client_id: m.client_id().to_owned(),
            partitions: m
                .assignment()
                .filter(|bytes| !bytes.is_empty())
                .and_then(|bytes| decode_assignment(bytes, topic))
                .unwrap_or_default(),
        })
        .collect();
    members.sort_by(|a, b| a.id.cmp(&b.id));
    if members.iter().all(|m| m.partitions.is_empty()) {
        let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
        let Some(computed) = assign(strategy, &ids, partitions) else {
            return Ok(None);
        };
        for (member, partitions) in members.iter_mut().zip(computed) {
            member.partitions = partitions;
        }
    }
    Ok(Some(GroupView { members }))
}

/// The partitions `0..partitions` of one topic over members `sorted` (by member id) as the
/// eager assignors give them; `None` for `cooperative-sticky`.
pub(crate) fn assign(
    strategy: AssignmentStrategy,
    sorted: &[&str],
    partitions: u32,
) -> Option<Vec<BTreeSet<u32>>> {
    let count = u32::try_from(sorted.len()).ok()?;
    if count == 0 {
        return Some(Vec::new());
    }
    let assigned = match strategy {
        AssignmentStrategy::Range => {
            // Kafka's RangeAssignor: consecutive ranges, the first `partitions % count`
            // members one partition more.
            let (each, extra) = (partitions / count, partitions % count);
            (0..count)
                .map(|i| {
                    let start = each * i + i.min(extra);
                    let len = each + u32::from(i < extra);
                    (start..start + len).collect()
                })
                .collect()
        }
        AssignmentStrategy::Roundrobin => (0..count)
            .map(|i| (0..partitions).filter(|p| p % count == i).collect())
            .collect(),
        AssignmentStrategy::CooperativeSticky => return None,
    };
    Some(assigned)
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

/// The tasks the member that is client `me` keeps a standby copy of; `members` sorted by
/// member id.
pub(crate) fn standby_tasks(members: &[Member], me: &str, replicas: u32) -> BTreeSet<u32> {
    let Some(my_index) = members.iter().position(|m| m.is(me)) else {
        return BTreeSet::new();
    };
    let mut mine = BTreeSet::new();
    for (owner, member) in members.iter().enumerate() {
        if standby_members(members.len(), owner, replicas).any(|index| index == my_index) {
            mine.extend(member.partitions.iter().copied());
        }
    }
    mine
}

/// The indexes, among `count` members sorted by member id, of the members that keep standby
/// copies of the tasks of member `owner`: the `replicas` that follow it, wrapping around,
/// never the owner itself. Queries name the same members (see the `queries` module).
pub(crate) fn standby_members(
    count: usize,
    owner: usize,
    replicas: u32,
) -> impl Iterator<Item = usize> {
    (1..count)
        .map(move |step| (owner + step) % count)
        .take(usize::try_from(replicas).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(parts: &[&[u32]]) -> Vec<BTreeSet<u32>> {
        parts.iter().map(|p| p.iter().copied().collect()).collect()
    }

    #[test]
    fn eager_assignors_are_computed_as_kafka_does() {
        let three = ["a", "b", "c"];
        assert_eq!(
            assign(AssignmentStrategy::Range, &three, 4),
            Some(sets(&[&[0, 1], &[2], &[3]]))
        );
        assert_eq!(
            assign(AssignmentStrategy::Range, &three[..2], 4),
            Some(sets(&[&[0, 1], &[2, 3]]))
        );
        assert_eq!(
            assign(AssignmentStrategy::Range, &["a"; 5], 4),
            Some(sets(&[&[0], &[1], &[2], &[3], &[]]))
        );
        assert_eq!(
            assign(AssignmentStrategy::Roundrobin, &three, 4),
            Some(sets(&[&[0, 3], &[1], &[2]]))
        );
        assert_eq!(assign(AssignmentStrategy::Range, &[], 4), Some(vec![]));
        assert_eq!(
            assign(AssignmentStrategy::CooperativeSticky, &three, 4),
            None
        );
    }

    #[test]
    fn a_member_is_found_by_client_id_or_member_id_prefix() {
        let member = |id: &str, client_id: &str| Member {
            id: id.to_owned(),
            client_id: client_id.to_owned(),
            partitions: BTreeSet::new(),
        };
        assert!(member("app-1-2-uuid", "").is("app-1-2"));
        assert!(!member("app-1-23-uuid", "").is("app-1-2"));
        assert!(member("x", "app-1-2").is("app-1-2"));
        assert!(!member("app-1-2-uuid", "other").is("app-1-2"));
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

    fn placed_member(id: &str, partitions: &[u32]) -> Member {
        Member {
            id: format!("{id}-uuid"),
            client_id: String::new(),
            partitions: partitions.iter().copied().collect(),
        }
    }

    #[test]
    fn standbys_follow_the_owner_and_never_land_on_it() {
        let members = [
            placed_member("a", &[0, 1]),
            placed_member("b", &[2]),
            placed_member("c", &[3]),
        ];
        assert_eq!(standby_tasks(&members, "a", 1), BTreeSet::from([3]));
        assert_eq!(standby_tasks(&members, "b", 1), BTreeSet::from([0, 1]));
        assert_eq!(standby_tasks(&members, "c", 1), BTreeSet::from([2]));
        assert_eq!(standby_tasks(&members, "a", 2), BTreeSet::from([2, 3]));
        // More replicas than other members: each other member once, never the owner.
        assert_eq!(standby_tasks(&members, "a", 5), BTreeSet::from([2, 3]));
        let alone = [placed_member("a", &[0, 1, 2, 3])];
        assert!(standby_tasks(&alone, "a", 1).is_empty());
        assert!(standby_tasks(&members, "stranger", 1).is_empty());
    }
}
