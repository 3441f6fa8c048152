//! Restore on open: from the checkpoint when the log covers it, otherwise wipe and replay all.

use std::sync::Arc;

use crate::logged_common::{
    Recorder, TOPIC, checkpoint, file_log, memory_store, persistent_store, replay, scan,
};
use statestore_changelog::{
    Changelog, Checkpoint, CheckpointPolicy, FileLog, FileLogConfig, Framing, LoggedStore,
    LoggedStoreConfig, MemoryLog, read_checkpoint,
};
use store_api::{BatchOp, KeyValueStore};

/// Every commit checkpoints, so the checkpoint file follows the commits these tests make.
fn config(restore_batch_records: usize) -> LoggedStoreConfig {
    LoggedStoreConfig {
        restore_batch_records,
        checkpoint_policy: CheckpointPolicy::EveryCommit,
        ..LoggedStoreConfig::default()
    }
}

fn put_op(i: u32, generation: u32) -> BatchOp {
    BatchOp::Put {
        key: format!("key{i:05}").into_bytes(),
        value: generation.to_be_bytes().to_vec(),
    }
}

/// Opens a logged store, recording the restore.
fn open(
    inner: &Arc<dyn KeyValueStore>,
    log: Arc<dyn Changelog>,
    cp: &Arc<Checkpoint>,
    batch: usize,
) -> (LoggedStore, Recorder) {
    let mut recorder = Recorder::default();
    let store = LoggedStore::open_with_listener(
        Arc::clone(inner),
        log,
        Arc::clone(cp),
        config(batch),
        &mut recorder,
    )
    .expect("open");
    (store, recorder)
}

#[test]
fn restore_from_a_checkpoint_replays_only_the_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let inner = memory_store();
    let cp = checkpoint(dir.path());
    let (store, recorder) = open(&inner, log.clone(), &cp, 100);
    assert_eq!(recorder.starts, vec![(TOPIC.to_string(), 0, 0, 0)]);
    for i in 0..1000 {
        store
            .put(format!("key{i:05}").as_bytes(), &1u32.to_be_bytes())
            .expect("put");
        if i % 100 == 99 {
            store.commit().expect("commit");
        }
    }
    // The process dies after a commit appended to the log but before it reached the store.
    // Ten commits of 100 records and a marker each: the checkpoint names offset 1009.
    std::mem::forget(store);
    assert_eq!(cp.get(TOPIC, 0), Some(1009));
    let tail: Vec<BatchOp> = (0..250).map(|i| put_op(i * 4, 2)).collect();
    log.append_framed(&tail, Framing::Commit).expect("append");
    log.sync().expect("sync");

    let (store, recorder) = open(&inner, log.clone(), &cp, 100);
    assert_eq!(recorder.starts, vec![(TOPIC.to_string(), 0, 1010, 1261)]);
    assert_eq!(recorder.batches, vec![(1109, 100), (1209, 100), (1260, 50)]);
    assert_eq!(recorder.ends, vec![250]);
    assert!(!store.restored().wiped);
    assert_eq!(cp.get(TOPIC, 0), Some(1260));
    assert_eq!(
        store.get(b"key00004").expect("get"),
        Some(2u32.to_be_bytes().to_vec())
    );
    assert_eq!(
        store.get(b"key00005").expect("get"),
        Some(1u32.to_be_bytes().to_vec())
    );
    assert_eq!(scan(&store), replay(log.as_ref()));
    std::mem::forget(store);

    // Nothing new: nothing is read.
    let (_store, recorder) = open(&inner, log, &cp, 100);
    assert_eq!(recorder.starts, vec![(TOPIC.to_string(), 0, 1261, 1261)]);
    assert!(recorder.batches.is_empty());
    assert_eq!(recorder.ends, vec![0]);
}

