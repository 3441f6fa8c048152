//! The file log on real files: rolling, retention, locking, damaged files, a poisoned writer.

use std::fs;
use std::path::{Path, PathBuf};

use statestore_changelog::{Changelog, ChangelogRecord, FileLog, FileLogConfig, SyncPolicy};
use store_api::{BatchOp, ErrorKind};

const TOPIC: &str = "app-store-changelog";
/// Record header plus `key-NNNNNN` plus `value-NNNNNN`.
const RECORD_LEN: u64 = 24 + 10 + 12;

fn op(i: u64) -> BatchOp {
    BatchOp::Put {
        key: format!("key-{i:06}").into_bytes(),
        value: format!("value-{i:06}").into_bytes(),
    }
}

fn ops(range: std::ops::Range<u64>) -> Vec<BatchOp> {
    range.map(op).collect()
}

fn config(segment_bytes: u64) -> FileLogConfig {
    FileLogConfig {
        segment_bytes,
        ..FileLogConfig::default()
    }
}

fn open(dir: &Path, config: FileLogConfig) -> FileLog {
    FileLog::open(dir, TOPIC, 0, config).expect("open file log")
}

fn all(log: &FileLog) -> Vec<ChangelogRecord> {
    log.read(0, usize::MAX).expect("read all")
}

/// Segment files of the log, sorted, with their sizes.
fn segments(log: &FileLog) -> Vec<(PathBuf, u64)> {
    let mut files: Vec<_> = fs::read_dir(log.dir())
        .expect("list partition dir")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .map(|path| {
            let len = fs::metadata(&path).expect("segment metadata").len();
            (path, len)
        })
        .collect();
    files.sort();
    files
}

fn base_of(path: &Path) -> u64 {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("segment stem");
    stem.parse().expect("segment name is an offset")
}

#[test]
fn segments_roll_at_segment_bytes_and_are_named_by_base_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(16 + 5 * RECORD_LEN));
    for i in 0..23 {
        log.append(&ops(i..i + 1)).unwrap();
    }
    log.append(&ops(23..40)).unwrap();
    let files = segments(&log);
    assert_eq!(files.len(), 8, "40 records, 5 per segment: {files:?}");
    for (i, (path, len)) in files.iter().enumerate() {
        assert_eq!(base_of(path), i as u64 * 5);
        assert!(*len <= 16 + 5 * RECORD_LEN, "{path:?} is {len} bytes");
    }
    let expected: Vec<_> = (0..40)
        .map(|i| ChangelogRecord::unframed(i, op(i)))
        .collect();
    assert_eq!(all(&log), expected);
    drop(log);
    let log = open(dir.path(), config(16 + 5 * RECORD_LEN));
    assert_eq!(log.end_offset().unwrap(), 40);
    // Reads into segments found at open build their index lazily: check every offset.
    for from in 0..40 {
        assert_eq!(
            log.read(from, 3).unwrap(),
            expected[from as usize..(from as usize + 3).min(40)]
        );
    }
    assert_eq!(log.append(&ops(40..41)).unwrap(), 40..41);
}

#[test]
fn record_larger_than_a_segment_gets_a_segment_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(1024));
    let big = BatchOp::Put {
        key: b"big".to_vec(),
        value: vec![7; 5000],
    };
    log.append(&[op(0), big.clone(), op(2)]).unwrap();
    log.sync().unwrap();
    let sizes: Vec<u64> = segments(&log).iter().map(|(_, len)| *len).collect();
    assert_eq!(
        sizes,
        vec![16 + RECORD_LEN, 16 + 24 + 3 + 5000, 16 + RECORD_LEN]
    );
    assert_eq!(log.read(1, 1).unwrap()[0].op, big);
}

/// The `i`-th update of ten keys written over and over, as long as [`op`]'s records.
fn overwrite(i: u64) -> BatchOp {
    BatchOp::Put {
        key: format!("key-{:06}", i % 10).into_bytes(),
        value: format!("value-{i:06}").into_bytes(),
    }
}

