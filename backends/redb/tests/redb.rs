//! redb-specific behaviour the conformance suite cannot know about: options, the file name in
//! `Locked` errors, redb's detection of damaged files with and without `verify_on_open`, and
//! an iterator outliving `close` without holding the file. The contract as a whole is checked
//! by the conformance suite in `conformance.rs`, crashes in `crash.rs`.

use std::ops::Bound::Unbounded;
use std::path::Path;

use serde_json::json;
use statestore_redb::{Config, FILE_NAME, RedbFactory, RedbStore};
use store_api::{BackendFactory, ErrorKind, KeyValueStore, WriteBatch};

fn open(dir: &Path) -> RedbStore {
    RedbStore::open(dir, Config::default()).expect("open")
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

/// A store of 2000 entries, closed, with 8 KiB past the header (where the tree's pages live)
/// overwritten.
fn damaged_store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = open(dir.path());
    let mut batch = WriteBatch::new();
    for i in 0..2000u32 {
        batch.put(i.to_be_bytes(), vec![0xAB; 200]);
    }
    store.write(batch).expect("write");
    store.close().expect("close");
    let path = dir.path().join(FILE_NAME);
    let mut bytes = std::fs::read(&path).expect("read the file");
    let len = bytes.len();
    bytes[len / 2..len / 2 + 8192].fill(0x5A);
    std::fs::write(&path, bytes).expect("write the file");
    dir
}

#[test]
fn damaged_pages_fail_verification_on_open() {
    let dir = damaged_store();
    let config = Config {
        verify_on_open: true,
        ..Config::default()
    };
    let err = RedbStore::open(dir.path(), config).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
}

#[test]
fn damaged_pages_without_verification_are_corruption_not_a_panic() {
    let dir = damaged_store();
    let err = RedbStore::open(dir.path(), Config::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
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
