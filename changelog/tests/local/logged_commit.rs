//! Commit ordering and failures: log, then store, then checkpoint, and a failed step leaves
//! the store and the buffer consistent.
//!
//! The failures are real ones, not mocks: a `FileLog` that was closed refuses appends, a
//! memory store that was closed refuses writes, and a task directory that was removed makes
//! the checkpoint rewrite fail. `ReopenableLog` delegates every call to a real `FileLog` and
//! only lets the test reopen that log on its directory, as a restarted process would.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;

use crate::logged_common::{
    self, TOPIC, checkpoint, file_log, memory_store, persistent_store, replay, scan,
};
use parking_lot::RwLock;
use statestore_changelog::{
    Changelog, ChangelogRecord, CheckpointPolicy, CommitPolicy, FileLog, Framing, LoggedStore,
    LoggedStoreConfig, read_checkpoint,
};
use store_api::{BatchOp, ErrorKind, KeyValueStore, Result, WriteBatch};

/// A real `FileLog` the test can close and reopen under a running `LoggedStore`.
#[derive(Debug)]
struct ReopenableLog {
    dir: PathBuf,
    current: RwLock<Arc<FileLog>>,
}

impl ReopenableLog {
    fn open(dir: &Path) -> Arc<ReopenableLog> {
        let current = RwLock::new(file_log(dir));
        Arc::new(ReopenableLog {
            dir: dir.to_path_buf(),
            current,
        })
    }

    fn log(&self) -> Arc<FileLog> {
        Arc::clone(&self.current.read())
    }

    fn reopen(&self) {
        let mut current = self.current.write();
        current.close().expect("close");
        *current = file_log(&self.dir);
    }
}

impl Changelog for ReopenableLog {
    fn topic(&self) -> &str {
        TOPIC
    }
    fn partition(&self) -> u32 {
        0
    }
    fn max_record_len(&self) -> usize {
        self.log().max_record_len()
    }
    fn append_framed(&self, ops: &[BatchOp], framing: Framing) -> Result<std::ops::Range<u64>> {
        self.log().append_framed(ops, framing)
    }
    fn sync(&self) -> Result<()> {
        self.log().sync()
    }
    fn read(&self, from: u64, max_records: usize) -> Result<Vec<ChangelogRecord>> {
        self.log().read(from, max_records)
    }
    fn start_offset(&self) -> Result<u64> {
        self.log().start_offset()
    }
    fn end_offset(&self) -> Result<u64> {
        self.log().end_offset()
    }
}

/// Every commit flushes the store and rewrites the checkpoint file.
fn every_commit() -> LoggedStoreConfig {
    LoggedStoreConfig {
        checkpoint_policy: CheckpointPolicy::EveryCommit,
        ..LoggedStoreConfig::default()
    }
}

fn put_all(store: &LoggedStore, keys: &[&str], value: &str) {
    for key in keys {
        store.put(key.as_bytes(), value.as_bytes()).expect("put");
    }
}

#[test]
fn a_failed_log_append_leaves_the_store_untouched_and_keeps_the_buffer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ReopenableLog::open(&dir.path().join("log"));
    let inner = persistent_store(&dir.path().join("store"));
    let cp = checkpoint(dir.path());
    let store =
        LoggedStore::open(Arc::clone(&inner), log.clone(), cp, every_commit()).expect("open");
    put_all(&store, &["a", "b"], "1");
    store.commit().expect("commit");

    put_all(&store, &["b", "c"], "2");
    store.delete(b"a").expect("delete");
    log.log().close().expect("close the log under the store");
    let err = store.commit().expect_err("the log is closed");
    assert_eq!(err.kind(), ErrorKind::Closed);

    let before: Vec<_> = [("a", "1"), ("b", "1")]
        .iter()
        .map(|(k, v)| logged_common::kv(k, v))
        .collect();
    assert_eq!(
        scan(inner.as_ref()),
        before.into_iter().collect(),
        "the store changed"
    );
    assert_eq!(
        read_checkpoint(&dir.path().join(".checkpoint"))
            .expect("read")
            .map(|e| e.len()),
        Some(1)
    );
    assert_eq!(store.checkpoint().get(TOPIC, 0), Some(2));
    assert!(store.buffered_bytes() > 0, "the buffer was dropped");
    assert_eq!(store.get(b"a").expect("get"), None);
    assert_eq!(store.get(b"c").expect("get"), Some(b"2".to_vec()));

    // Once the log is back, the same buffered writes commit.
    log.reopen();
    store.commit().expect("retry");
    assert_eq!(store.buffered_bytes(), 0);
    let expected = scan(&store);
    assert_eq!(scan(inner.as_ref()), expected);
    assert_eq!(replay(log.as_ref()), expected);
    assert_eq!(store.checkpoint().get(TOPIC, 0), Some(6));
}

