//! RocksDB-specific behaviour the conformance suite cannot know about: options, the mapping of
//! RocksDB's lock and argument errors, bound translation at successor keys, durability of
//! `flush` with and without the write-ahead log, and the lifetime of iterators across `close`.

use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::path::Path;

use serde_json::json;
use statestore_rocksdb::{Compression, Config, RocksDbFactory, RocksDbStore};
use store_api::{BackendFactory, ErrorKind, KeyValueStore};

fn open(dir: &Path) -> RocksDbStore {
    RocksDbStore::open(dir, Config::default()).expect("open")
}

fn collect(iter: store_api::KvIter) -> Vec<Vec<u8>> {
    iter.map(|item| item.expect("item").0).collect()
}

fn keys(list: &[&[u8]]) -> Vec<Vec<u8>> {
    list.iter().map(|key| key.to_vec()).collect()
}

#[test]
fn factory_applies_options() {
    let dir = tempfile::tempdir().unwrap();
    let options = json!({
        "block_cache_size": 0,
        "compression": "zstd",
        "write_buffer_size": 1 << 20,
        "max_write_buffer_number": 2,
        "wal": false,
        "sync_writes": false,
        "bloom_filter_bits_per_key": 0.0,
        "max_open_files": 64,
        "parallelism": 2,
        "create_if_missing": true,
    });
    let store = RocksDbFactory.open(dir.path(), &options).unwrap();
    assert_eq!(
        (RocksDbFactory.name(), store.name()),
        ("rocksdb", "rocksdb")
    );
    store.put(b"k", b"v").unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
    let parsed: Config = serde_json::from_value(options).unwrap();
    assert_eq!(parsed.compression, Compression::Zstd);
    assert!(!parsed.wal);
}

#[test]
fn unknown_or_bad_options_are_invalid_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        json!({ "block_cache": 1 }),
        json!({ "compression": "brotli" }),
        json!({ "max_write_buffer_number": 0 }),
        json!({ "bloom_filter_bits_per_key": -3.0 }),
        json!({ "wal": "yes" }),
    ];
    for options in cases {
        let err = RocksDbFactory.open(dir.path(), &options).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{options}: {err}");
    }
    let err = RocksDbFactory
        .open(dir.path(), &json!({ "block_cache": 1 }))
        .unwrap_err();
    assert!(err.to_string().contains("block_cache"), "{err}");
}

#[test]
fn missing_store_without_create_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        create_if_missing: false,
        ..Config::default()
    };
    let err = RocksDbStore::open(&dir.path().join("absent"), config).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

#[test]
fn second_open_is_locked_and_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path());
    let err = RocksDbStore::open(dir.path(), Config::default()).unwrap_err();
    match err {
        store_api::Error::Locked { path, .. } => assert_eq!(path, dir.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    first.close().unwrap();
    open(dir.path()).close().unwrap();
}

/// Set by [`second_process_open_is_locked`] for the child process it starts.
const CHILD_DIR: &str = "STATESTORE_ROCKSDB_LOCKED_DIR";

#[test]
fn second_process_open_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let _held = open(dir.path());
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_open_reports_locked",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DIR, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "child failed: {stdout}");
    assert!(
        stdout.contains("1 passed"),
        "the child case did not run: {stdout}"
    );
}

