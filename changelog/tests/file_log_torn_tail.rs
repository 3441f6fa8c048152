//! Torn and corrupt tails on real files: the active segment cut at every byte of its last
//! records, and every byte of them flipped. Opening must recover exactly the whole records
//! before the damage (or fail with `Corruption` under `RecoveryMode::Fail`), never panic, and
//! appends must continue after recovery.

use std::fs;
use std::path::{Path, PathBuf};

use statestore_changelog::{Changelog, ChangelogRecord, FileLog, FileLogConfig, RecoveryMode};
use store_api::{BatchOp, ErrorKind};

const TOPIC: &str = "torn-changelog";
/// Records written before the damage.
const RECORDS: u64 = 40;
/// How many of the last records are damaged at every byte.
const DAMAGED: usize = 5;

fn op(i: u64) -> BatchOp {
    let key = if i == 37 {
        Vec::new()
    } else {
        format!("k{i}").into_bytes()
    };
    if i % 5 == 4 {
        BatchOp::Delete { key }
    } else {
        BatchOp::Put {
            key,
            value: vec![i as u8; (i * 3 % 50) as usize],
        }
    }
}

fn records(ops: &[BatchOp]) -> Vec<ChangelogRecord> {
    ops.iter()
        .zip(0..)
        .map(|(op, offset)| ChangelogRecord {
            offset,
            op: op.clone(),
        })
        .collect()
}

/// A synced, cleanly closed single-segment log of `ops`.
struct Written {
    segment: PathBuf,
    bytes: Vec<u8>,
    /// `ends[i]` is the file position just past record `i`.
    ends: Vec<usize>,
}

fn write_log(dir: &Path, ops: &[BatchOp]) -> Written {
    let log =
        FileLog::open(dir, TOPIC, 0, FileLogConfig::default()).expect("open the log to write");
    let mut ends = Vec::new();
    let mut end = 16;
    for op in ops {
        log.append(std::slice::from_ref(op)).expect("append");
        end += 24 + op.key().len() + op.value().map_or(0, <[u8]>::len);
        ends.push(end);
    }
    log.sync().expect("sync");
    let segment = log.dir().join("00000000000000000000.log");
    drop(log);
    let bytes = fs::read(&segment).expect("read the segment file");
    assert_eq!(bytes.len(), end, "the documented record layout");
    Written {
        segment,
        bytes,
        ends,
    }
}

fn open(dir: &Path, recovery: RecoveryMode) -> store_api::Result<FileLog> {
    let config = FileLogConfig {
        recovery,
        ..FileLogConfig::default()
    };
    FileLog::open(dir, TOPIC, 0, config)
}

/// Opens the damaged log, checks it holds exactly the first `whole` records, appends one
/// more, and checks a clean reopen sees all of them.
fn check_recovers(dir: &Path, ops: &[BatchOp], whole: usize, what: &str) {
    let log = open(dir, RecoveryMode::TolerateTornTail)
        .unwrap_or_else(|err| panic!("{what}: open failed: {err}"));
    assert_eq!(
        log.end_offset().expect("end_offset"),
        whole as u64,
        "{what}: end offset"
    );
    assert_eq!(
        log.read(0, 1000).expect("read"),
        records(&ops[..whole]),
        "{what}: records"
    );
    let extra = BatchOp::Put {
        key: b"after-recovery".to_vec(),
        value: b"v".to_vec(),
    };
    let got = log
        .append(std::slice::from_ref(&extra))
        .expect("append after recovery");
    assert_eq!(
        got,
        whole as u64..whole as u64 + 1,
        "{what}: append after recovery"
    );
    log.sync().expect("sync after recovery");
    drop(log);
    let log = open(dir, RecoveryMode::Fail).unwrap_or_else(|err| panic!("{what}: {err}"));
    let mut expected = records(&ops[..whole]);
    expected.push(ChangelogRecord {
        offset: whole as u64,
        op: extra,
    });
    assert_eq!(
        log.read(0, 1000).expect("read after reopen"),
        expected,
        "{what}: after reopen"
    );
}

/// Under `Fail`, opening the damaged log is `Corruption` and leaves the file as it was.
fn check_fails(dir: &Path, segment: &Path, damaged: &[u8], what: &str) {
    let err = open(dir, RecoveryMode::Fail).expect_err(what);
    assert_eq!(err.kind(), ErrorKind::Corruption, "{what}: {err}");
    assert_eq!(
        fs::read(segment).expect("read the segment file"),
        damaged,
        "{what}: file changed"
    );
}