#[test]
fn no_checkpoint_wipes_the_store_and_replays_the_whole_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = MemoryLog::new(TOPIC, 0);
    log.append(&(0..100).map(|i| put_op(i, 1)).collect::<Vec<_>>())
        .expect("append");
    let inner = memory_store();
    // Data the log never saw, in a store with no checkpoint: it cannot be trusted.
    inner.put(b"junk", b"x").expect("put");
    inner.put(b"key00007", b"stale").expect("put");
    let cp = checkpoint(dir.path());
    let (store, recorder) = open(&inner, Arc::new(log.clone()), &cp, 30);
    assert!(store.restored().wiped);
    assert_eq!(recorder.starts, vec![(TOPIC.to_string(), 0, 0, 100)]);
    assert_eq!(
        recorder.batches,
        vec![(29, 30), (59, 30), (89, 30), (99, 10)]
    );
    assert_eq!(store.get(b"junk").expect("get"), None);
    assert_eq!(scan(&store), replay(&log));
    assert_eq!(cp.get(TOPIC, 0), Some(99));
}

#[test]
fn a_checkpoint_past_the_log_end_wipes_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = MemoryLog::new(TOPIC, 0);
    log.append(&(0..10).map(|i| put_op(i, 1)).collect::<Vec<_>>())
        .expect("append");
    let cp = checkpoint(dir.path());
    // The log lost records the store had (say, an unsynced log and a machine crash).
    cp.set(TOPIC, 0, 5000).expect("set");
    let inner = memory_store();
    inner
        .put(b"key99999", b"only in the lost part of the log")
        .expect("put");
    let (store, recorder) = open(&inner, Arc::new(log.clone()), &cp, 1000);
    assert!(store.restored().wiped);
    assert_eq!(recorder.records(), 10);
    assert_eq!(scan(&store), replay(&log));
    assert_eq!(cp.get(TOPIC, 0), Some(9));
}

#[test]
fn a_checkpoint_before_the_log_start_wipes_and_replays_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = FileLogConfig {
        segment_bytes: 1024,
        retention_bytes: Some(4096),
        ..FileLogConfig::default()
    };
    let log = Arc::new(FileLog::open(&dir.path().join("log"), TOPIC, 0, config).expect("open"));
    for round in 0..20 {
        log.append(&(0..10).map(|i| put_op(i, round)).collect::<Vec<_>>())
            .expect("append");
    }
    let start = log.start_offset().expect("start");
    assert!(start > 1, "retention removed nothing");
    let cp = checkpoint(dir.path());
    cp.set(TOPIC, 0, start - 2).expect("set");
    let inner = memory_store();
    let (store, recorder) = open(&inner, log.clone(), &cp, 1000);
    assert!(store.restored().wiped);
    assert_eq!(recorder.starts, vec![(TOPIC.to_string(), 0, start, 200)]);
    // Retention compacted before deleting, so the records left are fewer than the offsets.
    let left = log.read(start, usize::MAX).expect("read").len();
    assert_eq!(recorder.records(), left);
    assert_eq!(scan(&store), replay(log.as_ref()));
    assert_eq!(scan(&store).len(), 10, "retention kept every key");
    std::mem::forget(store);

    // A checkpoint just before the start is still covered: nothing is wiped.
    cp.set(TOPIC, 0, start - 1).expect("set");
    let (store, recorder) = open(&inner, log, &cp, 1000);
    assert!(!store.restored().wiped);
    assert_eq!(recorder.starts, vec![(TOPIC.to_string(), 0, start, 200)]);
}

#[test]
fn restore_from_a_compacted_log_with_gaps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = FileLogConfig {
        segment_bytes: 2048,
        ..FileLogConfig::default()
    };
    let log = Arc::new(FileLog::open(&dir.path().join("log"), TOPIC, 0, config).expect("open"));
    for round in 0..30 {
        let mut ops: Vec<BatchOp> = (0..8).map(|i| put_op(i, round)).collect();
        ops.push(BatchOp::Delete {
            key: put_op(round % 8, 0).key().to_vec(),
        });
        log.append(&ops).expect("append");
    }
    let before = replay(log.as_ref());
    let stats = log.compact().expect("compact");
    assert!(stats.records_removed > 0, "compaction removed nothing");
    let inner = memory_store();
    let (store, recorder) = open(&inner, log.clone(), &checkpoint(dir.path()), 7);
    assert_eq!(scan(&store), before);
    assert!((recorder.records() as u64) < 270);
    assert_eq!(store.checkpoint().get(TOPIC, 0), Some(269));
}