#[test]
fn retention_deletes_superseded_segments_and_raises_start_offset() {
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 16 + 10 * RECORD_LEN;
    let retained = FileLogConfig {
        retention_bytes: Some(3 * segment_bytes),
        ..config(segment_bytes)
    };
    let log = open(dir.path(), retained.clone());
    for round in 0..10 {
        let updates: Vec<BatchOp> = (round * 10..round * 10 + 10).map(overwrite).collect();
        log.append(&updates).unwrap();
    }
    // Round 9 rewrote every key, so every closed segment was left empty and deleted.
    let files = segments(&log);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(log.start_offset().unwrap(), 90);
    let expected: Vec<_> = (90..100)
        .map(|i| ChangelogRecord::unframed(i, overwrite(i)))
        .collect();
    assert_eq!(all(&log), expected);
    drop(log);
    let log = open(dir.path(), retained);
    assert_eq!(
        (log.start_offset().unwrap(), log.end_offset().unwrap()),
        (90, 100)
    );
    assert_eq!(all(&log), expected);
}

/// Issue 8, point 4: retention over its limit still keeps the latest record of every key.
/// Key `key-000000` is written once, first; the others again and again after it: the first
/// segment keeps that record, and a store restored from the log holds every key.
#[test]
fn retention_keeps_the_latest_record_of_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let retained = FileLogConfig {
        retention_bytes: Some(0),
        ..config(16 + 4 * RECORD_LEN)
    };
    let log = open(dir.path(), retained.clone());
    let once = op(0);
    log.append(std::slice::from_ref(&once)).unwrap();
    let updates: Vec<BatchOp> = (0..60).map(|i| overwrite(i % 9 + 1 + i / 9 * 10)).collect();
    for chunk in updates.chunks(5) {
        log.append(chunk).unwrap();
    }
    let kept = all(&log);
    assert_eq!(
        kept.first(),
        Some(&ChangelogRecord::unframed(0, once.clone()))
    );
    assert_eq!(
        log.start_offset().unwrap(),
        0,
        "the segment of key-000000 stays"
    );
    let mut latest = std::collections::BTreeMap::new();
    for record in &kept {
        latest.insert(record.op.key().to_vec(), record.op.clone());
    }
    let mut expected = std::collections::BTreeMap::new();
    for update in std::iter::once(&once).chain(&updates) {
        expected.insert(update.key().to_vec(), update.clone());
    }
    assert_eq!(latest, expected, "the latest record of every key");
    assert!(
        segments(&log).len() < 16,
        "superseded segments were deleted"
    );
    // Once key-000000 is written again, its first segment goes at the next roll.
    log.append(&[overwrite(1000), op(5000), op(5001), op(5002), op(5003)])
        .unwrap();
    assert!(
        log.start_offset().unwrap() > 0,
        "the first segment was deleted"
    );
}

#[test]
fn retention_never_deletes_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let retained = FileLogConfig {
        retention_bytes: Some(0),
        ..config(16 + 4 * RECORD_LEN)
    };
    let log = open(dir.path(), retained);
    let same_key: Vec<BatchOp> = (0..10).map(|i| overwrite(i * 10)).collect();
    log.append(&same_key).unwrap();
    assert_eq!(segments(&log).len(), 1);
    assert_eq!(log.start_offset().unwrap(), 8);
    assert_eq!(all(&log).len(), 2);
}

#[test]
fn second_open_is_locked_until_drop_or_close() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), FileLogConfig::default());
    let err = FileLog::open(dir.path(), TOPIC, 0, FileLogConfig::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
    // Another partition of the same topic is a different directory.
    FileLog::open(dir.path(), TOPIC, 1, FileLogConfig::default()).unwrap();
    drop(log);
    let log = open(dir.path(), FileLogConfig::default());
    log.append(&ops(0..2)).unwrap();
    log.close().unwrap();
    log.close().unwrap();
    assert_eq!(
        log.append(&ops(2..3)).unwrap_err().kind(),
        ErrorKind::Closed
    );
    assert_eq!(log.read(0, 1).unwrap_err().kind(), ErrorKind::Closed);
    assert_eq!(log.end_offset().unwrap_err().kind(), ErrorKind::Closed);
    // The closed log is still alive: its later drop must write nothing into the new owner's
    // segment.
    let reopened = open(dir.path(), FileLogConfig::default());
    assert_eq!(reopened.end_offset().unwrap(), 2);
    assert_eq!(reopened.append(&ops(2..4)).unwrap(), 2..4);
    drop(log);
    drop(reopened);
    assert_eq!(all(&open(dir.path(), FileLogConfig::default())).len(), 4);
}

