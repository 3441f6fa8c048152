//! A measurement, not run by default: how fast a 1M-record embedded log restores into each
//! backend, next to a raw sequential read of the same log.
//!
//! ```text
//! cargo test --release -p statestore-changelog --no-default-features \
//!     --test logged_restore_rate -- --ignored --nocapture
//! ```
//! `STATESTORE_RESTORE_RECORDS` changes the record count. Keys are 24 bytes and values 150,
//! as in the benches; every key is distinct, so the store ends with one entry per record.

mod logged_common;

use std::sync::Arc;
use std::time::Instant;

use logged_common::{TOPIC, memory_store};
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