/// The child half of [`second_process_open_is_locked`]: another process's `LOCK` (an `fcntl`
/// lock, reported differently from this process's own) is `Locked` too.
#[test]
#[ignore = "run by second_process_open_is_locked in a child process"]
fn child_open_reports_locked() {
    let dir = std::env::var_os(CHILD_DIR).expect("started by second_process_open_is_locked");
    let err = RocksDbStore::open(Path::new(&dir), Config::default()).unwrap_err();
    match err {
        store_api::Error::Locked { path, detail } => {
            assert_eq!(path, Path::new(&dir));
            println!("locked by another process: {detail}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }
}

#[test]
fn outstanding_iterator_keeps_the_lock_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.put(b"a", b"1").unwrap();
    let mut iter = store.range(Unbounded, Unbounded).unwrap();
    store.close().unwrap();
    assert_eq!(store.get(b"a").unwrap_err().kind(), ErrorKind::Closed);
    let err = RocksDbStore::open(dir.path(), Config::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked);
    // The iterator still reads its snapshot.
    assert_eq!(
        iter.next().unwrap().unwrap(),
        (b"a".to_vec(), b"1".to_vec())
    );
    drop(iter);
    assert_eq!(open(dir.path()).get(b"a").unwrap(), Some(b"1".to_vec()));
}

/// Keys that differ only by trailing zero bytes, where `key ++ [0]` is the exact successor.
fn successor_fixture(dir: &Path) -> RocksDbStore {
    let store = open(dir);
    for key in [
        &b"a"[..],
        b"a\0",
        b"a\0\0",
        b"a\x01",
        b"b",
        b"\xff",
        b"\xff\0",
    ] {
        store.put(key, key).expect("put");
    }
    store
}

fn both(store: &RocksDbStore, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Vec<Vec<u8>> {
    let forward = collect(store.range(from, to).expect("range"));
    let mut backward = collect(store.reverse_range(from, to).expect("reverse_range"));
    backward.reverse();
    assert_eq!(forward, backward, "reverse disagrees for {from:?}..{to:?}");
    forward
}

#[test]
fn bounds_are_exact_at_successor_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = successor_fixture(dir.path());
    assert_eq!(both(&store, Included(b"a"), Included(b"a")), keys(&[b"a"]));
    assert_eq!(
        both(&store, Included(b"a"), Included(b"a\0")),
        keys(&[b"a", b"a\0"])
    );
    assert_eq!(
        both(&store, Included(b"a"), Excluded(b"a\0")),
        keys(&[b"a"])
    );
    assert_eq!(
        both(&store, Excluded(b"a"), Included(b"a\0\0")),
        keys(&[b"a\0", b"a\0\0"])
    );
    assert_eq!(
        both(&store, Excluded(b"a\0"), Excluded(b"b")),
        keys(&[b"a\0\0", b"a\x01"])
    );
    assert_eq!(both(&store, Excluded(b"a"), Excluded(b"a\0")), keys(&[]));
    assert_eq!(
        both(&store, Included(b"\xff"), Included(b"\xff")),
        keys(&[b"\xff"])
    );
    assert_eq!(
        both(&store, Excluded(b"\xff"), Unbounded),
        keys(&[b"\xff\0"])
    );
    assert_eq!(
        both(&store, Excluded(b"b"), Included(b"\xff\0")),
        keys(&[b"\xff", b"\xff\0"])
    );
}

#[test]
fn inverted_and_degenerate_ranges_are_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = successor_fixture(dir.path());
    assert_eq!(both(&store, Included(b"b"), Included(b"a")), keys(&[]));
    assert_eq!(both(&store, Excluded(b"a"), Included(b"a")), keys(&[]));
    assert_eq!(both(&store, Included(b"a"), Excluded(b"a")), keys(&[]));
    assert_eq!(both(&store, Excluded(b"a\0"), Excluded(b"a")), keys(&[]));
}

#[test]
fn prefix_scans_use_native_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let store = successor_fixture(dir.path());
    let all = keys(&[b"a", b"a\0", b"a\0\0", b"a\x01", b"b", b"\xff", b"\xff\0"]);
    assert_eq!(collect(store.prefix_scan(b"").unwrap()), all);
    assert_eq!(
        collect(store.prefix_scan(b"a\0").unwrap()),
        keys(&[b"a\0", b"a\0\0"])
    );
    assert_eq!(
        collect(store.prefix_scan(b"\xff").unwrap()),
        keys(&[b"\xff", b"\xff\0"])
    );
    assert_eq!(
        collect(store.reverse_prefix_scan(b"\xff").unwrap()),
        keys(&[b"\xff\0", b"\xff"])
    );
    assert_eq!(collect(store.prefix_scan(b"a\0\0\0").unwrap()), keys(&[]));
}

#[test]
fn approximate_len_counts_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert_eq!(store.approximate_len().unwrap(), 0);
    for i in 0..1000u32 {
        store.put(&i.to_be_bytes(), b"v").unwrap();
    }
    let estimate = store.approximate_len().unwrap();
    assert!((900..=1100).contains(&estimate), "estimate {estimate}");
}

/// Copies the files of an open database, as a crash would leave them, and opens the copy.
fn crash_copy(from: &Path, to: &Path) -> RocksDbStore {
    std::fs::create_dir_all(to).expect("create copy dir");
    for entry in std::fs::read_dir(from).expect("list db dir") {
        let entry = entry.expect("dir entry");
        if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
        }
    }
    open(to)
}

