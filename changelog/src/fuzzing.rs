//! The bodies of the `cargo fuzz` targets in `fuzz/`, which enable the `fuzzing` feature: here,
//! so that the targets stay one line and `cargo test` replays the corpus and every input that
//! once crashed through the very same code (see the tests below). Not part of the API: each
//! function panics when a property it checks does not hold, which is how libFuzzer learns of a
//! failure.

use std::path::Path;

use store_api::BatchOp;

use crate::checkpoint::{format_checkpoint, parse_checkpoint};
use crate::file::format::{self, RECORD_PREFIX_LEN, SEGMENT_HEADER_LEN};
use crate::{
    Changelog, FileLog, FileLogConfig, Framing, LoggedStoreConfig, RecordKind, RecoveryMode,
};

/// Input flags of [`file_log_open`] (the first byte).
const WITH_HEADERS: u8 = 1;
const TWO_SEGMENTS: u8 = 2;
const FAIL_MODE: u8 = 4;
const SMALL_SEGMENTS: u8 = 8;
const FIX_CHECKSUMS: u8 = 16;

/// Decodes the record at the start of `data` as a segment reader does: its announced length
/// first, then the record of that length. A record that decodes must encode back to the same
/// bytes. The first byte, when odd, asks for the checksum to be made valid first, so that the
/// fuzzer gets past it to the lengths.
pub fn record_decode(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some(prefix) = rest.first_chunk::<4>() else {
        return;
    };
    let Ok(body) = format::body_len(prefix) else {
        return;
    };
    let Some(raw) = rest.get(..RECORD_PREFIX_LEN + body) else {
        return;
    };
    let mut raw = raw.to_vec();
    if flags & 1 == 1 {
        fix_record_checksum(&mut raw);
    }
    let Ok(view) = format::decode(&raw) else {
        return;
    };
    let op = view.to_op();
    let mut encoded = Vec::new();
    format::encode_record(view.offset, &op, view.kind, &mut encoded);
    assert_eq!(
        encoded, raw,
        "a decoded record does not encode back to its bytes"
    );
}

/// Parses `data` as checkpoint text. What parses must format and parse back to the same
/// entries.
pub fn checkpoint_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(entries) = parse_checkpoint(text) else {
        return;
    };
    let again = parse_checkpoint(&format_checkpoint(&entries));
    assert_eq!(
        again,
        Ok(entries),
        "a parsed checkpoint does not round-trip"
    );
}

/// Deserializes `data` as the changelog's option tables. What parses must serialize and
/// deserialize back to the same options, and validation must not panic.
pub fn changelog_config(data: &[u8]) {
    if let Ok(config) = serde_json::from_slice::<FileLogConfig>(data) {
        let _ = config.validate();
        assert_eq!(round_trip(&config), Some(config));
    }
    if let Ok(config) = serde_json::from_slice::<LoggedStoreConfig>(data) {
        assert_eq!(round_trip(&config), Some(config));
    }
}

fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> Option<T> {
    serde_json::to_vec(value)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// Writes `data` as the segment files of a log in `dir` (which should be empty) and opens
/// it: a damaged log must fail with an error, and one that opens must read back in offset
/// order, take a commit and reopen with that commit in place.
///
/// The first byte holds flags: prepend valid segment headers (else the fuzzer must find the
/// magic), split the bytes into two segments (at a point and with a base offset taken from
/// the next bytes), open in [`RecoveryMode::Fail`], use tiny segments (so the append rolls),
/// and rewrite every record's checksum to match (so the fuzzer gets past it).
pub fn file_log_open(dir: &Path, data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let config = FileLogConfig {
        recovery: if flags & FAIL_MODE != 0 {
            RecoveryMode::Fail
        } else {
            RecoveryMode::TolerateTornTail
        },
        segment_bytes: if flags & SMALL_SEGMENTS != 0 {
            64
        } else {
            1 << 20
        },
        ..FileLogConfig::default()
    };
    let partition_dir = dir.join("fuzz-0");
    if std::fs::create_dir_all(&partition_dir).is_err() {
        return;
    }
    for (base, bytes) in segments(flags, rest) {
        let path = partition_dir.join(format::segment_name(base));
        if std::fs::write(path, bytes).is_err() {
            return;
        }
    }
    let Ok(log) = FileLog::open(dir, "fuzz", 0, config.clone()) else {
        return;
    };
    check_reads(&log);
    let op = BatchOp::Put {
        key: b"fuzz".to_vec(),
        value: b"appended".to_vec(),
    };
    let Ok(appended) = log.append_framed(std::slice::from_ref(&op), Framing::Commit) else {
        return;
    };
    if log.sync().is_err() {
        return;
    }
    let at = appended.start;
    assert_eq!(appended.end, at + 2, "one op and its commit marker");
    assert_eq!(log.end_offset().ok(), Some(at + 2));
    drop(log);
    let log = match FileLog::open(dir, "fuzz", 0, config) {
        Ok(log) => log,
        Err(err) => panic!("a log that took an append cannot be reopened: {err}"),
    };
    assert_eq!(
        log.end_offset().ok(),
        Some(at + 2),
        "reopen lost the append"
    );
    let read = log.read(at, 2).unwrap_or_default();
    let kinds: Vec<_> = read.iter().map(|r| (r.offset, r.kind)).collect();
    assert_eq!(
        kinds,
        [(at, RecordKind::Framed), (at + 1, RecordKind::CommitMarker)]
    );
    assert_eq!(read[0].op, op);
}

/// Reads the whole log, checking offset order and bounds, until the end or an error.
fn check_reads(log: &FileLog) {
    let (Ok(start), Ok(end)) = (log.start_offset(), log.end_offset()) else {
        return;
    };
    assert!(start <= end, "start offset {start} after end offset {end}");
    let mut from = start;
    while let Ok(records) = log.read(from, 7) {
        let Some(last) = records.last() else {
            break;
        };
        for pair in records.windows(2) {
            assert!(pair[0].offset < pair[1].offset, "offsets out of order");
        }
        assert!(
            records[0].offset >= from,
            "a read returned an offset before `from`"
        );
        assert!(last.offset < end, "a read returned an offset past the end");
        from = last.offset + 1;
    }
}

/// The segment files for `data` under `flags`: `(base offset, bytes)`.
fn segments(flags: u8, data: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut parts = vec![(0, data)];
    if flags & TWO_SEGMENTS != 0 && data.len() >= 10 {
        let (params, body) = data.split_at(10);
        let split = usize::from(u16::from_le_bytes([params[0], params[1]])) % (body.len() + 1);
        let base = u64::from_le_bytes(params[2..10].try_into().unwrap_or_default());
        let (first, second) = body.split_at(split);
        parts = vec![(0, first), (base, second)];
    }
    parts
        .into_iter()
        .map(|(base, body)| {
            let mut bytes = Vec::with_capacity(SEGMENT_HEADER_LEN + body.len());
            if flags & WITH_HEADERS != 0 {
                bytes.extend_from_slice(&format::segment_header(base));
            }
            bytes.extend_from_slice(body);
            if flags & FIX_CHECKSUMS != 0 {
                fix_segment_checksums(&mut bytes);
            }
            (base, bytes)
        })
        .collect()
}

/// Gives every record after the segment header a matching checksum, as far as the lengths
/// allow walking.
fn fix_segment_checksums(segment: &mut [u8]) {
    let mut pos = SEGMENT_HEADER_LEN;
    while let Some(prefix) = segment.get(pos..pos + 4) {
        let prefix = [prefix[0], prefix[1], prefix[2], prefix[3]];
        let Ok(body) = format::body_len(&prefix) else {
            return;
        };
        let end = pos + RECORD_PREFIX_LEN + body;
        let Some(record) = segment.get_mut(pos..end) else {
            return;
        };
        fix_record_checksum(record);
        pos = end;
    }
}

/// Sets the checksum field of the record in `raw` to the checksum of its body.
fn fix_record_checksum(raw: &mut [u8]) {
    if raw.len() >= RECORD_PREFIX_LEN {
        let crc = crc32c::crc32c(&raw[RECORD_PREFIX_LEN..]);
        raw[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    //! Replays the fuzz corpus (`fuzz/corpus/<target>/`) and the inputs that once crashed a
    //! target (`tests/fuzz-regressions/<target>/`) through the targets' bodies.

    use std::path::PathBuf;

    fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
        // At run time: a test binary reused from a build cache shared by several checkouts
        // would carry another checkout's compile-time path.
        let root = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        let dirs = [
            root.join("../fuzz/corpus").join(target),
            root.join("tests/fuzz-regressions").join(target),
        ];
        let mut files: Vec<PathBuf> = dirs
            .iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flatten()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no inputs for {target} under {dirs:?}");
        files
            .into_iter()
            .map(|path| {
                let bytes = std::fs::read(&path).unwrap();
                (path, bytes)
            })
            .collect()
    }

    #[test]
    fn record_decode_inputs() {
        for (_, data) in inputs("record_decode") {
            super::record_decode(&data);
        }
    }

    #[test]
    fn checkpoint_parse_inputs() {
        for (_, data) in inputs("checkpoint_parse") {
            super::checkpoint_parse(&data);
        }
    }

    #[test]
    fn changelog_config_inputs() {
        for (_, data) in inputs("config_parse") {
            super::changelog_config(&data);
        }
    }

    #[test]
    fn file_log_open_inputs() {
        for (path, data) in inputs("file_log_open") {
            let dir = tempfile::tempdir().unwrap();
            eprintln!("{}", path.display());
            super::file_log_open(dir.path(), &data);
        }
    }
}
