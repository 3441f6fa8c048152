//! Torn and corrupt tails on real files: the active segment cut at every byte of its last
//! records, and every byte of them flipped. Opening must recover exactly the whole records
//! before the damage (or fail with `Corruption` under `RecoveryMode::Fail`), never panic, and
//! appends must continue after recovery.
//!
//! Then whole commits: a `LoggedStore`'s last commit cut at every byte (within one segment,
//! and spanning segment rolls, killed between the segments) restores the state after the
//! commit before it, and commits made after the recovery restore exactly.

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
        .map(|(op, offset)| ChangelogRecord::unframed(offset, op.clone()))
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
    expected.push(ChangelogRecord::unframed(whole as u64, extra));
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

mod commits {
    use std::collections::BTreeMap;
    use std::fs;
    use std::ops::Bound;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use statestore_changelog::{
        Checkpoint, FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig, SyncPolicy,
    };
    use statestore_memory::{Config, MemoryStore};
    use store_api::KeyValueStore;

    use super::TOPIC;

    type State = BTreeMap<Vec<u8>, Vec<u8>>;

    /// A temporary directory in memory when the machine has one: each of the hundreds of
    /// cuts writes checkpoints and fsyncs them, which a disk makes take minutes in all.
    fn scratch() -> tempfile::TempDir {
        let shm = Path::new("/dev/shm");
        let in_memory = shm
            .is_dir()
            .then(|| tempfile::tempdir_in(shm).ok())
            .flatten();
        in_memory.unwrap_or_else(|| tempfile::tempdir().expect("tempdir"))
    }

    /// The writes of commit `n`: puts over a few keys, and a delete.
    fn writes(n: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        (0..6u64)
            .map(|i| {
                let key = format!("key-{}", (n * 5 + i * 3) % 11).into_bytes();
                let value = (i != 4).then(|| format!("commit {n} write {i}").into_bytes());
                (key, value)
            })
            .collect()
    }

    fn apply(state: &mut State, n: u64) {
        for (key, value) in writes(n) {
            match value {
                Some(value) => drop(state.insert(key, value)),
                None => drop(state.remove(&key)),
            }
        }
    }

    /// Opens a logged memory store over the file log in `dir`, restoring everything.
    fn open(dir: &Path, config: &FileLogConfig) -> (LoggedStore, tempfile::TempDir) {
        let log = FileLog::open(dir, TOPIC, 0, config.clone()).expect("open the file log");
        let cp_dir = scratch();
        let checkpoint = Checkpoint::open(cp_dir.path().join(".checkpoint")).expect("cp");
        let store = LoggedStore::open(
            Arc::new(MemoryStore::new(Config::default())),
            Arc::new(log),
            Arc::new(checkpoint),
            LoggedStoreConfig {
                restore_batch_records: 4,
                ..LoggedStoreConfig::default()
            },
        )
        .expect("open the logged store");
        (store, cp_dir)
    }

    fn commit(store: &LoggedStore, n: u64) {
        for (key, value) in writes(n) {
            match value {
                Some(value) => store.put(&key, &value).expect("put"),
                None => store.delete(&key).expect("delete"),
            }
        }
        store.commit().expect("commit");
    }

    fn state(store: &LoggedStore) -> State {
        store
            .inner()
            .range(Bound::Unbounded, Bound::Unbounded)
            .expect("range")
            .collect::<Result<_, _>>()
            .expect("scan")
    }

    fn segment_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = fs::read_dir(dir.join(format!("{TOPIC}-0")))
            .expect("list segments")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
            .collect();
        files.sort();
        files
    }

    /// Writes commits 0 and 1, cuts commit 1 at every byte of the segment files (every
    /// state a crash can leave, since a segment is complete and synced before the next one
    /// is created), and checks each: the store restores the state after commit 0, or after
    /// commit 1 only when its marker survived, and a commit made after recovery restores.
    fn cut_last_commit_everywhere(config: &FileLogConfig) -> usize {
        let written = scratch();
        let (store, _cp) = open(written.path(), config);
        commit(&store, 0);
        let before: Vec<u64> = segment_files(written.path())
            .iter()
            .map(|file| fs::metadata(file).expect("size").len())
            .collect();
        commit(&store, 1);
        drop(store);
        let files = segment_files(written.path());
        let contents: Vec<Vec<u8>> = files.iter().map(|f| fs::read(f).expect("read")).collect();
        let (mut after_0, mut after_1) = (State::new(), State::new());
        apply(&mut after_0, 0);
        apply(&mut after_1, 0);
        apply(&mut after_1, 1);
        let mut cuts = 0;
        // Commit 1 starts in the last segment commit 0 used, at its length then.
        let first = before.len() - 1;
        for (index, bytes) in contents.iter().enumerate().skip(first) {
            let from = if index == first {
                before[first] as usize
            } else {
                0
            };
            for cut in from..=bytes.len() {
                let last = index == contents.len() - 1 && cut == bytes.len();
                let expected = if last { &after_1 } else { &after_0 };
                check_cut(&files, &contents, index, cut, config, expected);
                cuts += 1;
            }
        }
        cuts
    }

    /// Restores the log cut at byte `cut` of segment `index` (later segments gone), then
    /// commits on top and restores that from scratch.
    fn check_cut(
        files: &[PathBuf],
        contents: &[Vec<u8>],
        index: usize,
        cut: usize,
        config: &FileLogConfig,
        expected: &State,
    ) {
        let what = format!("segment {index} cut at byte {cut}");
        let copy = scratch();
        let part = copy.path().join(format!("{TOPIC}-0"));
        fs::create_dir_all(&part).expect("mkdir");
        for (i, (file, bytes)) in files.iter().zip(contents).enumerate().take(index + 1) {
            let name = file.file_name().expect("file name");
            let kept = if i == index {
                &bytes[..cut]
            } else {
                &bytes[..]
            };
            fs::write(part.join(name), kept).expect("write the cut copy");
        }
        let (store, _cp) = open(copy.path(), config);
        assert_eq!(&state(&store), expected, "{what}: restored");
        commit(&store, 2);
        drop(store);
        let mut later = expected.clone();
        apply(&mut later, 2);
        let (store, _cp) = open(copy.path(), config);
        assert_eq!(state(&store), later, "{what}: a commit after recovery");
    }

    #[test]
    fn a_commit_cut_at_every_byte_restores_the_commit_before_it() {
        let config = FileLogConfig {
            sync: SyncPolicy::Never,
            ..FileLogConfig::default()
        };
        let cuts = cut_last_commit_everywhere(&config);
        assert!(cuts > 250, "only {cuts} cuts");
    }

    #[test]
    fn a_commit_spanning_segment_rolls_killed_between_segments() {
        // Segments of 200 bytes hold about three records: commit 1 spans three segments.
        let config = FileLogConfig {
            sync: SyncPolicy::Never,
            segment_bytes: 200,
            ..FileLogConfig::default()
        };
        let written = tempfile::tempdir().expect("tempdir");
        let (store, _cp) = open(written.path(), &config);
        commit(&store, 0);
        let segments = segment_files(written.path()).len();
        commit(&store, 1);
        drop(store);
        assert!(
            segment_files(written.path()).len() >= segments + 2,
            "commit 1 should span at least two rolls"
        );
        cut_last_commit_everywhere(&config);
    }
}
