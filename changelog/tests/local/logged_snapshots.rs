//! Snapshot bootstrap on the file log: a fresh store loads the newest usable snapshot, then
//! replays only the changelog after it; a corrupt, missing or foreign snapshot falls back to an
//! older one or to the whole changelog, and the result is exact either way.

use std::path::Path;
use std::sync::Arc;

use crate::logged_common::{Recorder, TOPIC, checkpoint, file_log, replay, scan};
use statestore_changelog::{
    Changelog, CheckpointPolicy, CommitPolicy, Framing, LoggedStore, LoggedStoreConfig, MemoryLog,
    SnapshotConfig, SnapshotInfo, SnapshotStore,
};
use store_api::{BatchOp, ErrorKind, KeyValueStore};

fn config() -> LoggedStoreConfig {
    LoggedStoreConfig {
        commit_policy: CommitPolicy::Explicit,
        checkpoint_policy: CheckpointPolicy::EveryCommit,
        ..LoggedStoreConfig::default()
    }
}

fn snapshots(dir: &Path, keep: usize, every_commits: u64) -> Arc<SnapshotStore> {
    snapshots_with(
        dir,
        SnapshotConfig {
            keep,
            every_commits,
            ..SnapshotConfig::default()
        },
    )
}

fn snapshots_with(dir: &Path, config: SnapshotConfig) -> Arc<SnapshotStore> {
    Arc::new(
        SnapshotStore::open(&SnapshotConfig {
            url: format!("file://{}", dir.display()),
            ..config
        })
        .expect("snapshot store"),
    )
}

/// A RocksDB store in `dir`: it loads snapshots through its bulk loader.
fn rocksdb(dir: &Path) -> Arc<dyn KeyValueStore> {
    Arc::from(statestore::open("rocksdb", dir, &serde_json::Value::Null).expect("rocksdb"))
}

/// Opens a logged store on a fresh RocksDB store and checkpoint under `dir` (a new machine).
fn open_fresh(
    dir: &Path,
    log: Arc<dyn Changelog>,
    snapshots: &Arc<SnapshotStore>,
) -> (LoggedStore, Recorder) {
    let mut recorder = Recorder::default();
    let store = LoggedStore::open_with_snapshots(
        rocksdb(&dir.join("db")),
        log,
        checkpoint(dir),
        config(),
        Arc::clone(snapshots),
        &mut recorder,
    )
    .expect("open");
    (store, recorder)
}

/// `commits` commits of 100 writes each, `generation` in the values, every tenth key deleted.
fn write_commits(store: &LoggedStore, first: u32, commits: u32) {
    for commit in first..first + commits {
        for i in 0..100u32 {
            let key = format!("key{:05}", (commit * 37 + i * 13) % 3000);
            if i % 10 == 9 {
                store.delete(key.as_bytes()).expect("delete");
            } else {
                store
                    .put(key.as_bytes(), format!("v{commit}-{i}").as_bytes())
                    .expect("put");
            }
        }
        store.commit().expect("commit");
    }
}

#[test]
fn a_fresh_store_loads_the_snapshot_then_only_the_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let snaps = snapshots(&dir.path().join("snapshots"), 3, 0);
    let (store, _) = open_fresh(&dir.path().join("a"), log.clone(), &snaps);
    write_commits(&store, 0, 20);
    let taken = store
        .snapshot()
        .expect("snapshot")
        .expect("something committed");
    // 20 commits of 100 records and a marker each.
    assert_eq!(taken.offset, 20 * 101 - 1);
    write_commits(&store, 20, 5);
    let original = scan(store.inner().as_ref());
    drop(store);

    let (copy, recorder) = open_fresh(&dir.path().join("b"), log.clone(), &snaps);
    assert_eq!(copy.bootstrapped_from(), Some(&taken));
    assert_eq!(scan(copy.inner().as_ref()), original);
    assert_eq!(scan(copy.inner().as_ref()), replay(log.as_ref()));
    // Only the five commits after the snapshot were read from the changelog.
    assert_eq!(copy.restored().records, 5 * 100);
    assert_eq!(recorder.records(), 5 * 100);
    assert!(!copy.restored().wiped);
    assert_eq!(copy.restored().from, taken.offset + 1);
    // Its commit protocol goes on from there: a commit, a reopen from its own checkpoint.
    write_commits(&copy, 25, 1);
    let after = scan(copy.inner().as_ref());
    drop(copy);
    let mut recorder = Recorder::default();
    let reopened = LoggedStore::open_with_snapshots(
        rocksdb(&dir.path().join("b").join("db")),
        log.clone(),
        checkpoint(&dir.path().join("b")),
        config(),
        Arc::clone(&snaps),
        &mut recorder,
    )
    .expect("reopen");
    assert_eq!(
        reopened.bootstrapped_from(),
        None,
        "its own checkpoint wins"
    );
    assert_eq!(reopened.restored().records, 0);
    assert_eq!(scan(reopened.inner().as_ref()), after);
}

#[test]
fn a_corrupt_snapshot_falls_back_to_an_older_one_then_to_a_full_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snaps = snapshots(&dir.path().join("snapshots"), 3, 0);
    falls_back(dir.path(), &snaps, &|info| Path::new("/").join(&info.path));
}