#[test]
fn dropping_without_sync_keeps_appended_records() {
    let dir = tempfile::tempdir().unwrap();
    for policy in [SyncPolicy::EveryCommit, SyncPolicy::Never] {
        let topic = format!("t-{policy:?}");
        let cfg = FileLogConfig {
            sync: policy,
            ..FileLogConfig::default()
        };
        let log = FileLog::open(dir.path(), &topic, 0, cfg.clone()).unwrap();
        log.append(&ops(0..3)).unwrap();
        log.sync().unwrap();
        log.append(&ops(3..5)).unwrap();
        drop(log);
        let log = FileLog::open(dir.path(), &topic, 0, cfg).unwrap();
        assert_eq!(log.read(0, 10).unwrap().len(), 5, "{policy:?}");
    }
}

#[test]
fn bad_topics_and_options_are_invalid_arguments() {
    let dir = tempfile::tempdir().unwrap();
    for topic in ["", "../escape", "a/b", "nul\0", ".."] {
        let err = FileLog::open(dir.path(), topic, 0, FileLogConfig::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{topic:?}: {err}");
    }
    let err = FileLog::open(dir.path(), TOPIC, 0, config(10)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let unknown = serde_json::from_str::<FileLogConfig>(r#"{ "segment_size": 1 }"#);
    assert!(unknown.is_err(), "unknown options are rejected");
    let parsed: FileLogConfig =
        serde_json::from_str(r#"{ "recovery": "fail", "retention_bytes": 1024 }"#).unwrap();
    assert_eq!(parsed.retention_bytes, Some(1024));
    assert_eq!(parsed.segment_bytes, FileLogConfig::default().segment_bytes);
}

#[test]
fn corruption_inside_an_older_segment_is_reported_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(16 + 10 * RECORD_LEN));
    log.append(&ops(0..30)).unwrap();
    let first = segments(&log)[0].0.clone();
    drop(log);
    let mut bytes = fs::read(&first).unwrap();
    let middle = (16 + 4 * RECORD_LEN + 30) as usize;
    bytes[middle] ^= 0x40;
    fs::write(&first, bytes).unwrap();

    let log = open(dir.path(), config(16 + 10 * RECORD_LEN));
    assert_eq!(
        log.end_offset().unwrap(),
        30,
        "only the active segment is scanned at open"
    );
    for from in [0, 4, 7] {
        let err = log.read(from, 10).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corruption, "read from {from}: {err}");
    }
    assert_eq!(
        log.read(10, 100).unwrap().len(),
        20,
        "later segments stay readable"
    );
}

#[test]
fn foreign_files_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), FileLogConfig::default()));
    let part = dir.path().join(format!("{TOPIC}-0"));
    let cases: [(&str, &[u8]); 3] = [
        ("notes.txt", b"hello"),
        ("00000000000000000100.log", b"this is not a segment at all"),
        // A valid header naming another base offset than the file name.
        (
            "00000000000000000200.log",
            b"SSCLOG\0\x01\x05\0\0\0\0\0\0\0",
        ),
    ];
    for (name, contents) in cases {
        fs::write(part.join(name), contents).unwrap();
        let err = FileLog::open(dir.path(), TOPIC, 0, FileLogConfig::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corruption, "{name}: {err}");
        fs::remove_file(part.join(name)).unwrap();
    }
    fs::create_dir(part.join("00000000000000000300.log")).unwrap();
    let err = FileLog::open(dir.path(), TOPIC, 0, FileLogConfig::default()).unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Corruption,
        "a directory named like a segment: {err}"
    );
}

/// A real I/O failure poisons the writer: here the next segment's file already exists, so
/// rolling fails with `AlreadyExists`. (A failing fsync takes the same path, but cannot be
/// provoked on a healthy file system without privileges or a fault-injecting mock.)
#[test]
fn a_failed_write_poisons_the_log_until_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(16 + 3 * RECORD_LEN);
    let log = open(dir.path(), cfg.clone());
    let obstacle = log.dir().join("00000000000000000003.log");
    fs::write(&obstacle, b"in the way").unwrap();
    log.append(&ops(0..3)).unwrap();
    let err = log.append(&ops(3..4)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    fs::remove_file(&obstacle).unwrap();
    let err = log.append(&ops(3..4)).unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Io,
        "appends after a failure are refused: {err}"
    );
    assert_eq!(log.sync().unwrap_err().kind(), ErrorKind::Io, "so is sync");
    assert_eq!(log.read(0, 10).unwrap().len(), 3, "reads still work");
    drop(log);
    let log = open(dir.path(), cfg);
    assert_eq!(log.end_offset().unwrap(), 3);
    assert_eq!(log.append(&ops(3..5)).unwrap(), 3..5);
}
