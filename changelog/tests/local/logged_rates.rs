//! Measurements, not run by default: how fast a 1M-record embedded log restores into each
//! backend (next to a raw sequential read of the same log), and single-put throughput through
//! a `LoggedStore` on the embedded log against the bare store.
//!
//! ```text
//! cargo test --release -p statestore-changelog --no-default-features \
//!     --test local logged_rates:: -- --ignored --nocapture --test-threads=1
//! ```
//! `STATESTORE_RESTORE_RECORDS` and `STATESTORE_PUTS` change the counts. Keys are 24 bytes and
//! values 150, as in the benches; every key is distinct.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::logged_common::{TOPIC, memory_store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statestore_changelog::{
    Changelog, Checkpoint, FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig,
};
use store_api::{BatchOp, KeyValueStore};

fn fill(log: &FileLog, records: u64) {
    let mut ops = Vec::with_capacity(10_000);
    for i in 0..records {
        // A multiplicative permutation, so keys arrive in random order as in a real log.
        let key = format!("key{:021}", i.wrapping_mul(0x9E37_79B9) % records.max(1));
        ops.push(BatchOp::Put {
            key: key.into_bytes(),
            value: vec![(i % 251) as u8; 150],
        });
        if ops.len() == ops.capacity() {
            log.append(&ops).expect("append");
            ops.clear();
        }
    }
    log.append(&ops).expect("append");
    log.sync().expect("sync");
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture, preferably with --release"]
fn restore_rate_into_each_backend() {
    let records: u64 = std::env::var("STATESTORE_RESTORE_RECORDS")
        .ok()
        .map_or(1_000_000, |text| text.parse().expect("a number"));
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Arc::new(
        FileLog::open(&dir.path().join("log"), TOPIC, 0, FileLogConfig::default()).expect("log"),
    );
    fill(&log, records);

    let started = Instant::now();
    let (mut from, mut read) = (0, 0u64);
    while let Some(last) = log
        .read(from, 10_000)
        .expect("read")
        .last()
        .map(|r| r.offset)
    {
        read += last + 1 - from;
        from = last + 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "raw log scan: {read} records in {secs:.2}s = {:.0} records/s",
        read as f64 / secs
    );

    for backend in ["memory", "rocksdb", "sled", "redb"] {
        let store: Arc<dyn KeyValueStore> = match backend {
            "memory" => memory_store(),
            name => Arc::from(
                statestore::open(name, &dir.path().join(name), &serde_json::Value::Null)
                    .expect("open"),
            ),
        };
        let checkpoint = Arc::new(
            Checkpoint::open(dir.path().join(format!("{backend}.checkpoint"))).expect("cp"),
        );
        let started = Instant::now();
        let logged =
            LoggedStore::open(store, log.clone(), checkpoint, LoggedStoreConfig::default())
                .expect("restore");
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(logged.restored().records, records);
        let first = format!("key{:021}", 0);
        assert!(records == 0 || logged.get(first.as_bytes()).expect("get").is_some());
        println!(
            "restore into {backend}: {records} records in {secs:.2}s = {:.0} records/s",
            records as f64 / secs
        );
    }
}

fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map_or(default, |text| text.parse().expect("a number"))
}

fn open_backend(backend: &str, dir: &Path) -> Arc<dyn KeyValueStore> {
    match backend {
        "memory" => memory_store(),
        name => Arc::from(statestore::open(name, dir, &serde_json::Value::Null).expect("open")),
    }
}

/// Puts every key, then makes them durable (`flush`, which is a commit for a logged store),
/// and returns puts per second, and the share of the time spent in the final flush.
fn put_rate(store: &dyn KeyValueStore, keys: &[[u8; 24]]) -> (f64, f64) {
    let value = [0x5a; 150];
    let started = Instant::now();
    for key in keys {
        store.put(key, &value).expect("put");
    }
    let flushing = Instant::now();
    store.flush().expect("flush");
    let total = started.elapsed().as_secs_f64();
    (
        keys.len() as f64 / total,
        flushing.elapsed().as_secs_f64() / total,
    )
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture, preferably with --release"]
fn put_rate_logged_vs_unlogged() {
    let puts = env_count("STATESTORE_PUTS", 200_000);
    let mut rng = StdRng::seed_from_u64(7);
    let keys: Vec<[u8; 24]> = (0..puts).map(|_| rng.random()).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    for backend in ["memory", "rocksdb", "sled", "redb"] {
        let unlogged = open_backend(backend, &dir.path().join(format!("{backend}-plain")));
        let (plain, plain_flush) = put_rate(unlogged.as_ref(), &keys);
        let inner = open_backend(backend, &dir.path().join(format!("{backend}-logged")));
        let log_dir = dir.path().join(format!("{backend}-log"));
        let log =
            Arc::new(FileLog::open(&log_dir, TOPIC, 0, FileLogConfig::default()).expect("log"));
        let checkpoint = Arc::new(
            Checkpoint::open(dir.path().join(format!("{backend}.checkpoint"))).expect("cp"),
        );
        let logged =
            LoggedStore::open(inner, log, checkpoint, LoggedStoreConfig::default()).expect("open");
        let (with_log, logged_flush) = put_rate(&logged, &keys);
        // Every put, then one commit marker per commit.
        let logged_records = logged.changelog().end_offset().expect("end");
        assert!(
            logged_records > puts && logged_records < puts * 2,
            "{logged_records}"
        );
        println!(
            "put {backend}: {puts} puts, unlogged {plain:.0}/s ({:.0}% in the final flush), \
             logged on the file log {with_log:.0}/s ({:.0}% in the final commit), ratio {:.2}",
            plain_flush * 100.0,
            logged_flush * 100.0,
            with_log / plain
        );
    }
}
