//! At-least-once without duplicates across a repartition topic: each record a sink writes to
//! a repartition topic names, in header [`UPSTREAM_HEADER`], the upstream task and input
//! record it comes from and its index among that record's outputs to the topic; the
//! downstream task keeps, per upstream task and input topic, the last (offset, index) it
//! applied ([`UpstreamMarks`], committed with its state under
//! [`POSITION_KEY`](super::position::POSITION_KEY)) and drops what is at or before it.
//!
//! A header's value, compact: the input offset and the index as LEB128 varints, then who sent
//! it (the upstream's input topic index as a varint, and the upstream task id's text), which
//! is the key of the marks.

use std::collections::BTreeMap;

use store_api::{Error, Result};

/// The reserved prefix of the headers statestore writes; a source strips them, so they
/// never reach a processor or another topic.
pub const RESERVED_HEADER_PREFIX: &str = "__statestore.";

/// The header naming a repartition record's upstream task, input record and index.
pub const UPSTREAM_HEADER: &str = "__statestore.upstream";

/// Where a repartition record comes from, as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Upstream<'a> {
    /// The upstream task and its input topic's index: the marks' key.
    pub who: &'a [u8],
    /// The upstream input record's offset and the record's index among its outputs.
    pub at: (u64, u32),
}

/// The header value of the `index`th output to one topic of the record at `offset` of input
/// `topic` (an index among the task's inputs) of task `task`.
/// The task id is written as its text (`0_3`) straight into the value: no string is made
/// per record.
pub(crate) fn encode_upstream(
    task: impl std::fmt::Display,
    topic: usize,
    offset: u64,
    index: u32,
) -> Vec<u8> {
    use std::io::Write as _;
    let mut bytes = Vec::with_capacity(24);
    put_varint(&mut bytes, offset);
    put_varint(&mut bytes, u64::from(index));
    put_varint(&mut bytes, topic as u64);
    // Writing to a Vec cannot fail.
    let _ = write!(bytes, "{task}");
    bytes
}

/// The upstream a header value names; `None` for bytes that do not decode (a record written
/// by something else is processed as any other).
pub(crate) fn decode_upstream(bytes: &[u8]) -> Option<Upstream<'_>> {
    let (offset, rest) = take_varint(bytes)?;
    let (index, who) = take_varint(rest)?;
    let (_, task) = take_varint(who)?;
    if task.is_empty() {
        return None;
    }
    Some(Upstream {
        who,
        at: (offset, u32::try_from(index).ok()?),
    })
}

fn put_varint(bytes: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        bytes.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    bytes.push(value as u8);
}

fn take_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// The last (offset, index) applied from each upstream (task and input topic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UpstreamMarks(BTreeMap<Vec<u8>, (u64, u32)>);

impl UpstreamMarks {
    /// Whether a record from `upstream` was applied already: it is at or before the last one
    /// applied from its upstream.
    pub fn applied(&self, upstream: &Upstream<'_>) -> bool {
        self.0
            .get(upstream.who)
            .is_some_and(|&last| upstream.at <= last)
    }

