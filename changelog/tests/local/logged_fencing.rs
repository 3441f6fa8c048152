//! Writer epochs and fencing, and the explicit commit policy: two owners of one changelog
//! partition (memory log handles sharing the records), the old one appending after the new one
//! took over.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::logged_common::{TOPIC, checkpoint, memory_store, replay, scan};
use statestore_changelog::{
    Changelog, CommitPolicy, CommitReader, EPOCH_KEY, Framing, LoggedStore, LoggedStoreConfig,
    MemoryLog, NoopRestoreListener, restore,
};
use store_api::{BatchOp, ErrorKind, KeyValueStore};

fn put(key: &str, value: &str) -> BatchOp {
    BatchOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

fn explicit() -> LoggedStoreConfig {
    LoggedStoreConfig {
        commit_policy: CommitPolicy::Explicit,
        ..LoggedStoreConfig::default()
    }
}

/// An owner: a logged store on its own memory store and checkpoint, over its own handle of
/// the shared log, fenced as a task fences it.
struct Owner {
    store: LoggedStore,
    _dir: tempfile::TempDir,
}

fn owner(log: &MemoryLog) -> Owner {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(dir.path()),
        explicit(),
    )
    .expect("open");
    store.fence().expect("fence");
    Owner { store, _dir: dir }
}

/// The user's keys of a state: the writer epoch left out.
fn user(state: BTreeMap<Vec<u8>, Vec<u8>>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    state
        .into_iter()
        .filter(|(key, _)| key.as_slice() != EPOCH_KEY)
        .collect()
}

fn state(pairs: &[(&str, &str)]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// The state a new owner restores: a fresh store opened over the log.
fn restored(log: &MemoryLog) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(dir.path()),
        explicit(),
    )
    .expect("open");
    user(scan(store.inner().as_ref()))
}

#[test]
fn a_stale_owner_that_commits_after_a_takeover_changes_nothing_anyone_reads() {
    let log = MemoryLog::new(TOPIC, 0);
    let old = owner(&log);
    old.store.put(b"count", b"1").expect("put");
    old.store.commit().expect("commit");

    // The old owner is paused; a new one restores and fences.
    let new = owner(&log);
    assert_eq!(new.store.get(b"count").expect("get"), Some(b"1".to_vec()));
    assert!(new.store.writer_epoch() > old.store.writer_epoch());

    // The old owner wakes up and commits: the log takes its records, but it learns it was
    // fenced and its own store does not apply them.
    old.store.put(b"count", b"stale").expect("put");
    let err = old.store.commit().expect_err("fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(
        old.store.inner().get(b"count").expect("get"),
        Some(b"1".to_vec())
    );
    assert_eq!(
        old.store.get(b"count").expect_err("closed").kind(),
        ErrorKind::Closed
    );

    // No reader applies them: a replay of the whole log, a restore, the new owner's commits.
    assert_eq!(user(replay(&log)), state(&[("count", "1")]));
    assert_eq!(restored(&log), state(&[("count", "1")]));
    new.store.put(b"count", b"2").expect("put");
    new.store.commit().expect("commit after a stale append");
    assert_eq!(user(replay(&log)), state(&[("count", "2")]));
    assert_eq!(restored(&log), state(&[("count", "2")]));
}

#[test]
fn records_of_a_stale_writer_interleaved_in_a_commit_are_ignored() {
    let log = MemoryLog::new(TOPIC, 0);
    let stale = log.clone();
    stale.set_writer_epoch(1).expect("epoch");
    stale
        .append_framed(&[put("a", "1")], Framing::Commit)
        .expect("commit");
    let newer = log.clone();
    newer.set_writer_epoch(2).expect("epoch");
    newer
        .append_framed(&[put("b", "1")], Framing::Open)
        .expect("open");
    // Lands in the middle of the newer writer's commit.
    stale
        .append_framed(&[put("a", "stale"), put("c", "stale")], Framing::Commit)
        .expect("stale commit");
    assert_eq!(
        user(replay(&log)),
        state(&[("a", "1")]),
        "a stale marker must not end the newer writer's open commit"
    );
    newer
        .append_framed(&[put("b", "2")], Framing::Commit)
        .expect("close");
    assert_eq!(user(replay(&log)), state(&[("a", "1"), ("b", "2")]));
    let mut reader = CommitReader::new(&log, 0);
    while reader.read(100).expect("read").last_read.is_some() {}
    assert_eq!(reader.epoch(), 2);
    assert_eq!(
        reader.fenced_keys().iter().cloned().collect::<Vec<_>>(),
        vec![b"a".to_vec(), b"c".to_vec()]
    );
}

