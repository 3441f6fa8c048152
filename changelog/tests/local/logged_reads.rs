//! Read-your-writes through a `LoggedStore`: reads merge the uncommitted buffer over the store.

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use crate::logged_common::{self, collect, kv, logged_in_memory, scan};
use statestore_changelog::{Changelog, LoggedStoreConfig, RecordKind};
use store_api::{ErrorKind, KeyValueStore, WriteBatch};

/// A store holding a, b, c, d committed, then uncommitted: b deleted, c replaced, bb and e added.
fn mixed_store(dir: &std::path::Path) -> statestore_changelog::LoggedStore {
    let (store, _log) = logged_in_memory(dir, LoggedStoreConfig::default());
    for key in ["a", "b", "c", "d"] {
        store.put(key.as_bytes(), b"stored").expect("put");
    }
    store.commit().expect("commit");
    store.delete(b"b").expect("delete");
    store.put(b"c", b"buffered").expect("put");
    store.put(b"bb", b"buffered").expect("put");
    store.put(b"e", b"buffered").expect("put");
    store
}

#[test]
fn get_sees_buffered_puts_and_deletes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    assert_eq!(store.get(b"a").expect("get"), Some(b"stored".to_vec()));
    assert_eq!(store.get(b"b").expect("get"), None);
    assert_eq!(store.get(b"c").expect("get"), Some(b"buffered".to_vec()));
    assert_eq!(store.get(b"e").expect("get"), Some(b"buffered".to_vec()));
    // The inner store has not seen the uncommitted writes.
    assert_eq!(
        store.inner().get(b"b").expect("get"),
        Some(b"stored".to_vec())
    );
    assert_eq!(store.inner().get(b"e").expect("get"), None);
}

#[test]
fn ranges_merge_buffer_over_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    let forward = collect(store.range(Unbounded, Unbounded).expect("range"));
    let expected = vec![
        kv("a", "stored"),
        kv("bb", "buffered"),
        kv("c", "buffered"),
        kv("d", "stored"),
        kv("e", "buffered"),
    ];
    assert_eq!(forward, expected);
    let reverse = collect(store.reverse_range(Unbounded, Unbounded).expect("range"));
    assert_eq!(reverse, expected.iter().rev().cloned().collect::<Vec<_>>());
    let bounded = collect(store.range(Excluded(b"a"), Included(b"d")).expect("range"));
    assert_eq!(bounded, expected[1..4].to_vec());
    let bounded = collect(
        store
            .reverse_range(Included(b"b"), Excluded(b"e"))
            .expect("range"),
    );
    assert_eq!(
        bounded,
        vec![kv("d", "stored"), kv("c", "buffered"), kv("bb", "buffered")]
    );
}

#[test]
fn prefix_scans_merge_and_hide_tombstones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    assert_eq!(
        collect(store.prefix_scan(b"b").expect("scan")),
        vec![kv("bb", "buffered")]
    );
    let reverse = collect(store.reverse_prefix_scan(b"").expect("scan"));
    assert_eq!(reverse.first(), Some(&kv("e", "buffered")));
    assert_eq!(reverse.len(), 5);
    store.delete(b"bb").expect("delete");
    assert!(collect(store.prefix_scan(b"b").expect("scan")).is_empty());
}

#[test]
fn empty_and_inverted_ranges_yield_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    type Range<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);
    let cases: [Range; 3] = [
        (Included(b"d"), Included(b"a")),
        (Included(b"c"), Excluded(b"c")),
        (Excluded(b"c"), Excluded(b"c")),
    ];
    for (from, to) in cases {
        assert!(collect(store.range(from, to).expect("range")).is_empty());
        assert!(collect(store.reverse_range(from, to).expect("range")).is_empty());
    }
}

#[test]
fn iterators_are_owned_snapshots_of_the_buffer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    let iter = store.range(Unbounded, Unbounded).expect("range");
    store.put(b"a", b"later").expect("put");
    store.delete(b"e").expect("delete");
    let seen = collect(iter);
    assert_eq!(seen.first(), Some(&kv("a", "stored")));
    assert_eq!(seen.last(), Some(&kv("e", "buffered")));
}

#[test]
fn put_if_absent_consults_buffer_then_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    assert_eq!(
        store.put_if_absent(b"a", b"x").expect("pia"),
        Some(b"stored".to_vec())
    );
    assert_eq!(
        store.put_if_absent(b"e", b"x").expect("pia"),
        Some(b"buffered".to_vec())
    );
    // b is stored but deleted in the buffer: absent.
    assert_eq!(store.put_if_absent(b"b", b"x").expect("pia"), None);
    assert_eq!(store.get(b"b").expect("get"), Some(b"x".to_vec()));
    assert_eq!(store.put_if_absent(b"z", b"y").expect("pia"), None);
    assert_eq!(
        store.put_if_absent(b"z", b"w").expect("pia"),
        Some(b"y".to_vec())
    );
}

#[test]
fn batches_are_buffered_with_later_ops_winning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, log) = logged_in_memory(dir.path(), LoggedStoreConfig::default());
    let mut batch = WriteBatch::new();
    batch
        .put(b"k".to_vec(), b"1".to_vec())
        .delete(b"k".to_vec())
        .put(b"j".to_vec(), b"2".to_vec());
    batch.put(b"k".to_vec(), b"3".to_vec());
    store.write(batch).expect("write");
    assert_eq!(
        scan(&store),
        [kv("j", "2"), kv("k", "3")].into_iter().collect()
    );
    store.commit().expect("commit");
    // Only the latest write of each key is logged, then the commit marker.
    assert_eq!(log.end_offset().expect("end"), 3);
}