#[test]
fn flush_persists_writes_with_and_without_wal() {
    for wal in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            wal,
            ..Config::default()
        };
        let store = RocksDbStore::open(&dir.path().join("db"), config).unwrap();
        store.put(b"before", b"1").unwrap();
        if !wal {
            // Without the log an unflushed write lives only in the memtable.
            let copy = crash_copy(&dir.path().join("db"), &dir.path().join("early"));
            assert_eq!(copy.get(b"before").unwrap(), None);
        }
        store.flush().unwrap();
        let copy = crash_copy(&dir.path().join("db"), &dir.path().join("copy"));
        assert_eq!(
            copy.get(b"before").unwrap(),
            Some(b"1".to_vec()),
            "wal = {wal}"
        );
    }
}

fn bulk_config(bulk_load_bytes: usize) -> Config {
    Config {
        bulk_load_bytes,
        ..Config::default()
    }
}

/// A deterministic stream of puts and deletes over 300 keys, many keys written many times.
fn bulk_ops(count: u32) -> Vec<store_api::BatchOp> {
    (0..count)
        .map(|i| {
            let key = format!("key{:03}", (i * 7919) % 300).into_bytes();
            if i % 7 == 3 {
                store_api::BatchOp::Delete { key }
            } else {
                store_api::BatchOp::Put {
                    key,
                    value: format!("value {i}").into_bytes(),
                }
            }
        })
        .collect()
}

fn model_of(
    start: &[(&[u8], &[u8])],
    ops: &[store_api::BatchOp],
) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = start
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    for op in ops {
        match op {
            store_api::BatchOp::Put { key, value } => {
                drop(model.insert(key.clone(), value.clone()))
            }
            store_api::BatchOp::Delete { key } => drop(model.remove(key)),
        }
    }
    model
}

fn contents(store: &dyn KeyValueStore) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    store
        .range(Unbounded, Unbounded)
        .expect("range")
        .map(|item| item.expect("item"))
        .collect()
}

/// With a chunk of one byte every `load` becomes its own SST file: later files must shadow
/// earlier ones (puts over puts, deletes over puts, puts over deletes), within a load the
/// last write of a key wins, and the state survives a reopen.
#[test]
fn bulk_load_in_many_chunks_gives_the_replay_state() {
    for chunk in [1, 4 << 10, 64 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksDbStore::open(dir.path(), bulk_config(chunk)).expect("open");
        store.put(b"key000", b"before").unwrap();
        store.put(b"zzz", b"kept").unwrap();
        let ops = bulk_ops(5000);
        let mut loader = store.bulk_loader().unwrap().expect("a loader");
        for (n, part) in ops.chunks(37).enumerate() {
            // Loads of many sizes, one of them empty.
            let part = if n == 3 { &[][..] } else { part };
            loader.load(part.to_vec()).expect("load");
        }
        loader.finish().expect("finish");
        let loaded: Vec<_> = ops
            .chunks(37)
            .enumerate()
            .filter(|(n, _)| *n != 3)
            .flat_map(|(_, part)| part.to_vec())
            .collect();
        let expected = model_of(&[(b"key000", b"before"), (b"zzz", b"kept")], &loaded);
        assert_eq!(contents(&store), expected, "chunks of {chunk} bytes");
        assert!(!dir.path().join("bulk-load").exists(), "files left behind");
        store.close().unwrap();
        let store = RocksDbStore::open(dir.path(), bulk_config(chunk)).expect("reopen");
        assert_eq!(
            contents(&store),
            expected,
            "after reopen, chunks of {chunk} bytes"
        );
    }
}

#[test]
fn bulk_loading_off_offers_no_loader() {
    let dir = tempfile::tempdir().unwrap();
    let store = RocksDbStore::open(dir.path(), bulk_config(0)).expect("open");
    assert!(store.bulk_loader().unwrap().is_none());
    let store = RocksDbFactory
        .open(&dir.path().join("b"), &json!({ "bulk_load_bytes": 0 }))
        .expect("open by options");
    assert!(store.bulk_loader().unwrap().is_none());
}

/// A loader dropped unfinished removes its files; what it had not spilled never reaches the
/// store. The files of a load killed with its process are removed by the next open.
#[test]
fn unfinished_bulk_loads_leave_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut loader = store.bulk_loader().unwrap().expect("a loader");
    loader.load(bulk_ops(100)).expect("load");
    assert!(dir.path().join("bulk-load").is_dir());
    drop(loader);
    assert!(!dir.path().join("bulk-load").exists());
    assert!(
        contents(&store).is_empty(),
        "an unspilled chunk was applied"
    );
    store.close().unwrap();
    std::fs::create_dir(dir.path().join("bulk-load")).unwrap();
    std::fs::write(dir.path().join("bulk-load").join("000000.sst"), b"torn").unwrap();
    let _store = open(dir.path());
    assert!(
        !dir.path().join("bulk-load").exists(),
        "open kept a dead load's files"
    );
}

