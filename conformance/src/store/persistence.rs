//! What survives closing and reopening a directory, and who may hold it open. Every case here
//! needs the `persistent` capability and says so in the output when the store lacks it.

use std::io::Write;
use std::ops::Bound::{Excluded, Included};

use store_api::{ErrorKind, KvPair, WriteBatch};

use super::support::{
    all, assert_bytes_eq, assert_kind, get, keys, owned, pattern, persistent_or_skip, put_keys,
    reverse_scan,
};
use crate::crash::kills::{Corruption, kill_at_random_with, kills_from_env, seed_from_env};
use crate::crash::{CHILD_TEST, Survivors, run_child};
use crate::{StoreFactory, StoreFixture};

/// Writes made and flushed before a reopen are all there after it, binary keys included.
pub fn reopen_keeps_flushed_writes(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "reopen_keeps_flushed_writes") {
        return;
    }
    put_keys(fx.store(), &[b"a", b"b", b"\x00", b"\xff\xff", b"k\x00v"]);
    fx.store().put(b"a", b"overwritten").expect("put");
    fx.store().flush().expect("flush");
    let before = all(fx.store());
    fx.reopen();
    assert_eq!(all(fx.store()), before);
    assert_eq!(get(fx.store(), b"a"), Some(b"overwritten".to_vec()));
}

/// A flushed delete stays deleted after a reopen.
pub fn reopen_keeps_deletes(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "reopen_keeps_deletes") {
        return;
    }
    put_keys(fx.store(), &[b"gone", b"kept"]);
    fx.store().flush().expect("flush");
    fx.store().delete(b"gone").expect("delete");
    fx.store().flush().expect("flush");
    fx.reopen();
    assert_eq!(get(fx.store(), b"gone"), None);
    assert_eq!(all(fx.store()), vec![(b"kept".to_vec(), b"kept".to_vec())]);
}

/// Every operation of a flushed batch survives a reopen, with the later operation on a key
/// winning.
pub fn reopen_keeps_batches(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "reopen_keeps_batches") {
        return;
    }
    fx.store().put(b"old", b"1").expect("put");
    let mut batch = WriteBatch::new();
    batch
        .put(b"x".to_vec(), b"first".to_vec())
        .put(b"x".to_vec(), b"second".to_vec())
        .delete(b"old".to_vec())
        .put(b"y".to_vec(), b"".to_vec());
    fx.store().write(batch).expect("write");
    fx.store().flush().expect("flush");
    fx.reopen();
    let expected = vec![
        (b"x".to_vec(), b"second".to_vec()),
        (b"y".to_vec(), Vec::new()),
    ];
    assert_eq!(all(fx.store()), expected);
}

/// The empty key and an empty value are persisted as themselves, not dropped or confused.
pub fn reopen_keeps_empty_key_and_value(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "reopen_keeps_empty_key_and_value") {
        return;
    }
    fx.store().put(b"", b"empty key").expect("put");
    fx.store().put(b"empty value", b"").expect("put");
    fx.store().flush().expect("flush");
    fx.reopen();
    assert_eq!(get(fx.store(), b""), Some(b"empty key".to_vec()));
    assert_eq!(get(fx.store(), b"empty value"), Some(Vec::new()));
    assert_eq!(get(fx.store(), b"never"), None);
}

/// `close` flushes: writes made without an explicit `flush` survive a close and reopen.
pub fn close_flushes(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "close_flushes") {
        return;
    }
    put_keys(fx.store(), &[b"unflushed/1", b"unflushed/2"]);
    fx.store().delete(b"unflushed/1").expect("delete");
    fx.reopen();
    let expected = vec![(b"unflushed/2".to_vec(), b"unflushed/2".to_vec())];
    assert_eq!(all(fx.store()), expected);
}

/// Several close-and-reopen cycles, each changing the data, end with exactly the data
/// expected; a reopened store accepts writes and scans like a new one.
pub fn reopen_many_times(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "reopen_many_times") {
        return;
    }
    let mut expected: Vec<KvPair> = Vec::new();
    for round in 0..5_u8 {
        let key = vec![b'r', round];
        fx.store().put(&key, &[round; 3]).expect("put");
        expected.push((key, vec![round; 3]));
        if round % 2 == 1 {
            fx.store().delete(&[b'r', round - 1]).expect("delete");
            expected.retain(|(k, _)| k != &[b'r', round - 1]);
        }
        fx.reopen();
        assert_eq!(all(fx.store()), expected, "after reopen {round}");
    }
    let mut descending = expected.clone();
    descending.reverse();
    let (from, to): (&[u8], &[u8]) = (b"r", b"s");
    assert_eq!(
        reverse_scan(fx.store(), Included(from), Excluded(to)),
        descending
    );
    let existing = fx
        .store()
        .put_if_absent(b"r\x04", b"x")
        .expect("put_if_absent");
    assert_eq!(existing, Some(vec![4; 3]));
}

/// Large values survive a flush and reopen byte for byte, whether written by `put` (8 MiB) or
/// by a batch (8 MiB and 7 bytes, not a multiple of any page size), and scans list them with
/// the small key written after them.
pub fn reopen_keeps_large_value(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "reopen_keeps_large_value") {
        return;
    }
    let (value, batched) = (pattern(8 << 20, 11), pattern((8 << 20) + 7, 12));
    fx.store().put(b"large", &value).expect("put");
    let mut batch = WriteBatch::new();
    batch.put(b"large/batched".to_vec(), batched.clone());
    fx.store().write(batch).expect("write");
    fx.store().put(b"small", b"after").expect("put");
    fx.store().flush().expect("flush");
    fx.reopen();
    assert_bytes_eq(
        &get(fx.store(), b"large").expect("present"),
        &value,
        "after reopen",
    );
    let scanned = all(fx.store());
    assert_eq!(
        keys(&scanned),
        owned(&[b"large", b"large/batched", b"small"])
    );
    assert_bytes_eq(&scanned[0].1, &value, "scan after reopen");
    assert_bytes_eq(&scanned[1].1, &batched, "batched value after reopen");
    assert_eq!(scanned[2].1, b"after");
}