#[test]
fn an_empty_log_restores_an_empty_store_and_checkpoints_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inner = memory_store();
    inner.put(b"junk", b"x").expect("put");
    let cp = checkpoint(dir.path());
    let (store, recorder) = open(&inner, Arc::new(MemoryLog::new(TOPIC, 0)), &cp, 10);
    assert!(scan(&store).is_empty());
    assert_eq!(recorder.ends, vec![0]);
    assert_eq!(cp.get(TOPIC, 0), None);
    assert!(!dir.path().join(".checkpoint").exists());
}

#[test]
fn stores_of_one_task_merge_their_checkpoint_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cp = checkpoint(dir.path());
    let counts = MemoryLog::new("app-counts-changelog", 3);
    let totals = MemoryLog::new("app-totals-changelog", 3);
    let (a, _) = open(
        &persistent_store(&dir.path().join("a")),
        Arc::new(counts),
        &cp,
        10,
    );
    let (b, _) = open(
        &persistent_store(&dir.path().join("b")),
        Arc::new(totals),
        &cp,
        10,
    );
    a.put(b"x", b"1").expect("put");
    a.commit().expect("commit");
    b.put(b"y", b"1").expect("put");
    b.put(b"z", b"1").expect("put");
    b.commit().expect("commit");
    a.put(b"x", b"2").expect("put");
    a.commit().expect("commit");
    let text = std::fs::read_to_string(dir.path().join(".checkpoint")).expect("read");
    assert_eq!(
        text,
        "0\n2\napp-counts-changelog 3 3\napp-totals-changelog 3 2\n"
    );
    let entries = read_checkpoint(&dir.path().join(".checkpoint"))
        .expect("read")
        .expect("present");
    assert_eq!(entries.len(), 2);
    assert!(!dir.path().join(".checkpoint.tmp").exists());
}

#[test]
fn an_empty_store_under_a_checkpoint_gets_the_whole_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = MemoryLog::new(TOPIC, 0);
    log.append(&(0..40).map(|i| put_op(i, 1)).collect::<Vec<_>>())
        .expect("append");
    let cp = checkpoint(dir.path());
    // The checkpoint vouches for 30 records, but the store directory was deleted since.
    cp.set(TOPIC, 0, 29).expect("set");
    let (store, recorder) = open(&memory_store(), Arc::new(log.clone()), &cp, 16);
    assert!(store.restored().wiped);
    assert_eq!(recorder.starts, vec![(TOPIC.to_string(), 0, 0, 40)]);
    assert_eq!(scan(&store), replay(&log));
    assert_eq!(cp.get(TOPIC, 0), Some(39));
}