#[test]
fn a_failed_store_write_keeps_the_buffer_and_the_log_stays_the_truth() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let inner = memory_store();
    let store = LoggedStore::open(
        Arc::clone(&inner),
        log.clone(),
        checkpoint(dir.path()),
        LoggedStoreConfig::default(),
    )
    .expect("open");
    put_all(&store, &["a", "b"], "1");
    inner
        .close()
        .expect("close the store under the logged store");
    let err = store.commit().expect_err("the store is closed");
    assert_eq!(err.kind(), ErrorKind::Closed);
    // The log acknowledged the writes; the checkpoint does not claim them.
    assert_eq!(log.end_offset().expect("end"), 3);
    assert_eq!(store.checkpoint().get(TOPIC, 0), None);
    assert_eq!(store.get(b"a").expect("buffered"), Some(b"1".to_vec()));
    std::mem::forget(store);

    // A store rebuilt from the log holds them.
    let rebuilt = LoggedStore::open(
        memory_store(),
        log,
        checkpoint(dir.path()),
        LoggedStoreConfig::default(),
    )
    .expect("reopen");
    assert!(rebuilt.restored().wiped);
    assert_eq!(rebuilt.get(b"b").expect("get"), Some(b"1".to_vec()));
    assert_eq!(rebuilt.checkpoint().get(TOPIC, 0), Some(2));
}

#[test]
fn a_failed_checkpoint_write_keeps_the_commit_and_a_retry_writes_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let task = dir.path().join("0_0");
    std::fs::create_dir(&task).expect("mkdir");
    let log = file_log(&dir.path().join("log"));
    let inner = persistent_store(&dir.path().join("store"));
    let store = LoggedStore::open(
        Arc::clone(&inner),
        log.clone(),
        checkpoint(&task),
        every_commit(),
    )
    .expect("open");
    put_all(&store, &["a"], "1");
    store.commit().expect("commit");

    put_all(&store, &["a", "b"], "2");
    std::fs::remove_dir_all(&task).expect("remove the task directory");
    let err = store.commit().expect_err("no directory for the checkpoint");
    assert_eq!(err.kind(), ErrorKind::Io);
    // The commit holds: log and store have its writes, the live entry names it, and only
    // the file still names the commit before it. The entry stays staged for the next write.
    assert_eq!(store.checkpoint().get(TOPIC, 0), Some(4));
    assert_eq!(
        store.checkpoint().file_entries().values().next(),
        Some(&1),
        "the checkpoint file moved"
    );
    assert_eq!(store.buffered_bytes(), 0);
    assert_eq!(inner.get(b"b").expect("get"), Some(b"2".to_vec()));

    std::fs::create_dir(&task).expect("mkdir");
    store.commit().expect("retry");
    // Nothing was appended again: the retry only wrote the staged entry.
    assert_eq!(log.end_offset().expect("end"), 5);
    assert_eq!(
        read_checkpoint(&task.join(".checkpoint"))
            .expect("read")
            .and_then(|e| e.values().next().copied()),
        Some(4)
    );
    assert_eq!(replay(log.as_ref()), scan(&store));
}