#[test]
fn commit_moves_the_buffer_to_store_log_and_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    assert!(store.buffered_bytes() > 0);
    store.commit().expect("commit");
    assert_eq!(store.buffered_bytes(), 0);
    assert_eq!(scan(store.inner().as_ref()), scan(&store));
    assert_eq!(
        scan(&store),
        logged_common::replay(store.changelog().as_ref())
    );
    // 4 records and a marker in the first commit, 4 and a marker in the second: the
    // checkpoint names the second marker, 9.
    assert_eq!(store.checkpoint().get(logged_common::TOPIC, 0), Some(9));
    store.commit().expect("an empty commit succeeds");
    assert_eq!(store.checkpoint().get(logged_common::TOPIC, 0), Some(9));
}

#[test]
fn auto_commit_when_the_buffer_is_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LoggedStoreConfig {
        commit_bytes: 1000,
        ..LoggedStoreConfig::default()
    };
    let (store, log) = logged_in_memory(dir.path(), config);
    for i in 0..100u32 {
        store.put(&i.to_be_bytes(), &[7; 36]).expect("put");
        assert!(
            store.buffered_bytes() < 1000 + 4 + 36 + 64,
            "buffer grew past the limit"
        );
    }
    let records = log.read(0, usize::MAX).expect("read");
    let logged = records
        .iter()
        .filter(|record| record.kind != RecordKind::CommitMarker)
        .count() as u64;
    assert!(logged >= 90, "only {logged} records were auto-committed");
    assert_eq!(scan(store.inner().as_ref()).len() as u64, logged);
}

#[test]
fn closed_store_refuses_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    store.close().expect("close commits");
    assert_eq!(
        store.get(b"a").expect_err("closed").kind(),
        ErrorKind::Closed
    );
    assert_eq!(
        store.put(b"a", b"b").expect_err("closed").kind(),
        ErrorKind::Closed
    );
    assert_eq!(
        store.commit().expect_err("closed").kind(),
        ErrorKind::Closed
    );
    assert_eq!(
        store.range(Unbounded, Unbounded).err().map(|e| e.kind()),
        Some(ErrorKind::Closed)
    );
    store.close().expect("a second close succeeds");
}

#[test]
fn oversized_keys_are_rejected_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _log) = logged_in_memory(dir.path(), LoggedStoreConfig::default());
    let key = vec![1u8; store_api::limits::MAX_KEY_LEN + 1];
    assert_eq!(
        store.put(&key, b"v").expect_err("too long").kind(),
        ErrorKind::InvalidArgument
    );
    let mut batch = WriteBatch::new();
    batch
        .put(b"ok".to_vec(), b"v".to_vec())
        .put(key, b"v".to_vec());
    assert_eq!(
        store.write(batch).expect_err("too long").kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(store.buffered_bytes(), 0);
}

/// A logged store over a memory store that commits once its buffer holds `commit_bytes`, so
/// the conformance cases read a mix of buffered and stored writes.
fn logged_factory(
    commit_bytes: usize,
) -> impl Fn(&std::path::Path) -> store_api::Result<Box<dyn KeyValueStore>> {
    move |dir| {
        let config = LoggedStoreConfig {
            commit_bytes,
            ..LoggedStoreConfig::default()
        };
        let (store, _log) = logged_in_memory(dir, config);
        Ok(Box::new(store))
    }
}

/// The conformance suite's borrowed-read cases (`get_with`, `scan`) hold the merged reads to
/// the owned ones' contract: all writes buffered, a commit before every write, and a mix.
#[test]
fn borrowed_reads_meet_the_store_contract() {
    let cases = statestore_conformance::STORE_CASES
        .iter()
        .filter(|case| case.concern == "borrowed");
    let mut ran = 0;
    for case in cases {
        for commit_bytes in [usize::MAX, 0, 400] {
            (case.run)(&logged_factory(commit_bytes));
        }
        ran += 1;
    }
    assert!(ran >= 8, "only {ran} borrowed-read cases");
}

/// `get_with` and `scan` see the buffer over the store exactly as `get` and `range` do.
#[test]
fn borrowed_reads_merge_buffer_over_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mixed_store(dir.path());
    for key in [&b"a"[..], b"b", b"bb", b"c", b"d", b"e", b"f"] {
        let mut lent = None;
        store
            .get_with(key, &mut |value| lent = Some(value.map(<[u8]>::to_vec)))
            .expect("get_with");
        assert_eq!(lent, Some(store.get(key).expect("get")), "{key:?}");
    }
    let [a, b, c, d, e] = [b"a", b"b", b"c", b"d", b"e"].map(|key| &key[..]);
    let bounds = [
        (Unbounded, Unbounded),
        (Excluded(a), Included(d)),
        (Included(b), Excluded(e)),
        (Included(c), Unbounded),
    ];
    for (from, to) in bounds {
        for reverse in [false, true] {
            let mut lent = Vec::new();
            store
                .scan(from, to, reverse, &mut |key, value| {
                    lent.push((key.to_vec(), value.to_vec()));
                    std::ops::ControlFlow::Continue(())
                })
                .expect("scan");
            let owned = if reverse {
                store.reverse_range(from, to)
            } else {
                store.range(from, to)
            };
            assert_eq!(
                lent,
                collect(owned.expect("range")),
                "{from:?} {to:?} {reverse}"
            );
        }
    }
}