/// Two snapshots and a tail; the newest corrupt: the older one and a longer tail; both gone:
/// a full replay. `file_of` names the file holding a snapshot's object.
fn falls_back(
    dir: &Path,
    snaps: &Arc<SnapshotStore>,
    file_of: &dyn Fn(&SnapshotInfo) -> std::path::PathBuf,
) {
    let log = file_log(&dir.join("log"));
    let (store, _) = open_fresh(&dir.join("a"), log.clone(), snaps);
    write_commits(&store, 0, 10);
    let older = store.snapshot().expect("snapshot").expect("taken");
    write_commits(&store, 10, 10);
    let newer = store.snapshot().expect("snapshot").expect("taken");
    write_commits(&store, 20, 3);
    let original = scan(store.inner().as_ref());
    drop(store);

    let (copy, _) = open_fresh(&dir.join("n"), log.clone(), snaps);
    assert_eq!(copy.bootstrapped_from(), Some(&newer));
    assert_eq!(copy.restored().records, 3 * 100);
    assert_eq!(scan(copy.inner().as_ref()), original);
    drop(copy);

    flip_a_byte(&file_of(&newer));
    let (copy, _) = open_fresh(&dir.join("b"), log.clone(), snaps);
    assert_eq!(copy.bootstrapped_from(), Some(&older));
    assert_eq!(copy.restored().records, 13 * 100);
    assert_eq!(scan(copy.inner().as_ref()), original);
    drop(copy);

    std::fs::remove_file(file_of(&older)).expect("remove");
    let (copy, _) = open_fresh(&dir.join("c"), log.clone(), snaps);
    assert_eq!(copy.bootstrapped_from(), None);
    assert!(copy.restored().wiped);
    assert_eq!(copy.restored().records, 23 * 100);
    assert_eq!(scan(copy.inner().as_ref()), original);
}

fn flip_a_byte(file: &Path) {
    let mut bytes = std::fs::read(file).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(file, bytes).expect("write");
}

#[test]
fn a_snapshot_of_another_log_is_not_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snaps = snapshots(&dir.path().join("snapshots"), 3, 0);
    let log = file_log(&dir.path().join("log"));
    let (store, _) = open_fresh(&dir.path().join("a"), log.clone(), &snaps);
    write_commits(&store, 0, 10);
    let taken = store.snapshot().expect("snapshot").expect("taken");
    drop(store);
    drop(log);

    // The changelog was deleted and recreated: shorter than the snapshot's position.
    let short = file_log(&dir.path().join("short"));
    short
        .append_framed(&[put("only", "one")], Framing::Commit)
        .expect("append");
    short.sync().expect("sync");
    let (copy, _) = open_fresh(&dir.path().join("b"), short.clone(), &snaps);
    assert_eq!(copy.bootstrapped_from(), None, "past the log's end");
    assert_eq!(scan(copy.inner().as_ref()), replay(short.as_ref()));
    drop(copy);

    // Recreated and longer: the record at the snapshot's position is not its marker.
    let long = file_log(&dir.path().join("long"));
    let ops: Vec<BatchOp> = (0..3000).map(|i| put(&format!("k{i}"), "x")).collect();
    long.append_framed(&ops, Framing::Commit).expect("append");
    long.sync().expect("sync");
    assert!(taken.offset < long.end_offset().expect("end"));
    let (copy, _) = open_fresh(&dir.path().join("c"), long.clone(), &snaps);
    assert_eq!(copy.bootstrapped_from(), None, "not its commit marker");
    assert_eq!(scan(copy.inner().as_ref()), replay(long.as_ref()));
}

fn put(key: &str, value: &str) -> BatchOp {
    BatchOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

#[test]
fn periodic_snapshots_keep_the_last_n() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let snaps = snapshots(&dir.path().join("snapshots"), 2, 3);
    let (store, _) = open_fresh(&dir.path().join("a"), log.clone(), &snaps);
    write_commits(&store, 0, 10);
    // Snapshots after commits 3, 6 and 9; the first was deleted.
    let offsets: Vec<u64> = snaps
        .list(TOPIC, 0)
        .expect("list")
        .iter()
        .map(|s| s.offset)
        .collect();
    assert_eq!(offsets, vec![9 * 101 - 1, 6 * 101 - 1]);
}

#[test]
fn periodic_snapshots_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let snaps = snapshots_with(
        &dir.path().join("snapshots"),
        SnapshotConfig {
            keep: 10,
            every_ms: 3_600_000,
            ..SnapshotConfig::default()
        },
    );
    let (store, _) = open_fresh(&dir.path().join("a"), log.clone(), &snaps);
    write_commits(&store, 0, 3);
    assert!(
        snaps.list(TOPIC, 0).expect("list").is_empty(),
        "an hour not passed"
    );
    drop(store);
    let every_ms = snapshots_with(
        &dir.path().join("snapshots"),
        SnapshotConfig {
            keep: 10,
            every_ms: 1,
            ..SnapshotConfig::default()
        },
    );
    let (store, _) = open_fresh(&dir.path().join("b"), log.clone(), &every_ms);
    for commit in 3..6 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        write_commits(&store, commit, 1);
    }
    assert_eq!(
        every_ms.list(TOPIC, 0).expect("list").len(),
        3,
        "one per commit"
    );
}