#[test]
fn writers_see_their_writes_while_another_thread_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let config = LoggedStoreConfig {
        commit_bytes: 4096,
        ..LoggedStoreConfig::default()
    };
    let store = Arc::new(
        LoggedStore::open(memory_store(), log.clone(), checkpoint(dir.path()), config)
            .expect("open"),
    );
    let writers: Vec<_> = (0..3u8)
        .map(|writer| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                for i in 0..2000u32 {
                    let key = [writer, (i % 50) as u8];
                    store.put(&key, &i.to_be_bytes()).expect("put");
                    assert_eq!(
                        store.get(&key).expect("get"),
                        Some(i.to_be_bytes().to_vec())
                    );
                    let own = store.prefix_scan(&[writer]).expect("scan").count();
                    assert_eq!(own, 50.min(i as usize + 1), "a scan lost keys");
                }
            })
        })
        .collect();
    let committer = {
        let store = Arc::clone(&store);
        thread::spawn(move || {
            for _ in 0..50 {
                store.commit().expect("commit");
                thread::yield_now();
            }
        })
    };
    for handle in writers.into_iter().chain([committer]) {
        handle.join().expect("thread");
    }
    store.commit().expect("commit");
    assert_eq!(scan(store.inner().as_ref()).len(), 150);
    assert_eq!(replay(log.as_ref()), scan(store.as_ref()));
}

/// A commit that the store applies one write at a time (sled) hides nothing that was written:
/// a scan sees every write that returned before it was made, even while a commit is halfway
/// into the store. Each round sets every key to the round's number in one batch, publishes the
/// round once the write returned, and commits; readers on other threads scan and find no key
/// older than the round published before the scan began.
#[test]
fn scans_see_every_returned_write_while_the_store_takes_a_commit_one_write_at_a_time() {
    const KEYS: u32 = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    let sled: Arc<dyn KeyValueStore> = Arc::from(
        statestore::open("sled", &dir.path().join("store"), &serde_json::Value::Null)
            .expect("sled"),
    );
    let log = file_log(&dir.path().join("log"));
    let store = Arc::new(
        LoggedStore::open(sled, log, checkpoint(dir.path()), every_commit()).expect("open"),
    );
    let written = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, written, stop) =
                (Arc::clone(&store), Arc::clone(&written), Arc::clone(&stop));
            thread::spawn(move || {
                let mut scans = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let returned = written.load(Ordering::Acquire);
                    for pair in store
                        .range(Bound::Unbounded, Bound::Unbounded)
                        .expect("range")
                    {
                        let (key, value) = pair.expect("pair");
                        let round = u32::from_be_bytes(value.try_into().expect("a round"));
                        assert!(
                            round >= returned,
                            "{} holds round {round} after round {returned}'s write returned",
                            String::from_utf8_lossy(&key)
                        );
                    }
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    for round in 1..=200u32 {
        let mut batch = WriteBatch::new();
        for key in 0..KEYS {
            batch.put(format!("k{key:04}"), round.to_be_bytes());
        }
        store.write(batch).expect("write");
        written.store(round, Ordering::Release);
        store.commit().expect("commit");
    }
    stop.store(true, Ordering::Release);
    for reader in readers {
        assert!(reader.join().expect("reader") > 0, "a reader never scanned");
    }
    assert_eq!(scan(store.inner().as_ref()).len(), KEYS as usize);
}

/// Below its `AfterBytes`, a commit leaves the checkpoint file alone: the live entry names
/// the commit, the file the last flushed one. Crossing it, and closing, rewrite the file.
#[test]
fn a_commit_checkpoints_the_file_only_past_its_bytes_and_at_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let cp = checkpoint(dir.path());
    let config = LoggedStoreConfig {
        checkpoint_policy: CheckpointPolicy::AfterBytes(100),
        ..LoggedStoreConfig::default()
    };
    let store = LoggedStore::open(
        persistent_store(&dir.path().join("store")),
        log.clone(),
        Arc::clone(&cp),
        config,
    )
    .expect("open");
    let file = || read_checkpoint(&dir.path().join(".checkpoint")).expect("read");

    store.put(b"a", &[1; 40]).expect("put");
    store.commit().expect("commit");
    assert_eq!(cp.get(TOPIC, 0), Some(1));
    assert_eq!(file(), None, "41 of 100 bytes wrote the file");
    store.put(b"b", &[2; 40]).expect("put");
    store.commit().expect("commit");
    assert_eq!(cp.get(TOPIC, 0), Some(3));
    assert_eq!(file(), None, "82 of 100 bytes wrote the file");
    assert_eq!(cp.file_writes(), 0);

    store.put(b"c", &[3; 40]).expect("put");
    store.commit().expect("commit");
    assert_eq!(file().and_then(|e| e.values().next().copied()), Some(5));
    assert_eq!(cp.file_writes(), 1);

    // The count starts again after a checkpoint; close checkpoints what is left.
    store.put(b"d", b"4").expect("put");
    store.commit().expect("commit");
    assert_eq!(file().and_then(|e| e.values().next().copied()), Some(5));
    store.close().expect("close");
    assert_eq!(file().and_then(|e| e.values().next().copied()), Some(7));
    assert_eq!(cp.file_writes(), 2);
}