#[test]
fn closed_store_offers_no_loader() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.close().unwrap();
    let err = store.bulk_loader().err().expect("closed");
    assert_eq!(err.kind(), ErrorKind::Closed);
    let err = store
        .delete_range(Unbounded, Unbounded)
        .expect_err("closed");
    assert_eq!(err.kind(), ErrorKind::Closed);
}

/// The native range deletion at successor keys: an excluded start skips exactly its key, an
/// included end takes exactly its key, an unbounded end takes the last key (0xFF keys too).
#[test]
fn delete_range_bounds_are_exact_at_successor_keys() {
    type Case = (
        Bound<&'static [u8]>,
        Bound<&'static [u8]>,
        &'static [&'static [u8]],
    );
    let cases: [Case; 4] = [
        (
            Excluded(b"a"),
            Included(b"b"),
            &[b"a", b"b\x00", b"\xff\xff"],
        ),
        (
            Included(b"a\x00"),
            Excluded(b"b\x00"),
            &[b"a", b"b\x00", b"\xff\xff"],
        ),
        (Excluded(b"b"), Unbounded, &[b"a", b"a\x00", b"b"]),
        (
            Unbounded,
            Excluded(b"a\x00"),
            &[b"a\x00", b"b", b"b\x00", b"\xff\xff"],
        ),
    ];
    for (from, to, left) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        for key in [&b"a"[..], b"a\x00", b"b", b"b\x00", b"\xff\xff"] {
            store.put(key, b"v").unwrap();
        }
        store.delete_range(from, to).unwrap();
        assert_eq!(
            collect(store.range(Unbounded, Unbounded).unwrap()),
            keys(left),
            "delete_range({from:?}, {to:?})"
        );
    }
}

/// Stores naming the same memory budget share one cache and write-buffer manager: the
/// memtable written through one shows in the budget another reports. A live budget cannot be
/// reopened with other sizes; another name is another budget.
#[test]
fn memory_budget_is_shared_by_name() {
    use statestore_rocksdb::MemoryBudget;

    let dir = tempfile::tempdir().expect("tempdir");
    let budget = |name: &str, total_bytes: usize| Config {
        memory_budget: Some(MemoryBudget {
            name: name.into(),
            total_bytes,
            write_buffer_ratio: 0.5,
        }),
        ..Config::default()
    };
    let a = RocksDbStore::open(&dir.path().join("a"), budget("shared-test", 64 << 20)).expect("a");
    let b = RocksDbStore::open(&dir.path().join("b"), budget("shared-test", 64 << 20)).expect("b");
    let other = RocksDbStore::open(&dir.path().join("c"), budget("other-test", 64 << 20))
        .expect("another budget");
    let before = b.memory_budget_usage().expect("a budget");
    assert_eq!(before.total_bytes, 64 << 20);
    let value = vec![7u8; 1024];
    for i in 0u32..2048 {
        a.put(&i.to_be_bytes(), &value).expect("put");
    }
    let after = b.memory_budget_usage().expect("a budget");
    assert!(
        after.write_buffer_bytes >= before.write_buffer_bytes + (2 << 20),
        "b's budget holds a's memtable: {before:?} -> {after:?}"
    );
    assert!(
        after.cache_bytes >= after.write_buffer_bytes,
        "memtables are charged to the shared cache: {after:?}"
    );
    assert!(
        other
            .memory_budget_usage()
            .expect("budget")
            .write_buffer_bytes
            < 1 << 20,
        "another name is another budget"
    );
    let err = RocksDbStore::open(&dir.path().join("d"), budget("shared-test", 32 << 20))
        .expect_err("other sizes for a live budget");
    assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
    assert!(
        RocksDbStore::open(&dir.path().join("e"), Config::default())
            .expect("no budget")
            .memory_budget_usage()
            .is_none()
    );
    drop((a, b));
    // Once no store uses it, the name can be opened with other sizes.
    RocksDbStore::open(&dir.path().join("d"), budget("shared-test", 32 << 20))
        .expect("a new budget of that name");
}