#[test]
fn a_fenced_writer_takes_no_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snaps = snapshots(&dir.path().join("snapshots"), 3, 0);
    let log = MemoryLog::new(TOPIC, 0);
    let open = |name: &str| {
        LoggedStore::open_snapshotted(
            rocksdb(&dir.path().join(name)),
            Arc::new(log.clone()),
            checkpoint(&dir.path().join(name)),
            config(),
            Arc::clone(&snaps),
        )
        .expect("open")
    };
    let old = open("old");
    old.fence().expect("fence");
    write_commits(&old, 0, 2);
    let new = open("new");
    assert_eq!(new.fence().expect("fence"), 2);
    write_commits(&new, 2, 2);
    let err = old.snapshot().expect_err("fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    let taken = new.snapshot().expect("snapshot").expect("taken");
    assert_eq!(taken.epoch, 2);
    write_commits(&new, 4, 1);
    let expected = scan(new.inner().as_ref());

    let copy = open("copy");
    assert_eq!(copy.bootstrapped_from(), Some(&taken));
    assert_eq!(copy.restored().records, 100);
    assert_eq!(scan(copy.inner().as_ref()), expected);
    // The epoch came with the snapshot: the copy fences above it.
    assert_eq!(copy.fence().expect("fence"), 3);
}

/// The same against an S3-protocol server (`scripts/s3-tests.sh` starts `s3s-fs` on loopback):
/// `STATESTORE_S3_ENDPOINT` is its URL, `STATESTORE_S3_ROOT` the directory it serves (a bucket
/// is a directory there, an object a file, which the test corrupts).
#[cfg(feature = "s3")]
#[test]
fn snapshots_in_s3_bootstrap_and_fall_back() {
    let (Ok(endpoint), Ok(root)) = (
        std::env::var("STATESTORE_S3_ENDPOINT"),
        std::env::var("STATESTORE_S3_ROOT"),
    ) else {
        assert!(
            std::env::var_os("STATESTORE_REQUIRE_S3").is_none(),
            "STATESTORE_REQUIRE_S3 is set but STATESTORE_S3_ENDPOINT or STATESTORE_S3_ROOT is not"
        );
        eprintln!("SKIP snapshots_in_s3: set STATESTORE_S3_ENDPOINT and STATESTORE_S3_ROOT");
        return;
    };
    let bucket = format!("snapshots-{}", std::process::id());
    std::fs::create_dir_all(Path::new(&root).join(&bucket)).expect("bucket");
    let options = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_allow_http", "true"),
        ("aws_region", "us-east-1"),
        ("aws_access_key_id", "statestore"),
        ("aws_secret_access_key", "statestore-secret"),
    ];
    let snaps = Arc::new(
        SnapshotStore::open(&SnapshotConfig {
            url: format!("s3://{bucket}/app"),
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            keep: 3,
            ..SnapshotConfig::default()
        })
        .expect("s3 snapshot store"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let bucket_dir = Path::new(&root).join(&bucket);
    falls_back(dir.path(), &snaps, &|info| bucket_dir.join(&info.path));
}

/// A backend without checkpoints (redb) snapshots as an export of its pairs and loads one;
/// a snapshot of RocksDB's files is not for it, so it falls back to the older export.
#[test]
fn a_store_without_checkpoints_exports_and_skips_files_of_another_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let snaps = snapshots(&dir.path().join("snapshots"), 3, 0);
    let redb = |dir: &Path| -> Arc<dyn KeyValueStore> {
        Arc::from(statestore::open("redb", dir, &serde_json::Value::Null).expect("redb"))
    };
    let open = |dir: &Path, store: Arc<dyn KeyValueStore>| {
        LoggedStore::open_with_snapshots(
            store,
            log.clone(),
            checkpoint(dir),
            config(),
            Arc::clone(&snaps),
            &mut Recorder::default(),
        )
        .expect("open")
    };
    let a = dir.path().join("a");
    let store = open(&a, redb(&a.join("db")));
    write_commits(&store, 0, 5);
    let exported = store.snapshot().expect("snapshot").expect("taken");
    assert!(!exported.is_files());
    drop(store);
    // A RocksDB writer takes over the log and snapshots its files.
    let r = dir.path().join("r");
    let store = open(&r, rocksdb(&r.join("db")));
    write_commits(&store, 5, 2);
    let files = store.snapshot().expect("snapshot").expect("taken");
    assert!(files.is_files());
    write_commits(&store, 7, 1);
    let original = scan(store.inner().as_ref());
    drop(store);

    let b = dir.path().join("b");
    let copy = open(&b, redb(&b.join("db")));
    assert_eq!(copy.bootstrapped_from(), Some(&exported));
    assert_eq!(copy.restored().records, 3 * 100);
    assert_eq!(scan(copy.inner().as_ref()), original);
}