    /// Records that the record from `upstream` was applied.
    pub fn apply(&mut self, upstream: &Upstream<'_>) {
        match self.0.get_mut(upstream.who) {
            Some(last) => *last = upstream.at.max(*last),
            None => {
                self.0.insert(upstream.who.to_vec(), upstream.at);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The marks of both, each upstream at the earlier of its two marks, and absent where
    /// either lacks it: what a task whose stores committed at different moments has surely
    /// applied in all of them.
    pub fn meet(&self, other: &UpstreamMarks) -> UpstreamMarks {
        UpstreamMarks(
            self.0
                .iter()
                .filter_map(|(who, &at)| Some((who.clone(), at.min(*other.0.get(who)?))))
                .collect(),
        )
    }

    /// The marks' bytes: their count (4 bytes), then each upstream's length (2 bytes), bytes,
    /// offset (8 bytes) and index (4 bytes), all big-endian.
    pub fn encode(&self, bytes: &mut Vec<u8>) {
        let count = u32::try_from(self.0.len()).unwrap_or(u32::MAX);
        bytes.extend_from_slice(&count.to_be_bytes());
        for (who, (offset, index)) in self.0.iter().take(count as usize) {
            // An upstream is a task id and a small index: far under 64 KiB.
            let len = u16::try_from(who.len()).unwrap_or(u16::MAX);
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(&who[..usize::from(len)]);
            bytes.extend_from_slice(&offset.to_be_bytes());
            bytes.extend_from_slice(&index.to_be_bytes());
        }
    }

    /// The marks at the start of `bytes`, and the bytes after them.
    ///
    /// # Errors
    /// `Corruption` for bytes cut short.
    pub fn decode(bytes: &[u8]) -> Result<(UpstreamMarks, &[u8])> {
        let corrupt = || Error::Corruption("the upstream marks cannot be decoded".into());
        let take = |rest: &mut &[u8], n: usize| -> Result<Vec<u8>> {
            let (head, tail) = rest.split_at_checked(n).ok_or_else(corrupt)?;
            *rest = tail;
            Ok(head.to_vec())
        };
        let mut rest = bytes;
        let count = u32::from_be_bytes(take(&mut rest, 4)?.try_into().map_err(|_| corrupt())?);
        let mut marks = BTreeMap::new();
        for _ in 0..count {
            let len = u16::from_be_bytes(take(&mut rest, 2)?.try_into().map_err(|_| corrupt())?);
            let who = take(&mut rest, usize::from(len))?;
            let offset = u64::from_be_bytes(take(&mut rest, 8)?.try_into().map_err(|_| corrupt())?);
            let index = u32::from_be_bytes(take(&mut rest, 4)?.try_into().map_err(|_| corrupt())?);
            marks.insert(who, (offset, index));
        }
        Ok((UpstreamMarks(marks), rest))
    }
}

#[cfg(test)]
mod tests {
    use super::{UpstreamMarks, decode_upstream, encode_upstream};

    #[test]
    fn a_header_names_its_upstream_record_and_index() {
        for (offset, index) in [(0, 0), (127, 128), (u64::MAX, u32::MAX)] {
            let bytes = encode_upstream("0_3", 1, offset, index);
            let upstream = decode_upstream(&bytes).expect("decodes");
            assert_eq!(upstream.at, (offset, index));
            assert_eq!(upstream.who, &[&[1u8][..], b"0_3"].concat()[..]);
        }
        assert_eq!(encode_upstream("0_3", 0, 300, 2).len(), 7, "compact");
        for bad in [&b""[..], &[0x80][..], &[5, 1, 0][..], &[0xff; 11][..]] {
            assert_eq!(decode_upstream(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn marks_drop_what_is_at_or_before_the_last_applied() {
        let mut marks = UpstreamMarks::default();
        let at = |offset, index| encode_upstream("0_1", 0, offset, index);
        let (first, second, later) = (at(10, 0), at(10, 1), at(11, 0));
        fn up(bytes: &[u8]) -> super::Upstream<'_> {
            decode_upstream(bytes).expect("decodes")
        }
        assert!(!marks.applied(&up(&first)));
        marks.apply(&up(&second));
        assert!(marks.applied(&up(&first)) && marks.applied(&up(&second)));
        assert!(!marks.applied(&up(&later)));
        let other = encode_upstream("0_2", 0, 1, 0);
        assert!(!marks.applied(&up(&other)), "another upstream task");
    }

    #[test]
    fn marks_round_trip_and_meet() {
        let mut a = UpstreamMarks::default();
        let mut b = UpstreamMarks::default();
        for (task, offset) in [("0_0", 5), ("0_1", u64::MAX)] {
            a.apply(&decode_upstream(&encode_upstream(task, 0, offset, 3)).expect("decodes"));
        }
        b.apply(&decode_upstream(&encode_upstream("0_0", 0, 4, 9)).expect("decodes"));
        for marks in [&a, &b, &UpstreamMarks::default()] {
            let mut bytes = Vec::new();
            marks.encode(&mut bytes);
            bytes.extend_from_slice(b"rest");
            let (decoded, rest) = UpstreamMarks::decode(&bytes).expect("decodes");
            assert_eq!((&decoded, rest), (marks, &b"rest"[..]));
            for cut in 0..bytes.len() - 4 {
                assert!(
                    UpstreamMarks::decode(&bytes[..cut]).is_err(),
                    "cut at {cut}"
                );
            }
        }
        let met = a.meet(&b);
        assert_eq!(met.0.len(), 1, "0_1 is missing from b");
        assert_eq!(met.0.values().next(), Some(&(4, 9)));
    }
}
