//! Focused tests of the redb backend: options, locking, damaged files, large and empty
//! entries, persistence, closing, batches and snapshots. The contract as a whole is checked by
//! the conformance suite in `conformance.rs`.

use std::ops::Bound::{Excluded, Included, Unbounded};
use std::path::Path;
use std::sync::{Arc, Barrier};

use serde_json::json;
use statestore_redb::{Config, Durability, FILE_NAME, RedbFactory, RedbStore};
use store_api::{BackendFactory, ErrorKind, KeyValueStore, KvPair, WriteBatch};

fn open(dir: &Path) -> RedbStore {
    RedbStore::open(dir, Config::default()).expect("open")
}

fn collect(iter: store_api::KvIter) -> Vec<KvPair> {
    iter.collect::<Result<_, _>>().expect("iterate")
}

#[test]
fn options_parse_and_unknown_option_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let options =
        json!({"durability": "immediate", "cache_size_bytes": 4_194_304, "quick_repair": true});
    let store = RedbFactory
        .open(dir.path(), &options)
        .expect("valid options");
    store.put(b"k", b"v").unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
    store.close().unwrap();

    for bad in [
        json!({"cache_size": 1}),
        json!({"durability": "sometimes"}),
        json!(7),
    ] {
        let err = RedbFactory.open(dir.path(), &bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad}: {err}");
    }
    assert_eq!(RedbFactory.name(), "redb");
}

#[test]
fn second_open_is_locked_until_close() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path());
    let err = RedbStore::open(dir.path(), Config::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
    assert!(err.to_string().contains(FILE_NAME), "names the file: {err}");
    let err = RedbFactory.open(dir.path(), &json!(null)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked);
    first.close().unwrap();
    open(dir.path()).close().unwrap();
}

#[test]
fn garbage_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.path().join(FILE_NAME), garbage).unwrap();
    let err = RedbStore::open(dir.path(), Config::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
}

#[test]
fn damaged_pages_fail_verification_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut batch = WriteBatch::new();
    for i in 0..2000u32 {
        batch.put(i.to_be_bytes(), vec![0xAB; 200]);
    }
    store.write(batch).unwrap();
    store.close().unwrap();
    // Overwrite a stretch past the header, where the tree's pages live.
    let path = dir.path().join(FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len();
    bytes[len / 2..len / 2 + 8192].fill(0x5A);
    std::fs::write(&path, bytes).unwrap();
    let config = Config {
        verify_on_open: true,
        ..Config::default()
    };
    let err = RedbStore::open(dir.path(), config).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
}

#[test]
fn large_value_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let value: Vec<u8> = (0..9 * 1024 * 1024u32).map(|i| i as u8).collect();
    let store = open(dir.path());
    store.put(b"big", &value).unwrap();
    store.put(b"after", b"small").unwrap();
    store.flush().unwrap();
    store.close().unwrap();
    let store = open(dir.path());
    assert_eq!(
        store.get(b"big").unwrap().as_deref(),
        Some(value.as_slice())
    );
    let all = collect(store.range(Unbounded, Unbounded).unwrap());
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].1.len(), value.len());
}

#[test]
fn empty_key_and_empty_value_are_ordinary() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert_eq!(store.get(b"").unwrap(), None);
    store.put(b"", b"").unwrap();
    store.put(b"a", b"").unwrap();
    assert_eq!(store.get(b"").unwrap(), Some(Vec::new()));
    assert_eq!(store.get(b"a").unwrap(), Some(Vec::new()));
    let all = collect(store.range(Unbounded, Unbounded).unwrap());
    assert_eq!(all, vec![(vec![], vec![]), (b"a".to_vec(), vec![])]);
    assert_eq!(store.put_if_absent(b"", b"x").unwrap(), Some(Vec::new()));
    store.delete(b"").unwrap();
    assert_eq!(store.get(b"").unwrap(), None);
    assert_eq!(store.approximate_len().unwrap(), 1);
}

