//! Cases of the TTL store.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use statestore_changelog::{Changelog, RecordKind};
use store_api::{BatchOp, KeyValueStore};

use super::{Mode, OperatorFixture, StoreFactory};
use crate::{TtlClock, TtlConfig, TtlStore};

/// A TTL store over the fixture's store, sweeping at every write.
fn open(fx: &OperatorFixture<'_>, config: TtlConfig) -> TtlStore {
    TtlStore::open(fx.store(), config).expect("opening the TTL store")
}

fn stream_config(ttl_ms: i64) -> TtlConfig {
    TtlConfig {
        sweep_interval_ms: 1,
        ..TtlConfig::new(ttl_ms, TtlClock::StreamTime)
    }
}

fn all(store: &dyn KeyValueStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .collect::<Result<_, _>>()
        .expect("range item")
}

fn all_reversed(store: &dyn KeyValueStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut entries: Vec<_> = store
        .reverse_range(Bound::Unbounded, Bound::Unbounded)
        .expect("reverse range")
        .collect::<Result<_, _>>()
        .expect("reverse range item");
    entries.reverse();
    entries
}

fn prefixed(store: &dyn KeyValueStore, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .prefix_scan(prefix)
        .expect("prefix scan")
        .collect::<Result<_, _>>()
        .expect("prefix scan item")
}

/// Neither `get`, ranges, reverse ranges nor prefix scans return an expired entry, before any
/// sweep deleted it (the sweep interval is longer than the test) and after one did.
pub fn expired_entries_are_never_returned(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let lazy = TtlConfig {
        sweep_interval_ms: i64::MAX / 2,
        ..TtlConfig::new(100, TtlClock::StreamTime)
    };
    let store = open(&fx, lazy);
    store.advance_stream_time(1_000).expect("advance");
    store.put(b"ka", b"short").expect("put"); // expires at 1 100
    store.put_with_ttl(b"kb", b"long", Some(500)).expect("put"); // 1 500
    store.put_with_ttl(b"kc", b"forever", None).expect("put");
    store.put(b"x", b"other").expect("put"); // 1 100
    store.advance_stream_time(1_099).expect("advance");
    assert_eq!(all(&store).len(), 4, "nothing expired yet");
    store.advance_stream_time(1_100).expect("advance");
    let live = vec![
        (b"kb".to_vec(), b"long".to_vec()),
        (b"kc".to_vec(), b"forever".to_vec()),
    ];
    assert_eq!(
        store.get(b"ka").expect("get"),
        None,
        "expired at its expiry"
    );
    assert_eq!(store.get(b"x").expect("get"), None);
    assert_eq!(all(&store), live);
    assert_eq!(all_reversed(&store), live);
    assert_eq!(prefixed(&store, b"k"), live);
    assert_eq!(
        store.put_if_absent(b"ka", b"again").expect("put if absent"),
        None,
        "an expired key is absent"
    );
    assert_eq!(store.get(b"ka").expect("get"), Some(b"again".to_vec()));
    store.advance_stream_time(5_000).expect("advance");
    assert_eq!(all(&store), [(b"kc".to_vec(), b"forever".to_vec())]);
    assert_eq!(
        store.purge_expired().expect("purge"),
        3,
        "ka, kb and x swept"
    );
    assert_eq!(all(&store), [(b"kc".to_vec(), b"forever".to_vec())]);
}

/// An entry's removal is a delete in the same write as the stream-time advance that expired
/// it, so in the same changelog commit: the commit holding the new stream time holds the
/// tombstone of the entry's key too, and nothing of the expired entry survives in the
/// wrapped store.
pub fn expiry_is_a_tombstone_in_the_advancing_commit(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, stream_config(100));
    store.advance_stream_time(1_000).expect("advance");
    store.put(b"doomed", b"v").expect("put");
    store
        .put_with_ttl(b"kept", b"v", Some(10_000))
        .expect("put");
    fx.commit();
    let start = fx.changelog().end_offset().expect("end offset");
    store.advance_stream_time(2_000).expect("advance");
    fx.commit();
    assert_eq!(store.get(b"doomed").expect("get"), None);
    let inner: Vec<Vec<u8>> = all(fx.store().as_ref())
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.ends_with(b"doomed"))
        .collect();
    assert!(inner.is_empty(), "expired keys left behind: {inner:?}");
    if mode == Mode::Logged {
        let records = fx
            .changelog()
            .read(start, usize::MAX)
            .expect("reading the changelog");
        let commit: Vec<&BatchOp> = records
            .iter()
            .take_while(|record| record.kind != RecordKind::CommitMarker)
            .map(|record| &record.op)
            .collect();
        assert!(
            commit
                .iter()
                .any(|op| op.key().is_empty() && op.value().is_some()),
            "the commit advances stream time: {commit:?}"
        );
        assert!(
            commit
                .iter()
                .any(|op| op.value().is_none() && op.key() == b"\x01doomed"),
            "the same commit deletes the expired entry: {commit:?}"
        );
        assert!(
            !commit.iter().any(|op| op.key().ends_with(b"kept")),
            "a live entry is not touched: {commit:?}"
        );
    }
}