/// A second `open` of a directory that is open fails with `Locked`, and the first store
/// keeps working with its data intact.
pub fn double_open_is_locked(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "double_open_is_locked") {
        return;
    }
    put_keys(fx.store(), &[b"mine"]);
    fx.store().flush().expect("flush");
    assert_kind(
        fx.open_again(),
        ErrorKind::Locked,
        "second open of an open directory",
    );
    assert_kind(
        fx.open_again(),
        ErrorKind::Locked,
        "third open of an open directory",
    );
    assert_eq!(get(fx.store(), b"mine"), Some(b"mine".to_vec()));
    fx.store()
        .put(b"after", b"1")
        .expect("put after the refused open");
    assert_eq!(get(fx.store(), b"after"), Some(b"1".to_vec()));
    assert_eq!(all(fx.store()).len(), 2);
}

/// `close` releases the directory's lock even while the closed handle is still alive: the
/// directory opens again at once with the data, and the old handle stays closed.
pub fn close_releases_the_directory(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "close_releases_the_directory") {
        return;
    }
    put_keys(fx.store(), &[b"k"]);
    fx.store().close().expect("close");
    let second = fx
        .open_again()
        .unwrap_or_else(|err| panic!("open after close, with the old handle alive: {err}"));
    assert_eq!(get(second.as_ref(), b"k"), Some(b"k".to_vec()));
    assert_kind(fx.store().get(b"k"), ErrorKind::Closed, "the old handle");
    second.close().expect("close of the second handle");
}

/// A crash keeps every flushed write and loses unflushed batches whole or not at all. A child
/// process (the ignored test [`CHILD_TEST`] that [`store_suite!`](crate::store_suite)
/// generates, opening the store with the same factory) writes a batch, flushes, writes a
/// second batch and a put, and aborts without closing; the directory then reopens with the
/// whole first batch and all or none of the second. It runs only under `store_suite!`: run by
/// hand, the child test is missing and the case fails. See [`crate::crash`].
pub fn crash_keeps_flushed_writes_and_whole_batches(factory: &dyn StoreFactory) {
    let mut fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "crash_keeps_flushed_writes_and_whole_batches") {
        return;
    }
    // The child opens the directory itself, so this process lets go of it first.
    fx.store().close().expect("close before the crash child");
    run_child(CHILD_TEST, fx.dir(), "conformance");
    fx.reopen();
    Survivors::count(fx.store()).assert_flushed_kept_and_batches_whole("crash of the child");
}

/// Kills at random moments keep every flushed batch and leave every other batch whole or
/// absent. A child process (the same [`CHILD_TEST`]) writes batches and flushes in a loop; the
/// parent SIGKILLs it at a random moment, reopens the directory and checks it, then starts the
/// next child on the same directory: `STATESTORE_CONFORMANCE_KILLS` times (default 20), at
/// moments drawn from `STATESTORE_CONFORMANCE_KILL_SEED` (default from the clock; a failure
/// names it). A store that rewrites its files in place during `flush` fails this. See
/// [`crate::crash::kills`]. A store that declares
/// [`crash_may_corrupt`](store_api::Capabilities::crash_may_corrupt) may instead fail a reopen
/// with `Corruption` (the run counts it and goes on in an emptied directory), but not every
/// one of them.
pub fn random_kills_keep_flushed_batches_whole(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "random_kills_keep_flushed_batches_whole") {
        return;
    }
    let corruption = if fx.store().capabilities().crash_may_corrupt {
        Corruption::Tolerated
    } else {
        Corruption::Violation
    };
    fx.store().close().expect("close before the crash children");
    let (kills, seed) = (kills_from_env(), seed_from_env());
    let report = kill_at_random_with(
        CHILD_TEST,
        fx.dir(),
        "conformance",
        factory,
        kills,
        seed,
        corruption,
    )
    .unwrap_or_else(|why| panic!("random kills: {why}"));
    // Past the harness's capture, so a plain `cargo test` shows what was tried.
    let _ = writeln!(
        std::io::stderr(),
        "statestore-conformance: random kills on {:?}: {report:?}",
        fx.store().name()
    );
    assert_eq!(report.kills, kills);
    assert!(
        report.corrupted < kills,
        "every reopen after {kills} kills found corruption: {report:?}"
    );
    assert!(
        report.flushed_batches > 0,
        "no batch was flushed before any of {kills} kills: {report:?}"
    );
}

/// A flush that cannot be durable fails. With the store's directory removed under the open
/// store (its files unlinked, the engine's descriptors still valid), a `put` and then a `flush`
/// must not both return `Ok`: nothing of that write, or of anything before it, can survive a
/// restart. Kafka Streams' RocksDB store throws on that flush too.
pub fn flush_fails_when_the_directory_is_gone(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    if !persistent_or_skip(&fx, "flush_fails_when_the_directory_is_gone") {
        return;
    }
    put_keys(fx.store(), &[b"before"]);
    fx.store()
        .flush()
        .expect("flush with the directory in place");
    std::fs::remove_dir_all(fx.dir()).expect("removing the store's directory");
    let flushed = fx
        .store()
        .put(b"after", b"cannot survive")
        .and_then(|()| fx.store().flush());
    assert!(
        flushed.is_err(),
        "put and flush both returned Ok with the store's directory removed"
    );
    // `close` flushes, so it may fail too; either way the handle must let go.
    let _ = fx.store().close();
}