#[test]
fn flushed_on_flush_writes_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        durability: Durability::OnFlush,
        ..Config::default()
    };
    let store = RedbStore::open(dir.path(), config.clone()).unwrap();
    for i in 0..100u32 {
        store.put(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
    }
    store.flush().unwrap();
    store.close().unwrap();
    let store = RedbStore::open(dir.path(), config).unwrap();
    assert_eq!(store.approximate_len().unwrap(), 100);
    assert_eq!(
        store.get(&7u32.to_be_bytes()).unwrap(),
        Some(7u32.to_le_bytes().to_vec())
    );
}

#[test]
fn closed_store_fails_every_call_with_closed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.put(b"a", b"1").unwrap();
    store.close().unwrap();
    let kinds = [
        store.get(b"a").map(drop),
        store.put(b"a", b"2"),
        store.put_if_absent(b"b", b"2").map(drop),
        store.delete(b"a"),
        store.write(WriteBatch::new()),
        store.range(Unbounded, Unbounded).map(drop),
        store.reverse_prefix_scan(b"").map(drop),
        store.approximate_len().map(drop),
        store.flush(),
    ];
    for result in kinds {
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Closed);
    }
    store.close().expect("second close succeeds");
}

#[test]
fn iterator_outliving_close_ends_without_panic_and_file_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut batch = WriteBatch::new();
    for i in 0..5000u32 {
        batch.put(i.to_be_bytes(), vec![1; 100]);
    }
    store.write(batch).unwrap();
    let iter = store.range(Unbounded, Unbounded).unwrap();
    store.close().unwrap();
    let reopened = open(dir.path());
    let mut seen = 0;
    for item in iter {
        match item {
            Ok(_) => seen += 1,
            Err(err) => assert_eq!(err.kind(), ErrorKind::Closed, "{err}"),
        }
    }
    assert!(seen <= 5000);
    assert_eq!(reopened.approximate_len().unwrap(), 5000);
}

#[test]
fn batch_applies_in_order_and_rejects_oversized_entries_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut batch = WriteBatch::new();
    batch.put(b"a", b"1").delete(b"a").put(b"a", b"2");
    batch.put(b"b", b"1").delete(b"b");
    store.write(batch).unwrap();
    assert_eq!(store.get(b"a").unwrap(), Some(b"2".to_vec()));
    assert_eq!(store.get(b"b").unwrap(), None);

    let mut bad = WriteBatch::new();
    bad.put(b"c", b"1")
        .put(vec![0; store_api::limits::MAX_KEY_LEN + 1], b"x");
    assert_eq!(
        store.write(bad).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(store.get(b"c").unwrap(), None);
    assert_eq!(store.approximate_len().unwrap(), 1);
}

#[test]
fn iterators_read_a_snapshot_and_reverse_ranges_hold() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for key in [b"a", b"b", b"c", b"d"] {
        store.put(key, key).unwrap();
    }
    let before = store.range(Included(b"b"), Unbounded).unwrap();
    store.put(b"bb", b"new").unwrap();
    store.delete(b"d").unwrap();
    let keys: Vec<_> = collect(before).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);

    let rev: Vec<_> = collect(store.reverse_range(Excluded(b"a"), Included(b"c")).unwrap());
    let rev_keys: Vec<_> = rev.into_iter().map(|(k, _)| k).collect();
    assert_eq!(rev_keys, [b"c".to_vec(), b"bb".to_vec(), b"b".to_vec()]);
    assert!(collect(store.range(Included(b"c"), Included(b"a")).unwrap()).is_empty());
    assert!(collect(store.reverse_range(Included(b"b"), Excluded(b"b")).unwrap()).is_empty());
}

#[test]
fn put_if_absent_has_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8u8)
        .map(|i| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                store.put_if_absent(b"k", &[i]).unwrap()
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_none()).count(), 1);
    let winner = store.get(b"k").unwrap().unwrap();
    assert!(results.iter().flatten().all(|existing| *existing == winner));
}

#[test]
fn damaged_pages_without_verification_are_corruption_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut batch = WriteBatch::new();
    for i in 0..2000u32 {
        batch.put(i.to_be_bytes(), vec![0xAB; 200]);
    }
    store.write(batch).unwrap();
    store.close().unwrap();
    let path = dir.path().join(FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len();
    bytes[len / 2..len / 2 + 8192].fill(0x5A);
    std::fs::write(&path, bytes).unwrap();
    let err = RedbStore::open(dir.path(), Config::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
}