/// A restore that trusts the last commit end it finds must not trust a stale writer's: the
/// newer writer's torn commit before it stays unapplied.
#[test]
fn a_stale_marker_after_a_torn_commit_of_a_newer_writer_applies_nothing() {
    let log = MemoryLog::new(TOPIC, 0);
    let stale = log.clone();
    stale.set_writer_epoch(1).expect("epoch");
    stale
        .append_framed(&[put("a", "1")], Framing::Commit)
        .expect("commit");
    let newer = log.clone();
    newer.set_writer_epoch(2).expect("epoch");
    newer
        .append_framed(&[put("b", "torn")], Framing::Open)
        .expect("torn");
    stale
        .append_framed(&[put("a", "stale")], Framing::Commit)
        .expect("stale");
    for batch in [1, 2, 1000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = memory_store();
        let cp = checkpoint(dir.path());
        let outcome =
            restore(store.as_ref(), &log, &cp, batch, &mut NoopRestoreListener).expect("restore");
        assert_eq!(
            user(scan(store.as_ref())),
            state(&[("a", "1")]),
            "batch {batch}"
        );
        assert_eq!(outcome.epoch, 2);
        assert_eq!(outcome.fenced, 1);
    }
}

#[test]
fn a_restore_resumed_after_a_fence_ignores_a_stale_writer_from_the_first_record() {
    let log = MemoryLog::new(TOPIC, 0);
    let dir = tempfile::tempdir().expect("tempdir");
    let cp = checkpoint(dir.path());
    let old = owner(&log);
    old.store.put(b"k", b"1").expect("put");
    old.store.commit().expect("commit");
    let new = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        Arc::clone(&cp),
        explicit(),
    )
    .expect("open");
    new.fence().expect("fence");
    // The stale owner appends after everything the checkpoint covers.
    old.store.put(b"k", b"stale").expect("put");
    assert_eq!(
        old.store.commit().expect_err("fenced").kind(),
        ErrorKind::Fenced
    );
    // Resumed from the checkpoint (as a standby catches up): the first record it reads is
    // the stale one, and only the store knows the fence's epoch.
    let outcome = restore(
        new.inner().as_ref(),
        &log,
        &cp,
        100,
        &mut NoopRestoreListener,
    )
    .expect("restore");
    assert_eq!(outcome.records, 0);
    assert_eq!(new.inner().get(b"k").expect("get"), Some(b"1".to_vec()));
    // The owner's next commit finds the stale record and rewrites its key, so no compaction
    // can keep the stale record as the latest of its key.
    new.put(b"other", b"1").expect("put");
    let before = log.end_offset().expect("end");
    new.commit().expect("commit");
    let latest = log
        .read(before, 10)
        .expect("read")
        .into_iter()
        .rev()
        .find(|record| record.op.key() == b"k")
        .map(|record| (record.op, record.epoch));
    assert_eq!(
        latest,
        Some((put("k", "1"), new.writer_epoch().expect("fenced")))
    );
    // So does a later owner's fence, for the keys its restore ignored.
    let later_dir = tempfile::tempdir().expect("tempdir");
    let later = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(later_dir.path()),
        explicit(),
    )
    .expect("open");
    assert_eq!(later.restored().fenced, 1);
    let before = log.end_offset().expect("end");
    later.fence().expect("fence");
    let rewritten: Vec<BatchOp> = log
        .read(before, 10)
        .expect("read")
        .into_iter()
        .map(|record| record.op)
        .collect();
    assert!(rewritten.contains(&put("k", "1")), "{rewritten:?}");
    assert_eq!(restored(&log), state(&[("k", "1"), ("other", "1")]));
}