/// Issue 8: a writer that dies halfway through a commit leaves framed records without their
/// marker. On every backend, the store reopened from its checkpoint holds the state after the
/// commit before, the next commit lands on top of it, and a store restored from scratch, or
/// reopened again, agrees: the abandoned records are never applied.
#[test]
fn a_commit_abandoned_halfway_is_never_applied_on_any_backend() {
    for backend in ["memory", "rocksdb", "sled", "redb"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = file_log(&dir.path().join("log"));
        let cp = checkpoint(dir.path());
        let store_dir = dir.path().join(backend);
        let open_backend = || -> Arc<dyn KeyValueStore> {
            match backend {
                "memory" => memory_store(),
                name => Arc::from(
                    statestore::open(name, &store_dir, &serde_json::Value::Null).expect("open"),
                ),
            }
        };
        let inner = open_backend();
        let (store, _) = open(&inner, log.clone(), &cp, 3);
        for i in 0..10 {
            store.put(put_op(i, 1).key(), b"first").expect("put");
        }
        store.commit().expect("commit");
        let after_first = scan(&store);
        drop(store); // closes the backend store too
        drop(inner);
        // The next writer appends part of a commit that overwrites and deletes, then dies.
        let abandoned: Vec<BatchOp> = (0..6)
            .map(|i| match i % 3 {
                0 => BatchOp::Delete {
                    key: put_op(i, 2).key().to_vec(),
                },
                _ => put_op(i, 2),
            })
            .collect();
        log.append_framed(&abandoned, Framing::Open)
            .expect("append");
        log.sync().expect("sync");
        assert_eq!(
            replay(log.as_ref()),
            after_first,
            "{backend}: replay skips the tail"
        );

        let (store, _) = open(&open_backend(), log.clone(), &cp, 3);
        assert_eq!(
            scan(&store),
            after_first,
            "{backend}: reopened from the checkpoint"
        );
        store.put(b"key00003", b"second").expect("put");
        store.delete(b"key00004").expect("delete");
        store.commit().expect("commit on top");
        let after_second = scan(&store);
        drop(store);
        assert_eq!(
            replay(log.as_ref()),
            after_second,
            "{backend}: replay from scratch"
        );
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let (fresh, _) = open(
            &memory_store(),
            log.clone(),
            &checkpoint(elsewhere.path()),
            2,
        );
        assert_eq!(scan(&fresh), after_second, "{backend}: a fresh store");
        drop(fresh);
        let (again, _) = open(&open_backend(), log, &cp, 3);
        assert_eq!(scan(&again), after_second, "{backend}: reopened again");
    }
}

/// A store its backend finds damaged: `open_store` reports it, and `open_logged_store` wipes it,
/// so the restore rebuilds it whole from its changelog.
#[test]
fn a_damaged_store_is_wiped_and_rebuilt_whole_from_its_changelog() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = statestore_changelog::StateDirectory::open(&dir.path().join("state"), "app")
        .expect("state dir");
    let task = state
        .task(statestore_changelog::TaskId::new(0, 0))
        .expect("task dir");
    let factory = statestore::factory("redb").expect("redb is compiled in");
    let options = serde_json::Value::Null;
    let log: Arc<dyn Changelog> = Arc::new(
        FileLog::open(&dir.path().join("log"), TOPIC, 0, FileLogConfig::default()).expect("log"),
    );
    {
        let (inner, wiped) = task
            .open_logged_store(factory, "s", &options)
            .expect("open");
        assert!(!wiped);
        let (store, _) = open(&inner, Arc::clone(&log), task.checkpoint(), 100);
        for i in 0..300 {
            let BatchOp::Put { key, value } = put_op(i, 1) else {
                unreachable!()
            };
            store.put(&key, &value).expect("put");
        }
        store.commit().expect("commit");
        store.close().expect("close");
    }
    let store_dir = task.store_dir("redb", "s").expect("store dir");
    for entry in std::fs::read_dir(&store_dir).expect("list") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            std::fs::write(&path, b"not a database at all").expect("damage");
        }
    }
    let Err(err) = task.open_store(factory, "s", &options) else {
        panic!("a damaged store opened");
    };
    assert_eq!(err.kind(), store_api::ErrorKind::Corruption, "{err}");
    let (inner, wiped) = task
        .open_logged_store(factory, "s", &options)
        .expect("wiped and opened");
    assert!(wiped);
    let (store, recorder) = open(&inner, log, task.checkpoint(), 100);
    assert_eq!(recorder.records(), 300);
    for i in 0..300 {
        let BatchOp::Put { key, value } = put_op(i, 1) else {
            unreachable!()
        };
        assert_eq!(store.get(&key).expect("get"), Some(value), "key {i}");
    }
}
