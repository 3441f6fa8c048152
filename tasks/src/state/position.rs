//! The input position a task's stores keep with their state, and the keys the task reserves
//! in every store for it (and for the changelog's writer epoch).

use statestore_changelog::EPOCH_KEY;
use store_api::{Error, KvIter, Result};

use super::upstream::UpstreamMarks;

/// The key under which each store keeps its input position: with one input topic, the next
/// offset to process (8 bytes, big-endian); with several, the tag `T` and then, for each
/// topic, its name's length (2 bytes, big-endian), the name and the next offset (8 bytes,
/// big-endian). Once the task has a stream time, either form is preceded by the tag `S` and
/// the stream time (8 bytes, big-endian, two's complement). A task that drops duplicates
/// across repartition topics (under `at_least_once`) precedes all that, once it has applied a
/// record from an upstream task, with the tag `U` and the last (offset, index) it applied from
/// each upstream task and input topic (see the `upstream` module). It sorts before any key
/// that does not start with NUL, and [`TaskStore`](crate::TaskStore) hides it.
pub const POSITION_KEY: &[u8] = b"\0statestore.task.position";

/// The first byte of a position that names its topics.
const NAMED_POSITIONS: u8 = b'T';

/// The first byte of a position preceded by the task's stream time.
const WITH_STREAM_TIME: u8 = b'S';

/// The first byte of a position preceded by the marks of the upstream tasks.
const WITH_UPSTREAMS: u8 = b'U';

/// The bytes of `position`, `stream_time` and `upstreams`, as [`POSITION_KEY`] holds them:
/// without marks, the bytes versions before them wrote.
pub(crate) fn encode_task_state(
    topics: &[String],
    position: &[u64],
    stream_time: Option<i64>,
    upstreams: &UpstreamMarks,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    if !upstreams.is_empty() {
        bytes.push(WITH_UPSTREAMS);
        upstreams.encode(&mut bytes);
    }
    if let Some(time) = stream_time {
        bytes.push(WITH_STREAM_TIME);
        bytes.extend_from_slice(&time.to_be_bytes());
    }
    bytes.extend_from_slice(&encode_position(topics, position));
    bytes
}

/// [`decode_task_position`], with the upstream marks (none in bytes written without them).
///
/// # Errors
/// As [`decode_task_position`].
pub(crate) fn decode_task_state(
    bytes: &[u8],
    topics: &[String],
) -> Result<(Vec<u64>, Option<i64>, UpstreamMarks)> {
    // An 8-byte value is a one-topic position, whatever its first byte.
    if bytes.len() != 8
        && let Some((&WITH_UPSTREAMS, rest)) = bytes.split_first()
    {
        let (marks, rest) = UpstreamMarks::decode(rest)?;
        let (position, time) = decode_task_position(rest, topics)?;
        return Ok((position, time, marks));
    }
    let (position, time) = decode_task_position(bytes, topics)?;
    Ok((position, time, UpstreamMarks::default()))
}

/// The input position of each of `topics` (0 for a topic it names none for) and the stream
/// time held in `bytes`, a value of [`POSITION_KEY`]: for tools that read a task's changelog
/// (upstream marks, if any, are skipped).
///
/// # Errors
/// `Corruption` for bytes that cannot be decoded; `InvalidArgument` for a one-topic position
/// under several `topics` (which topic it belongs to is not recorded).
pub fn decode_task_position(bytes: &[u8], topics: &[String]) -> Result<(Vec<u64>, Option<i64>)> {
    if bytes.len() != 8
        && let Some((&WITH_UPSTREAMS, rest)) = bytes.split_first()
    {
        let (_, rest) = UpstreamMarks::decode(rest)?;
        return decode_task_position(rest, topics);
    }
    // An 8-byte value is a one-topic position, whatever its first byte.
    if bytes.len() != 8
        && let Some((&WITH_STREAM_TIME, rest)) = bytes.split_first()
    {
        let (time, rest) = rest.split_at_checked(8).ok_or_else(|| {
            Error::Corruption(format!(
                "the task position of {} bytes cannot be decoded",
                bytes.len()
            ))
        })?;
        let time = i64::from_be_bytes(time.try_into().unwrap_or_default());
        return Ok((decode_position(rest, topics)?, Some(time)));
    }
    Ok((decode_position(bytes, topics)?, None))
}