/// What a previous owner committed between the new owner's restore and its fence is part of
/// what every reader applies, so the fence replays it into the new owner's store too.
#[test]
fn a_commit_that_lands_between_the_restore_and_the_fence_is_caught_up() {
    let log = MemoryLog::new(TOPIC, 0);
    let old = owner(&log);
    old.store.put(b"k", b"1").expect("put");
    old.store.commit().expect("commit");
    let dir = tempfile::tempdir().expect("tempdir");
    let new = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(dir.path()),
        explicit(),
    )
    .expect("open");
    old.store.put(b"k", b"2").expect("put");
    old.store.commit().expect("not fenced yet");
    new.fence().expect("fence");
    assert_eq!(new.get(b"k").expect("get"), Some(b"2".to_vec()));
    assert_eq!(user(replay(&log)), state(&[("k", "2")]));
    old.store.put(b"k", b"3").expect("put");
    assert_eq!(
        old.store.commit().expect_err("fenced now").kind(),
        ErrorKind::Fenced
    );
    assert_eq!(user(replay(&log)), state(&[("k", "2")]));
}

#[test]
fn the_epoch_key_is_reserved() {
    let log = MemoryLog::new(TOPIC, 0);
    let owner = owner(&log);
    for result in [
        owner.store.put(EPOCH_KEY, b"x"),
        owner.store.delete(EPOCH_KEY),
        owner
            .store
            .write([put("\0statestore.epoch", "x")].into_iter().collect()),
    ] {
        assert_eq!(
            result.expect_err("reserved").kind(),
            ErrorKind::InvalidArgument
        );
    }
}

#[test]
fn an_explicit_store_commits_only_when_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = MemoryLog::new(TOPIC, 0);
    let config = LoggedStoreConfig {
        commit_bytes: 100,
        ..explicit()
    };
    let store = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(dir.path()),
        config,
    )
    .expect("open");
    for i in 0..50 {
        store
            .put(format!("key{i:03}").as_bytes(), b"value")
            .expect("put");
    }
    assert!(store.needs_commit());
    assert!(log.is_empty(), "a full buffer must not commit by itself");
    store.flush().expect("flush");
    assert!(
        log.is_empty(),
        "flush must not commit under the explicit policy"
    );
    store.put(b"last", b"1").expect("put");
    store.commit().expect("commit");
    assert!(!store.needs_commit());
    assert_eq!(replay(&log).len(), 51);
    store.put(b"uncommitted", b"1").expect("put");
    store.close().expect("close");
    drop(store);
    assert!(
        !replay(&log).contains_key(b"uncommitted".as_slice()),
        "close must not commit under the explicit policy"
    );
    let dropped = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(dir.path()),
        explicit(),
    )
    .expect("open");
    dropped.put(b"dropped", b"1").expect("put");
    drop(dropped);
    assert!(!replay(&log).contains_key(b"dropped".as_slice()));
}

#[test]
fn an_auto_store_still_commits_a_full_buffer_and_on_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = MemoryLog::new(TOPIC, 0);
    let config = LoggedStoreConfig {
        commit_bytes: 100,
        ..LoggedStoreConfig::default()
    };
    let store = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(dir.path()),
        config,
    )
    .expect("open");
    for i in 0..50 {
        store
            .put(format!("key{i:03}").as_bytes(), b"value")
            .expect("put");
    }
    assert!(!log.is_empty());
    store.close().expect("close");
    assert_eq!(replay(&log).len(), 50);
}

/// Two owners that restored the same log both fence it (a stale assignment): the one that
/// fences second sees the first one's fence of the same epoch and fences again above it, so
/// the first one is fenced at its next commit and only the second one's commits count.
#[test]
fn two_owners_fencing_one_log_end_with_one_writer() {
    let log = MemoryLog::new(TOPIC, 0);
    let first = owner(&log);
    first.store.put(b"k", b"1").expect("put");
    first.store.commit().expect("commit");
    let open = |dir: &tempfile::TempDir| {
        LoggedStore::open(
            memory_store(),
            Arc::new(log.clone()),
            checkpoint(dir.path()),
            explicit(),
        )
        .expect("open")
    };
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (a, b) = (open(&dir_a), open(&dir_b));
    let epoch_a = a.fence().expect("fence a");
    let epoch_b = b.fence().expect("fence b");
    assert!(epoch_b > epoch_a, "{epoch_b} must be above {epoch_a}");
    a.put(b"k", b"a").expect("put");
    assert_eq!(a.commit().expect_err("fenced").kind(), ErrorKind::Fenced);
    b.put(b"k", b"b").expect("put");
    b.commit().expect("commit");
    assert_eq!(user(replay(&log)), state(&[("k", "b")]));
    assert_eq!(restored(&log), state(&[("k", "b")]));
}