/// Several stores of one task commit with `commit_staged` and write their shared checkpoint
/// file once, holding every store's offset; nothing is written before that.
#[test]
fn stores_committed_staged_write_one_checkpoint_for_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cp = checkpoint(dir.path());
    let stores: Vec<LoggedStore> = ["counts", "totals", "names"]
        .iter()
        .map(|name| {
            let log = FileLog::open(
                &dir.path().join("logs"),
                &format!("app-{name}-changelog"),
                0,
                Default::default(),
            )
            .expect("log");
            LoggedStore::open(
                persistent_store(&dir.path().join(name)),
                Arc::new(log),
                Arc::clone(&cp),
                every_commit(),
            )
            .expect("open")
        })
        .collect();
    for round in 0..3u8 {
        let before = cp.file_writes();
        for store in &stores {
            store.put(b"k", &[round]).expect("put");
            store.commit_staged().expect("commit");
        }
        assert_eq!(cp.file_writes(), before, "a staged commit wrote the file");
        cp.write_staged().expect("write");
        assert_eq!(cp.file_writes(), before + 1);
        let file = read_checkpoint(&dir.path().join(".checkpoint"))
            .expect("read")
            .expect("present");
        let offset = u64::from(round) * 2 + 1;
        assert_eq!(file.len(), 3);
        assert!(file.values().all(|&at| at == offset), "{file:?}");
        assert_eq!(file, cp.file_entries());
    }
}

/// A store that is not persistent restores from the log's start after any reopen, so its
/// commits, checkpoints and close never write the checkpoint file (Kafka Streams checkpoints
/// persistent stores only); the live entry still follows its commits.
#[test]
fn a_store_that_does_not_persist_never_writes_the_checkpoint_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let cp = checkpoint(dir.path());
    let store = LoggedStore::open(memory_store(), log.clone(), Arc::clone(&cp), every_commit())
        .expect("open");
    for round in 0..3u8 {
        store.put(b"k", &[round]).expect("put");
        store.commit().expect("commit");
    }
    store.checkpoint_now().expect("checkpoint now");
    assert_eq!(cp.get(TOPIC, 0), Some(5), "the live entry");
    store.close().expect("close");
    drop(store);
    assert_eq!(cp.file_writes(), 0, "the checkpoint file was written");
    assert!(!dir.path().join(".checkpoint").exists());

    // Opened again over an empty store, it restores the whole log, and still writes nothing.
    let cp = checkpoint(dir.path());
    let reopened =
        LoggedStore::open(memory_store(), log, Arc::clone(&cp), every_commit()).expect("reopen");
    assert_eq!(reopened.get(b"k").expect("get"), Some(vec![2]));
    assert_eq!(reopened.restored().from, 0);
    assert_eq!(cp.get(TOPIC, 0), Some(5));
    reopened.close().expect("close");
    assert_eq!(cp.file_writes(), 0, "the checkpoint file was written");
    assert!(!dir.path().join(".checkpoint").exists());
}

