//! The on-disk format: segment header, record encoding and decoding, file names.
//! The layout itself is documented in the module doc of [`super`].

use store_api::limits::{MAX_KEY_LEN, MAX_VALUE_LEN};
use store_api::{BatchOp, Error, Result};

use crate::record::{MAX_TOPIC_LEN, RecordKind};

/// Magic bytes opening every segment; the last byte is the format version.
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"SSCLOG\0\x01";
/// Magic plus the base offset.
pub(crate) const SEGMENT_HEADER_LEN: usize = 16;
/// Length, CRC, offset, key length, value length.
pub(crate) const RECORD_HEADER_LEN: usize = 24;
/// The part of the header before the checksummed body: length and CRC.
pub(crate) const RECORD_PREFIX_LEN: usize = 8;
/// Offset, key length and value length: the body's fixed part.
const BODY_FIXED_LEN: usize = RECORD_HEADER_LEN - RECORD_PREFIX_LEN;
/// The value length that marks a tombstone (no value bytes follow).
const TOMBSTONE: u32 = u32::MAX;
/// Flag in the key length of a record inside a commit. Keys are at most 64 KiB, so the top
/// bits of their length are free; unframed records have them clear.
const FRAMED_FLAG: u32 = 1 << 31;
/// Flag, with [`FRAMED_FLAG`], in the key length of a commit marker.
const MARKER_FLAG: u32 = 1 << 30;
/// The key length bits.
const KEY_LEN_MASK: u32 = MARKER_FLAG - 1;
/// The largest body a valid record can have; anything longer is corruption, and checking it
/// first keeps a damaged length from asking for a gigantic buffer.
pub(crate) const MAX_BODY_LEN: usize = BODY_FIXED_LEN + MAX_KEY_LEN + MAX_VALUE_LEN;

/// Extension of segment files.
pub(crate) const SEGMENT_SUFFIX: &str = ".log";
/// Extension of a segment being rewritten by compaction; left over only by a crash.
pub(crate) const COMPACT_SUFFIX: &str = ".log.compact";
/// Name of the lock file in a partition directory.
pub(crate) const LOCK_FILE: &str = ".lock";

/// The segment header for a segment whose first offset is `base`.
pub(crate) fn segment_header(base: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    header[..8].copy_from_slice(&SEGMENT_MAGIC);
    header[8..].copy_from_slice(&base.to_le_bytes());
    header
}

/// The file name of the segment starting at `base`: 20 zero-padded digits, so names sort like
/// offsets.
pub(crate) fn segment_name(base: u64) -> String {
    format!("{base:020}{SEGMENT_SUFFIX}")
}

/// The base offset named by a segment file name, or `None` for any other name.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The encoded size of `op`'s record.
pub(crate) fn record_len(op: &BatchOp) -> usize {
    RECORD_HEADER_LEN + op.key().len() + op.value().map_or(0, <[u8]>::len)
}

/// Appends the record of `op` at `offset`, framed as `kind`, to `out`: header, key and
/// value, with the checksum computed in one pass over the body once it is in place.
/// The caller has checked the key and value against the limits, so the lengths fit in `u32`.
pub(crate) fn encode_record(offset: u64, op: &BatchOp, kind: RecordKind, out: &mut Vec<u8>) {
    let key = op.key();
    let flags = match kind {
        RecordKind::Unframed => 0,
        RecordKind::Framed => FRAMED_FLAG,
        RecordKind::CommitMarker => FRAMED_FLAG | MARKER_FLAG,
    };
    let value = op.value();
    let value_len = value.map_or(TOMBSTONE, |v| v.len() as u32);
    let body_len = (BODY_FIXED_LEN + key.len() + value.map_or(0, <[u8]>::len)) as u32;
    let start = out.len();
    out.reserve(RECORD_PREFIX_LEN + body_len as usize);
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32 | flags).to_le_bytes());
    out.extend_from_slice(&value_len.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value.unwrap_or_default());
    let crc = crc32c::crc32c(&out[start + RECORD_PREFIX_LEN..]);
    out[start + 4..start + RECORD_PREFIX_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// A decoded record borrowing the bytes it was read from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordView<'a> {
    /// The record's offset.
    pub offset: u64,
    /// The key bytes.
    pub key: &'a [u8],
    /// The value bytes, `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// How the record is framed.
    pub kind: RecordKind,
    /// The whole encoded record, header included (compaction copies it verbatim).
    pub raw: &'a [u8],
}

impl RecordView<'_> {
    /// The record as an owned operation: the one allocation per key and value that a read
    /// cannot avoid.
    pub fn to_op(self) -> BatchOp {
        match self.value {
            Some(value) => BatchOp::Put {
                key: self.key.to_vec(),
                value: value.to_vec(),
            },
            None => BatchOp::Delete {
                key: self.key.to_vec(),
            },
        }
    }
}

