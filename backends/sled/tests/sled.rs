//! sled-specific behaviour the conformance suite cannot know about: options, sled's own lock
//! and how fast a refused open returns, reopening after a drop, sled's files damaged or full of
//! garbage, and an iterator outliving `close`. The contract as a whole is checked by the
//! conformance suite in `conformance.rs`, crashes in `crash.rs`.

use std::ops::Bound::Unbounded;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;
use statestore_sled::{Config, SledFactory, SledStore};
use store_api::{BackendFactory, ErrorKind, KeyValueStore};

fn open(dir: &Path) -> SledStore {
    SledStore::open(dir, Config::default()).expect("open")
}

/// Runs `f` on another thread and fails the test if it takes longer than ten seconds.
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(Duration::from_secs(10))
        .expect("finished in time")
}

#[test]
fn options_parse_and_unknown_option_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let options = json!({
        "cache_capacity_bytes": 4_194_304, "flush_every_ms": null, "mode": "high_throughput"
    });
    let store = SledFactory
        .open(dir.path(), &options)
        .expect("valid options");
    store.put(b"k", b"v").unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
    store.close().unwrap();

    for bad in [
        json!({"use_compression": true}),
        json!({"mode": "fast"}),
        json!("x"),
    ] {
        let err = SledFactory.open(dir.path(), &bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad}: {err}");
    }
    assert_eq!(SledFactory.name(), "sled");
}

#[test]
fn second_open_is_locked_fast_and_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path());
    let path = dir.path().to_path_buf();
    let err = within_10s(move || SledStore::open(&path, Config::default()).unwrap_err());
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
    assert!(
        err.to_string().contains(&*dir.path().to_string_lossy()),
        "{err}"
    );
    let err = SledFactory.open(dir.path(), &json!(null)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked);
    first.close().unwrap();
}

#[test]
fn directory_held_by_plain_sled_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let native = sled::open(dir.path()).unwrap();
    let err = SledStore::open(dir.path(), Config::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
    drop(native);
}

#[test]
fn reopens_at_once_after_close_or_drop() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..20u32 {
        let store = open(dir.path());
        assert_eq!(store.approximate_len().unwrap(), u64::from(round));
        store.put(&round.to_be_bytes(), b"v").unwrap();
        if round % 2 == 0 {
            store.close().unwrap();
        } else {
            store.flush().unwrap();
            drop(store);
        }
    }
}

fn garbage(len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[test]
fn garbage_files_are_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("db"), garbage(256 * 1024)).unwrap();
    std::fs::write(dir.path().join("conf"), [0xFF; 64]).unwrap();
    let path = dir.path().to_path_buf();
    let err = within_10s(move || {
        SledStore::open(&path, Config::default())
            .map(drop)
            .unwrap_err()
    });
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Corruption | ErrorKind::Io | ErrorKind::Backend
        ),
        "{err}"
    );
}

/// sled treats segments that fail their checksums as never written (its torn-write recovery),
/// so a `db` file of pure garbage opens as an empty store: no panic, no garbage keys.
#[test]
fn garbage_database_file_alone_opens_empty() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("db"), garbage(256 * 1024)).unwrap();
    let store = open(dir.path());
    assert_eq!(store.approximate_len().unwrap(), 0);
}

#[test]
fn overwritten_pages_are_corruption_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for i in 0..5000u32 {
        store.put(&i.to_be_bytes(), &[9; 100]).unwrap();
    }
    store.close().unwrap();
    let path = dir.path().join("db");
    let mut bytes = std::fs::read(&path).unwrap();
    let third = bytes.len() / 3;
    bytes[third..third + 8192].fill(0x5A);
    std::fs::write(&path, bytes).unwrap();
    let dir_path = dir.path().to_path_buf();
    // sled notices damage only in pages it still uses; damage to stale pages opens cleanly.
    // Either way the open returns (no panic, no hang), and noticed damage is `Corruption`.
    let opened = within_10s(move || SledStore::open(&dir_path, Config::default()).map(drop));
    if let Err(err) = opened {
        assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    }
}

#[test]
fn iterator_outliving_close_yields_closed_and_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for i in 0..100u32 {
        store.put(&i.to_be_bytes(), b"v").unwrap();
    }
    let mut iter = store.range(Unbounded, Unbounded).unwrap();
    assert!(iter.next().unwrap().is_ok());
    store.close().unwrap();
    assert_eq!(iter.next().unwrap().unwrap_err().kind(), ErrorKind::Closed);
    assert!(iter.next().is_none(), "nothing after an error");
    drop(iter);
    let path = dir.path().to_path_buf();
    let reopened = within_10s(move || {
        // The iterator held sled's last handle: its drop releases the lock on sled's threads.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            match SledStore::open(&path, Config::default()) {
                Err(err)
                    if err.kind() == ErrorKind::Locked && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => return other,
            }
        }
    });
    assert_eq!(reopened.unwrap().approximate_len().unwrap(), 100);
}