/// A reopened store (restored from the changelog alone when logged) answers every read as
/// the live store did, with the same stream time, and goes on expiring from there.
pub fn restore_equals_live(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let mut model: BTreeMap<Vec<u8>, (Vec<u8>, i64)> = BTreeMap::new();
    let mut stream_time = 0;
    // A fixed pseudo-random walk: puts with and without their own TTL, deletes, advances.
    let mut seed: u64 = 0x5eed;
    let mut next = move |bound: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % bound
    };
    for round in 0..4 {
        let store = open(&fx, stream_config(300));
        assert_eq!(store.now(), if round == 0 { i64::MIN } else { stream_time });
        for _ in 0..60 {
            let key = format!("k{:02}", next(20)).into_bytes();
            match next(6) {
                0 | 1 => {
                    store.put(&key, b"default").expect("put");
                    model.insert(key, (b"default".to_vec(), stream_time.max(0) + 300));
                }
                2 => {
                    let ttl = 1 + next(900) as i64;
                    store.put_with_ttl(&key, b"own", Some(ttl)).expect("put");
                    model.insert(key, (b"own".to_vec(), stream_time.max(0) + ttl));
                }
                3 => {
                    store.delete(&key).expect("delete");
                    model.remove(&key);
                }
                _ => {
                    stream_time += next(120) as i64;
                    store.advance_stream_time(stream_time).expect("advance");
                }
            }
        }
        let expected: Vec<_> = model
            .iter()
            .filter(|(_, (_, expiry))| *expiry > stream_time)
            .map(|(key, (value, _))| (key.clone(), value.clone()))
            .collect();
        assert_eq!(all(&store), expected, "live store, round {round}");
        fx.commit();
        drop(store);
        fx.reopen();
        if !fx.survives_reopen() {
            return;
        }
        let reopened = open(&fx, stream_config(300));
        assert_eq!(reopened.now(), stream_time, "stream time survives");
        assert_eq!(all(&reopened), expected, "reopened store, round {round}");
        for key in model.keys() {
            let want = expected
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone());
            assert_eq!(reopened.get(key).expect("get"), want);
        }
    }
}

/// An overwrite moves the entry's expiry: the index key of the first write does not delete
/// the second.
pub fn overwrite_moves_expiry(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, stream_config(100));
    store.advance_stream_time(0).expect("advance");
    store.put(b"k", b"first").expect("put"); // 100
    store.advance_stream_time(50).expect("advance");
    store.put(b"k", b"second").expect("put"); // 150
    store.advance_stream_time(120).expect("advance");
    assert_eq!(store.get(b"k").expect("get"), Some(b"second".to_vec()));
    store.purge_expired().expect("purge");
    assert_eq!(store.get(b"k").expect("get"), Some(b"second".to_vec()));
    store.advance_stream_time(150).expect("advance");
    assert_eq!(store.get(b"k").expect("get"), None);
}

/// On the wall clock, entries expire while nothing is written, and stream time cannot be
/// advanced.
pub fn wall_clock_expires_while_idle(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, TtlConfig::new(30, TtlClock::WallClock));
    store.put(b"k", b"v").expect("put");
    store
        .put_with_ttl(b"stays", b"v", Some(3_600_000))
        .expect("put");
    assert!(store.advance_stream_time(1).is_err(), "no stream time");
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(store.get(b"k").expect("get"), None);
    assert_eq!(all(&store), [(b"stays".to_vec(), b"v".to_vec())]);
    assert_eq!(store.purge_expired().expect("purge"), 1);
}

/// Bad options and bad TTLs are `InvalidArgument`, not panics.
pub fn bad_ttls_are_rejected(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let inner = fx.store();
    for bad in [
        TtlConfig::new(0, TtlClock::StreamTime),
        TtlConfig {
            sweep_interval_ms: 0,
            ..TtlConfig::default()
        },
        TtlConfig {
            sweep_limit: 0,
            ..TtlConfig::default()
        },
    ] {
        let err = TtlStore::open(Arc::clone(&inner), bad).expect_err("bad options");
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
    }
    let store = TtlStore::open(inner, TtlConfig::default()).expect("open");
    let err = store
        .put_with_ttl(b"k", b"v", Some(-5))
        .expect_err("a negative TTL");
    assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
}

/// A typed store over a TTL store expires its entries by the store's TTL and by a write's
/// own, and a typed view of a plain store refuses a write with a TTL.
pub fn typed_views_expire(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let ttl = Arc::new(open(&fx, stream_config(100)));
    let typed: crate::TypedStore<String, u64> = crate::TypedStore::with_ttl(Arc::clone(&ttl));
    ttl.advance_stream_time(0).expect("advance");
    typed.put(&"short".into(), &1).expect("put");
    typed
        .put_with_ttl(&"long".into(), &2, Some(1_000))
        .expect("put with ttl");
    ttl.advance_stream_time(100).expect("advance");
    assert_eq!(typed.get(&"short".into()).expect("get"), None);
    let entries: Vec<_> = typed
        .all()
        .expect("all")
        .collect::<Result<_, _>>()
        .expect("entries");
    assert_eq!(entries, [("long".to_string(), 2)]);
    let plain: crate::TypedStore<String, u64> = crate::TypedStore::new(fx.store());
    let err = plain
        .put_with_ttl(&"k".into(), &1, Some(5))
        .expect_err("no TTL store");
    assert_eq!(err.kind(), store_api::ErrorKind::Unsupported);
}
