//! What a savepoint per record costs a task's write path: the counting step of a word count
//! (read a key's count, write it back plus one) against a `LoggedStore` under
//! `CommitPolicy::Explicit`, as a task's stores are opened, with and without a
//! [`LoggedStore::savepoint`] before each record (what `Task::begin_call` does since a
//! failing record is rolled back alone). Group `savepoint_per_record`, ids
//! `memory/<keys>/no-savepoint` and `memory/<keys>/savepoint`, over 1 000 and 100 000 keys.
//!
//! Measured: one iteration is [`RECORDS`] records, then a commit (on a memory log, so the
//! commit costs little next to Kafka's). Not measured: the consumer, the producer, the
//! processor call itself, which the two sides share; a roll-back, which only a failing
//! record pays.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use statestore::memory::{Config, MemoryStore};
use statestore_changelog::{Checkpoint, CommitPolicy, LoggedStore, LoggedStoreConfig, MemoryLog};
use store_api::KeyValueStore;

/// Records per iteration, and per commit.
const RECORDS: u64 = 10_000;

fn open(dir: &std::path::Path) -> LoggedStore {
    let checkpoint = Arc::new(Checkpoint::open(dir.join(".checkpoint")).expect("checkpoint"));
    LoggedStore::open(
        Arc::new(MemoryStore::new(Config::default())),
        Arc::new(MemoryLog::new("bench-counts-changelog", 0)),
        checkpoint,
        LoggedStoreConfig {
            commit_policy: CommitPolicy::Explicit,
            ..LoggedStoreConfig::default()
        },
    )
    .expect("open")
}

/// One record of a word count: the count of `key` read and written back plus one.
fn count(store: &LoggedStore, key: &[u8]) {
    let count = store.get(key).expect("get").map_or(0, |value| {
        u64::from_be_bytes(value.try_into().unwrap_or_default())
    });
    store.put(key, &(count + 1).to_be_bytes()).expect("put");
}

fn rounds(store: &LoggedStore, keys: &[Vec<u8>], savepoints: bool, iters: u64) -> Duration {
    let mut at = 0u64;
    let started = Instant::now();
    for _ in 0..iters {
        for _ in 0..RECORDS {
            // A cheap spread of the keys, the same on both sides.
            at = at
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let key = &keys[usize::try_from(at >> 33).unwrap_or(0) % keys.len()];
            if savepoints {
                store.savepoint();
            }
            count(store, key);
        }
        store.commit().expect("commit");
    }
    started.elapsed()
}

fn savepoint_per_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("savepoint_per_record");
    group.throughput(Throughput::Elements(RECORDS));
    for n in [1_000u64, 100_000] {
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("word-{i:08}").into_bytes())
            .collect();
        for (name, savepoints) in [("no-savepoint", false), ("savepoint", true)] {
            let dir = tempfile::tempdir().expect("dir");
            let store = open(dir.path());
            group.bench_function(BenchmarkId::new(format!("memory/{n}"), name), |b| {
                b.iter_custom(|iters| rounds(&store, &keys, savepoints, iters))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, savepoint_per_record);
criterion_main!(benches);
