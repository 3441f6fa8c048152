//! Compaction of the file log: latest record per key, offsets unchanged, crash leftovers.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::ops::Bound;
use std::path::Path;

use statestore_changelog::{
    Changelog, ChangelogRecord, Checkpoint, CommitReader, FileLog, FileLogConfig, Framing,
    NoopRestoreListener, RecordKind, restore,
};
use statestore_memory::{Config, MemoryStore};
use store_api::{BatchOp, KeyValueStore};

const TOPIC: &str = "compaction-changelog";

fn config() -> FileLogConfig {
    FileLogConfig {
        segment_bytes: 600,
        ..FileLogConfig::default()
    }
}

fn open(dir: &Path) -> FileLog {
    FileLog::open(dir, TOPIC, 0, config()).expect("open file log")
}

/// Update `i` of a workload over ten keys, every thirteenth a delete.
fn update(i: u64) -> BatchOp {
    let key = format!("key-{}", i % 10).into_bytes();
    if i % 13 == 12 {
        BatchOp::Delete { key }
    } else {
        BatchOp::Put {
            key,
            value: format!("value-{i}").into_bytes(),
        }
    }
}

fn all(log: &FileLog) -> Vec<ChangelogRecord> {
    log.read(0, usize::MAX).expect("read all")
}

/// The state a store restored from `records` holds.
fn replay(records: &[ChangelogRecord]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut state = BTreeMap::new();
    for record in records {
        match &record.op {
            BatchOp::Put { key, value } => state.insert(key.clone(), value.clone()),
            BatchOp::Delete { key } => state.remove(key),
        };
    }
    state
}

/// The offset of the last record of each key.
fn latest(records: &[ChangelogRecord]) -> HashSet<u64> {
    let mut by_key = BTreeMap::new();
    for record in records {
        by_key.insert(record.op.key().to_vec(), record.offset);
    }
    by_key.into_values().collect()
}

fn active_base(log: &FileLog) -> u64 {
    let mut bases: Vec<u64> = fs::read_dir(log.dir())
        .expect("list the partition directory")
        .filter_map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_str()?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect();
    bases.sort_unstable();
    *bases.last().expect("at least one segment")
}

#[test]
fn compaction_keeps_the_latest_record_of_each_key_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let updates: Vec<BatchOp> = (0..300).map(update).collect();
    for chunk in updates.chunks(7) {
        log.append(chunk).unwrap();
    }
    let before = all(&log);
    let latest = latest(&before);
    let stats = log.compact().unwrap();
    let after = all(&log);

    let active = active_base(&log);
    for record in &after {
        assert_eq!(
            record, &before[record.offset as usize],
            "offsets and contents unchanged"
        );
        assert!(
            latest.contains(&record.offset) || record.offset >= active,
            "superseded record {} kept in a closed segment",
            record.offset
        );
    }
    let kept: HashSet<u64> = after.iter().map(|r| r.offset).collect();
    assert!(latest.is_subset(&kept), "a latest record was dropped");
    assert_eq!(replay(&after), replay(&before));
    assert_eq!(stats.records_removed, (before.len() - after.len()) as u64);
    assert!(
        stats.segments_rewritten > 10 && stats.bytes_after < stats.bytes_before,
        "{stats:?}"
    );
    assert_eq!(
        log.end_offset().unwrap(),
        300,
        "compaction never moves the end"
    );
    assert_eq!(log.start_offset().unwrap(), 0, "nor the start");

    drop(log);
    let log = open(dir.path());
    assert_eq!(all(&log), after, "the compacted log reopens the same");
    assert_eq!(
        log.compact().unwrap().segments_rewritten,
        0,
        "nothing left to compact"
    );
    assert_eq!(log.append(&[update(300)]).unwrap(), 300..301);
    // Reads from inside gaps land on the next kept record.
    for from in 0..300 {
        let got = log.read(from, 1).unwrap();
        let next = after.iter().find(|r| r.offset >= from);
        assert_eq!(got.first(), next, "read from {from}");
    }
}