/// The body length announced by a record's first four bytes, if it is plausible.
///
/// # Errors
/// A description of the problem when the length cannot belong to a valid record.
pub(crate) fn body_len(prefix: &[u8; 4]) -> std::result::Result<usize, String> {
    let len = u32::from_le_bytes(*prefix) as usize;
    if !(BODY_FIXED_LEN..=MAX_BODY_LEN).contains(&len) {
        return Err(format!("implausible record length {len}"));
    }
    Ok(len)
}

/// Decodes one whole record (`raw` holds exactly the prefix and the body).
///
/// # Errors
/// A description of the problem for a checksum mismatch or inconsistent lengths.
pub(crate) fn decode(raw: &[u8]) -> std::result::Result<RecordView<'_>, String> {
    let (prefix, body) = raw
        .split_at_checked(RECORD_PREFIX_LEN)
        .ok_or("record shorter than its header")?;
    let stored_crc = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
    if crc32c::crc32c(body) != stored_crc {
        return Err("record checksum mismatch".to_string());
    }
    let (fixed, payload) = body
        .split_at_checked(BODY_FIXED_LEN)
        .ok_or("record body shorter than its fixed part")?;
    let offset = u64::from_le_bytes(fixed[0..8].try_into().map_err(|_| "short offset")?);
    let key_field = u32::from_le_bytes(fixed[8..12].try_into().map_err(|_| "short key len")?);
    let kind = match key_field & !KEY_LEN_MASK {
        0 => RecordKind::Unframed,
        FRAMED_FLAG => RecordKind::Framed,
        flags if flags == FRAMED_FLAG | MARKER_FLAG => RecordKind::CommitMarker,
        _ => return Err(format!("unknown record flags in key length {key_field:#x}")),
    };
    let key_len = key_field & KEY_LEN_MASK;
    let value_len = u32::from_le_bytes(fixed[12..16].try_into().map_err(|_| "short value len")?);
    let key_len = key_len as usize;
    let stored_value_len = if value_len == TOMBSTONE {
        0
    } else {
        value_len as usize
    };
    if key_len > MAX_KEY_LEN || key_len + stored_value_len != payload.len() {
        return Err(format!(
            "record lengths disagree: key {key_len}, value {value_len}, payload {}",
            payload.len()
        ));
    }
    let (key, value) = payload.split_at(key_len);
    Ok(RecordView {
        offset,
        key,
        value: (value_len != TOMBSTONE).then_some(value),
        kind,
        raw,
    })
}

/// Checks a topic name for use as part of a directory name.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty name, one holding `/`, `\`, `..` or NUL, or one
/// longer than Kafka's limit of 249 bytes.
pub(crate) fn validate_topic(topic: &str) -> Result<()> {
    let bad = topic.is_empty()
        || topic.len() > MAX_TOPIC_LEN
        || topic.contains(['/', '\\', '\0'])
        || topic.contains("..");
    if bad {
        return Err(Error::invalid(format!(
            "invalid changelog topic name {topic:?}: it must be 1 to {MAX_TOPIC_LEN} bytes \
             without '/', '\\', '..' or NUL"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_put_and_tombstone() {
        let put = BatchOp::Put {
            key: b"k".to_vec(),
            value: b"value".to_vec(),
        };
        let delete = BatchOp::Delete { key: Vec::new() };
        let kinds = [
            RecordKind::Unframed,
            RecordKind::Framed,
            RecordKind::CommitMarker,
        ];
        for ((offset, op), kind) in [(7, put.clone()), (u64::MAX - 1, delete), (9, put)]
            .into_iter()
            .zip(kinds)
        {
            let mut raw = b"before".to_vec();
            encode_record(offset, &op, kind, &mut raw);
            let raw = raw.split_off(6);
            assert_eq!(raw.len(), record_len(&op));
            assert_eq!(body_len(&raw[..4].try_into().unwrap()), Ok(raw.len() - 8));
            let view = decode(&raw).unwrap();
            assert_eq!((view.offset, view.to_op(), view.kind), (offset, op, kind));
        }
    }

    #[test]
    fn names_sort_like_offsets() {
        assert_eq!(segment_name(42), "00000000000000000042.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("42.log"), None);
        assert_eq!(parse_segment_name("0000000000000000004x.log"), None);
    }

    #[test]
    fn rejects_bad_topics() {
        for topic in ["", "a/b", "..", "a..b", "nul\0", &"x".repeat(250)] {
            assert!(validate_topic(topic).is_err(), "{topic:?}");
        }
        assert!(validate_topic("app-counts-changelog.v1").is_ok());
    }
}