/// The bytes of `position` (one offset per topic of `topics`).
fn encode_position(topics: &[String], position: &[u64]) -> Vec<u8> {
    if let [next] = position {
        return next.to_be_bytes().to_vec();
    }
    let mut bytes = vec![NAMED_POSITIONS];
    for (topic, next) in topics.iter().zip(position) {
        // Kafka topic names have at most 249 bytes (validated).
        let len = u16::try_from(topic.len()).unwrap_or(u16::MAX);
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(&topic.as_bytes()[..usize::from(len)]);
        bytes.extend_from_slice(&next.to_be_bytes());
    }
    bytes
}

/// The offset of each of `topics` in `bytes`; 0 for a topic they do not name. Topics they name
/// and `topics` does not (an input topic removed from the configuration) are ignored.
fn decode_position(bytes: &[u8], topics: &[String]) -> Result<Vec<u64>> {
    let offset = |raw: &[u8]| raw.try_into().map(u64::from_be_bytes).ok();
    if bytes.len() == 8 {
        return match (topics, offset(bytes)) {
            ([_], Some(next)) => Ok(vec![next]),
            _ => Err(Error::invalid(format!(
                "the task position was written by an application with one input topic, and \
                 {} are configured now; which topic it belongs to is not recorded (run the new \
                 topology under a new application_id)",
                topics.len()
            ))),
        };
    }
    let corrupt = || {
        Error::Corruption(format!(
            "the task position of {} bytes cannot be decoded",
            bytes.len()
        ))
    };
    let Some((&NAMED_POSITIONS, mut rest)) = bytes.split_first() else {
        return Err(corrupt());
    };
    if rest.is_empty() {
        return Err(corrupt());
    }
    let mut position = vec![0; topics.len()];
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(2).ok_or_else(corrupt)?;
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let (name, tail) = tail.split_at_checked(len).ok_or_else(corrupt)?;
        let (next, tail) = tail.split_at_checked(8).ok_or_else(corrupt)?;
        let next = offset(next).ok_or_else(corrupt)?;
        if let Some(index) = topics.iter().position(|t| t.as_bytes() == name) {
            position[index] = next;
        }
        rest = tail;
    }
    Ok(position)
}

/// Refuses the keys the task and the changelog reserve.
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key == EPOCH_KEY {
        return Err(Error::invalid(
            "the key \\0statestore.epoch is reserved for the changelog's writer epoch",
        ));
    }
    if key == POSITION_KEY {
        return Err(Error::invalid(
            "the key \\0statestore.task.position is reserved for the task's input position",
        ));
    }
    Ok(())
}

/// Whether `key` is one the task or the changelog keeps in every store.
pub(crate) fn is_reserved(key: &[u8]) -> bool {
    key == POSITION_KEY || key == EPOCH_KEY
}

/// Leaves out the task's position (with its stream time) and the changelog's writer epoch,
/// which the task keeps in every store.
pub(crate) fn hide_reserved(iter: KvIter) -> KvIter {
    Box::new(iter.filter(|item| !matches!(item, Ok((key, _)) if is_reserved(key))))
}

#[cfg(test)]
mod tests {
    use super::{
        decode_position, decode_task_position, decode_task_state, encode_position,
        encode_task_state,
    };
    use crate::state::upstream::{UpstreamMarks, decode_upstream, encode_upstream};

    fn encode_task_position(topics: &[String], position: &[u64], time: Option<i64>) -> Vec<u8> {
        encode_task_state(topics, position, time, &UpstreamMarks::default())
    }

    use store_api::ErrorKind;

    fn topics(names: &[&str]) -> Vec<String> {
        names.iter().map(|&name| name.to_owned()).collect()
    }