#[test]
fn leftover_compaction_output_is_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let updates: Vec<BatchOp> = (0..100).map(update).collect();
    log.append(&updates).unwrap();
    let before = all(&log);
    let part = log.dir().to_path_buf();
    drop(log);
    // What a crash between writing and renaming a rewritten segment leaves behind.
    let leftover = part.join("00000000000000000000.log.compact");
    fs::write(&leftover, b"half-written compaction output").unwrap();
    let log = open(dir.path());
    assert!(!leftover.exists(), "the leftover was not removed");
    assert_eq!(all(&log), before);
}

#[test]
fn compaction_runs_alongside_appends_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.append(&(0..200).map(update).collect::<Vec<_>>())
        .unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 200..2000 {
                log.append(&[update(i)]).unwrap();
            }
        });
        scope.spawn(|| {
            for _ in 0..50 {
                let records = all(&log);
                assert!(records.windows(2).all(|w| w[0].offset < w[1].offset));
            }
        });
        for _ in 0..5 {
            log.compact().unwrap();
        }
    });
    log.compact().unwrap();
    let expected: Vec<ChangelogRecord> = (0..2000)
        .map(|i| ChangelogRecord::unframed(i, update(i)))
        .collect();
    assert_eq!(replay(&all(&log)), replay(&expected));
    assert_eq!(log.end_offset().unwrap(), 2000);
}

/// Framed commits compact to their latest records and the last marker; the framed records
/// after the last marker (a commit abandoned halfway, here spanning a roll) are kept, and
/// never count as the latest of their keys: the committed records they would supersede stay,
/// so a restore still rebuilds the last committed state.
#[test]
fn compaction_keeps_committed_records_an_abandoned_commit_would_supersede() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut committed = BTreeMap::new();
    for round in 0..6 {
        let ops: Vec<BatchOp> = (round * 10..round * 10 + 10).map(update).collect();
        log.append_framed(&ops, Framing::Commit).unwrap();
        for op in &ops {
            match op {
                BatchOp::Put { key, value } => committed.insert(key.clone(), value.clone()),
                BatchOp::Delete { key } => committed.remove(key),
            };
        }
    }
    // A writer dies halfway through a commit that rewrites every key, across a roll.
    let abandoned: Vec<BatchOp> = (1000..1030).map(update).collect();
    log.append_framed(&abandoned, Framing::Open).unwrap();
    let stats = log.compact().unwrap();
    assert!(stats.records_removed > 0, "{stats:?}");
    let after = all(&log);
    let markers = after
        .iter()
        .filter(|r| r.kind == RecordKind::CommitMarker)
        .count();
    assert_eq!(markers, 1, "only the last marker is left");
    let tail: Vec<_> = after
        .iter()
        .filter(|r| r.offset >= 66)
        .map(|r| r.op.clone())
        .collect();
    assert_eq!(tail, abandoned, "the abandoned records are kept");
    let mut reader = CommitReader::new(&log, 0);
    let mut restored = BTreeMap::new();
    while reader.position() < log.end_offset().unwrap() {
        let released = reader.read(7).unwrap();
        assert!(released.last_read.is_some());
        for op in released.ops {
            match op {
                BatchOp::Put { key, value } => restored.insert(key, value),
                BatchOp::Delete { key } => restored.remove(&key),
            };
        }
    }
    assert_eq!(restored, committed);
    assert_eq!(reader.committed(), Some(65));
    // A restore finds the last commit end first, then reads the gaps up to it in batches.
    for batch in [1, 3, 1000] {
        let cp_dir = tempfile::tempdir().unwrap();
        let checkpoint = Checkpoint::open(cp_dir.path().join(".checkpoint")).unwrap();
        let store = MemoryStore::new(Config::default());
        let outcome = restore(&store, &log, &checkpoint, batch, &mut NoopRestoreListener).unwrap();
        assert_eq!(outcome.checkpoint, Some(65), "batches of {batch}");
        let all = store.range(Bound::Unbounded, Bound::Unbounded).unwrap();
        let state: BTreeMap<Vec<u8>, Vec<u8>> = all.collect::<Result<_, _>>().unwrap();
        assert_eq!(state, committed, "batches of {batch}");
    }
}