/// Under `Explicit`, closing checkpoints what is committed (discarding what is not), so the
/// store opened again replays nothing.
#[test]
fn an_explicit_store_checkpoints_its_commits_at_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = file_log(&dir.path().join("log"));
    let store_dir = dir.path().join("store");
    let config = LoggedStoreConfig {
        commit_policy: CommitPolicy::Explicit,
        ..LoggedStoreConfig::default()
    };
    let open_store = || -> Arc<dyn KeyValueStore> {
        Arc::from(statestore::open("sled", &store_dir, &serde_json::Value::Null).expect("sled"))
    };
    let store = LoggedStore::open(
        open_store(),
        log.clone(),
        checkpoint(dir.path()),
        config.clone(),
    )
    .expect("open");
    store.put(b"kept", b"1").expect("put");
    store.commit().expect("commit");
    store.put(b"dropped", b"2").expect("put");
    assert_eq!(
        read_checkpoint(&dir.path().join(".checkpoint")).expect("read"),
        None
    );
    store.close().expect("close");
    drop(store);
    let file = read_checkpoint(&dir.path().join(".checkpoint")).expect("read");
    assert_eq!(file.and_then(|e| e.values().next().copied()), Some(1));

    let reopened =
        LoggedStore::open(open_store(), log, checkpoint(dir.path()), config).expect("reopen");
    assert_eq!(reopened.restored().records, 0, "{:?}", reopened.restored());
    assert_eq!(reopened.get(b"kept").expect("get"), Some(b"1".to_vec()));
    assert_eq!(reopened.get(b"dropped").expect("get"), None);
}

/// Dropping the writes since the last commit leaves the committed state readable and the log
/// untouched; after a failed commit, whose writes the store may hold in part, it is refused.
#[test]
fn discarding_uncommitted_writes_brings_back_the_last_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ReopenableLog::open(&dir.path().join("log"));
    let inner = persistent_store(&dir.path().join("store"));
    let store = LoggedStore::open(
        Arc::clone(&inner),
        log.clone(),
        checkpoint(dir.path()),
        every_commit(),
    )
    .expect("open");
    put_all(&store, &["a", "b"], "1");
    store.commit().expect("commit");
    let committed = scan(&store);

    put_all(&store, &["b", "c"], "2");
    store.delete(b"a").expect("delete");
    store.discard_uncommitted().expect("discard");
    assert_eq!(scan(&store), committed, "a dropped write is still visible");
    assert_eq!(store.buffered_bytes(), 0);
    assert_eq!(replay(log.as_ref()), committed, "the log changed");

    // The store goes on: new writes commit as usual.
    put_all(&store, &["d"], "3");
    store.commit().expect("commit after the discard");
    assert_eq!(store.get(b"d").expect("get"), Some(b"3".to_vec()));
    assert_eq!(store.get(b"c").expect("get"), None);

    // A commit that failed may have left part of itself in the store: no discard then.
    put_all(&store, &["e"], "4");
    log.log().close().expect("close the log under the store");
    store.commit().expect_err("the log is closed");
    let err = store
        .discard_uncommitted()
        .expect_err("after a failed commit");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert_eq!(store.get(b"e").expect("kept"), Some(b"4".to_vec()));
    log.reopen();
    store.commit().expect("retry");
    store
        .discard_uncommitted()
        .expect("a good commit allows it again");
}