    #[test]
    fn positions_round_trip_by_topic_name() {
        let one = topics(&["in"]);
        let bytes = encode_position(&one, &[42]);
        assert_eq!(
            bytes,
            42u64.to_be_bytes(),
            "one topic keeps the 8-byte form"
        );
        assert_eq!(decode_position(&bytes, &one).expect("decode"), [42]);

        let two = topics(&["clicks", "views"]);
        let bytes = encode_position(&two, &[7, u64::MAX]);
        assert_eq!(
            decode_position(&bytes, &two).expect("decode"),
            [7, u64::MAX]
        );
        // Reordered, extended or shrunk configurations find each topic by name.
        let reordered = topics(&["views", "new", "clicks"]);
        assert_eq!(
            decode_position(&bytes, &reordered).expect("decode"),
            [u64::MAX, 0, 7]
        );
        assert_eq!(
            decode_position(&bytes, &topics(&["clicks"])).expect("decode"),
            [7]
        );
    }

    #[test]
    fn the_stream_time_rides_with_the_position() {
        for names in [&["in"][..], &["clicks", "views"][..]] {
            let topics = topics(names);
            let position: Vec<u64> = (0..names.len() as u64).map(|i| 40 + i).collect();
            for time in [
                None,
                Some(0),
                Some(-5),
                Some(1_800_000_000_000),
                Some(i64::MIN),
            ] {
                let bytes = encode_task_position(&topics, &position, time);
                assert_eq!(
                    decode_task_position(&bytes, &topics).expect("decode"),
                    (position.clone(), time)
                );
            }
        }
        // A one-topic position that happens to start with the tag is still a position.
        let one = topics(&["in"]);
        let bytes = (u64::from(b'S') << 56).to_be_bytes();
        assert_eq!(
            decode_task_position(&bytes, &one).expect("decode"),
            (vec![u64::from(b'S') << 56], None)
        );
        let err = decode_task_position(b"S1234", &one).expect_err("cut stream time");
        assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    }

    #[test]
    fn upstream_marks_ride_with_the_position_and_leave_the_old_forms_alone() {
        let mut marks = UpstreamMarks::default();
        let header = encode_upstream("0_2", 0, 77, 3);
        marks.apply(&decode_upstream(&header).expect("decodes"));
        for names in [&["in"][..], &["clicks", "views-repartition"][..]] {
            let topics = topics(names);
            let position: Vec<u64> = (0..names.len() as u64).map(|i| 40 + i).collect();
            for time in [None, Some(-5), Some(1_800_000_000_000)] {
                let old = encode_task_position(&topics, &position, time);
                let none = encode_task_state(&topics, &position, time, &UpstreamMarks::default());
                assert_eq!(none, old, "no marks: the bytes of before");
                assert_eq!(
                    decode_task_state(&old, &topics).expect("decode"),
                    (position.clone(), time, UpstreamMarks::default()),
                    "bytes of before decode without marks"
                );
                let bytes = encode_task_state(&topics, &position, time, &marks);
                assert_eq!(bytes[0], b'U');
                assert_eq!(
                    decode_task_state(&bytes, &topics).expect("decode"),
                    (position.clone(), time, marks.clone())
                );
                assert_eq!(
                    decode_task_position(&bytes, &topics).expect("decode"),
                    (position.clone(), time),
                    "tools reading positions skip the marks"
                );
                let err = decode_task_state(&bytes[..12], &topics).expect_err("cut");
                assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
            }
        }
    }

    #[test]
    fn a_bad_position_is_a_typed_error() {
        let two = topics(&["a", "b"]);
        let one_topic = 5u64.to_be_bytes();
        let err = decode_position(&one_topic, &two).expect_err("whose offset is it?");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("one input topic"), "{err}");

        let good = encode_position(&two, &[1, 2]);
        assert_eq!(good.len(), 23);
        // Every cut but 12, which ends after the first topic's whole entry.
        for cut in [0, 1, 2, 5, 11, 13, 22] {
            let err = decode_position(&good[..cut], &two).expect_err("truncated");
            assert_eq!(err.kind(), ErrorKind::Corruption, "cut at {cut}: {err}");
        }
        let err = decode_position(b"garbage!!", &two).expect_err("garbage");
        assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    }
}
