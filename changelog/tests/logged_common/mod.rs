//! Helpers shared by the `logged_*` tests: real stores and logs, a counting restore listener.

#![allow(
    dead_code,
    reason = "each test crate uses a different subset of the helpers"
)]

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use statestore_changelog::{
    Changelog, Checkpoint, CommitReader, FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig,
    MemoryLog, RestoreListener,
};
use statestore_memory::{Config, MemoryStore};
use store_api::{KeyValueStore, KvIter, KvPair, WriteBatch};

pub const TOPIC: &str = "app-counts-changelog";

/// A fresh in-memory store.
pub fn memory_store() -> Arc<dyn KeyValueStore> {
    Arc::new(MemoryStore::new(Config::default()))
}

/// A fresh persistent store (redb) in `dir`: the checkpoint file names what it holds.
pub fn persistent_store(dir: &Path) -> Arc<dyn KeyValueStore> {
    Arc::from(statestore::open("redb", dir, &serde_json::Value::Null).expect("redb store"))
}

/// A file log (sync on every commit) under `dir`.
pub fn file_log(dir: &Path) -> Arc<FileLog> {
    Arc::new(FileLog::open(dir, TOPIC, 0, FileLogConfig::default()).expect("open file log"))
}

/// The checkpoint file of a task directory `dir`.
pub fn checkpoint(dir: &Path) -> Arc<Checkpoint> {
    Arc::new(Checkpoint::open(dir.join(".checkpoint")).expect("open checkpoint"))
}

/// A logged store on a memory store and a memory log, with a checkpoint in `dir`.
pub fn logged_in_memory(dir: &Path, config: LoggedStoreConfig) -> (LoggedStore, MemoryLog) {
    let log = MemoryLog::new(TOPIC, 0);
    let store = LoggedStore::open(
        memory_store(),
        Arc::new(log.clone()),
        checkpoint(dir),
        config,
    )
    .expect("open logged store");
    (store, log)
}

/// Every pair an iterator yields.
pub fn collect(iter: KvIter) -> Vec<KvPair> {
    iter.collect::<Result<_, _>>().expect("iteration")
}

/// Every pair of a store, in order.
pub fn scan(store: &dyn KeyValueStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    collect(
        store
            .range(Bound::Unbounded, Bound::Unbounded)
            .expect("range"),
    )
    .into_iter()
    .collect()
}

/// The state a log's records build: replayed into a fresh memory store.
pub fn replay(log: &dyn Changelog) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let store = memory_store();
    let mut reader = CommitReader::new(log, log.start_offset().expect("start"));
    let end = log.end_offset().expect("end");
    while reader.position() < end {
        let released = reader.read(1000).expect("read");
        if released.last_read.is_none() {
            break;
        }
        let batch: WriteBatch = released.ops.into_iter().collect();
        store.write(batch).expect("write");
    }
    scan(store.as_ref())
}

/// A listener that records every event.
#[derive(Debug, Default)]
pub struct Recorder {
    pub starts: Vec<(String, u32, u64, u64)>,
    pub batches: Vec<(u64, usize)>,
    pub ends: Vec<u64>,
}

impl Recorder {
    /// Records replayed, summed over the batches.
    pub fn records(&self) -> usize {
        self.batches.iter().map(|(_, records)| records).sum()
    }
}

impl RestoreListener for Recorder {
    fn on_start(&mut self, topic: &str, partition: u32, start: u64, end: u64) {
        self.starts.push((topic.to_string(), partition, start, end));
    }

    fn on_batch(&mut self, _topic: &str, _partition: u32, batch_end_offset: u64, records: usize) {
        self.batches.push((batch_end_offset, records));
    }

    fn on_end(&mut self, _topic: &str, _partition: u32, total: u64) {
        self.ends.push(total);
    }
}

/// A key-value pair from strings.
pub fn kv(key: &str, value: &str) -> KvPair {
    (key.as_bytes().to_vec(), value.as_bytes().to_vec())
}