#[test]
fn truncation_at_every_byte_of_the_last_records_recovers_the_whole_ones() {
    let dir = tempfile::tempdir().unwrap();
    let ops: Vec<BatchOp> = (0..RECORDS).map(op).collect();
    let written = write_log(dir.path(), &ops);
    let first = written.ends[ops.len() - DAMAGED - 1];
    for cut in first..=written.bytes.len() {
        let damaged = &written.bytes[..cut];
        fs::write(&written.segment, damaged).unwrap();
        let whole = written.ends.iter().filter(|&&end| end <= cut).count();
        if whole < ops.len() && written.ends[whole - 1] != cut {
            check_fails(
                dir.path(),
                &written.segment,
                damaged,
                &format!("cut at {cut}"),
            );
        }
        check_recovers(dir.path(), &ops, whole, &format!("cut at {cut}"));
    }
}

#[test]
fn a_flipped_byte_in_the_last_records_recovers_the_records_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let ops: Vec<BatchOp> = (0..RECORDS).map(op).collect();
    let written = write_log(dir.path(), &ops);
    let first = written.ends[ops.len() - DAMAGED - 1];
    for pos in first..written.bytes.len() {
        for mask in [0xFF, 0x01] {
            let mut damaged = written.bytes.clone();
            damaged[pos] ^= mask;
            fs::write(&written.segment, &damaged).unwrap();
            let what = format!("byte {pos} ^ {mask:#x}");
            check_fails(dir.path(), &written.segment, &damaged, &what);
            let whole = written.ends.iter().filter(|&&end| end <= pos).count();
            check_recovers(dir.path(), &ops, whole, &what);
        }
    }
}

/// A record larger than the 256 KiB read buffer takes another read path: damage it at a
/// dense sample of positions (every header byte, the first and last 64 bytes, and every
/// 4099th byte between), since 300 K opens would take minutes.
#[test]
fn damage_inside_a_large_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut ops: Vec<BatchOp> = (0..5).map(op).collect();
    ops.push(BatchOp::Put {
        key: b"large".to_vec(),
        value: (0..300_000u32).map(|i| (i % 253) as u8).collect(),
    });
    let written = write_log(dir.path(), &ops);
    let start = written.ends[4];
    let end = written.bytes.len();
    let positions = (start..start + 24 + 64)
        .chain((start..end).step_by(4099))
        .chain(end - 64..end);
    for pos in positions {
        let mut flipped = written.bytes.clone();
        flipped[pos] ^= 0xFF;
        fs::write(&written.segment, &flipped).unwrap();
        check_fails(
            dir.path(),
            &written.segment,
            &flipped,
            &format!("flip {pos}"),
        );
        check_recovers(dir.path(), &ops, 5, &format!("flip {pos}"));
        fs::write(&written.segment, &written.bytes[..pos]).unwrap();
        check_recovers(dir.path(), &ops, 5, &format!("cut at {pos}"));
    }
}

/// A crash right after a roll can leave the new segment shorter than its header, or with a
/// size but zeros for data; recovery restarts it empty at its base offset.
#[test]
fn torn_header_of_a_new_segment_restarts_it_empty() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        segment_bytes: 200,
        ..FileLogConfig::default()
    };
    let log = FileLog::open(dir.path(), TOPIC, 0, config.clone()).unwrap();
    let ops: Vec<BatchOp> = (0..12).map(op).collect();
    log.append(&ops).unwrap();
    let last = log.end_offset().unwrap();
    drop(log);
    let mut bases: Vec<PathBuf> = fs::read_dir(dir.path().join(format!("{TOPIC}-0")))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    bases.sort();
    let active = bases.pop().expect("segments");
    let base: u64 = active
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let torn: [&[u8]; 3] = [b"", b"SSCLOG", &[0; 16]];
    for header in torn {
        fs::write(&active, header).unwrap();
        check_fails(dir.path(), &active, header, "torn header");
        let log = open(dir.path(), RecoveryMode::TolerateTornTail).unwrap();
        assert_eq!(log.end_offset().unwrap(), base, "torn header {header:?}");
        assert_eq!(log.read(0, 100).unwrap(), records(&ops[..base as usize]));
        assert_eq!(log.append(&ops[base as usize..]).unwrap(), base..last);
    }
}
