//! Many reader threads against one writer, checked against the declared iterator
//! consistency.
//!
//! The writer applies batches `1..=GENERATIONS`. Batch `g` sets every static key to `g`, adds
//! the churn key of `g` and deletes the churn key of `g - 1`. Around each batch it records
//! `begun = g` before `write` and `completed = g` after it returns. A reader loads
//! `completed` before creating an iterator and `begun` after draining it, so every value the
//! iterator may show has a generation in `completed..=begun`; no sleep or timing is involved.

use std::ops::Bound::Unbounded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use store_api::{KeyValueStore, KvPair, WriteBatch};

use super::support::{SetOnDrop, drain, get};
use crate::{StoreFactory, StoreFixture};

const STATIC_KEYS: usize = 32;
const GENERATIONS: u64 = 200;
const READERS: usize = 4;
/// Scans each reader makes at least, so some run after the writer is done.
const MIN_SCANS: usize = 8;

#[derive(Default)]
struct Progress {
    begun: AtomicU64,
    completed: AtomicU64,
    done: AtomicBool,
}

fn static_key(i: usize) -> Vec<u8> {
    format!("s/{i:02}").into_bytes()
}

/// The key only batch `g` holds.
fn churn_key(g: u64) -> Vec<u8> {
    [&b"c/"[..], &g.to_be_bytes()].concat()
}

fn generation_batch(g: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for i in 0..STATIC_KEYS {
        batch.put(static_key(i), g.to_be_bytes().to_vec());
    }
    batch.put(churn_key(g), g.to_be_bytes().to_vec());
    if g > 0 {
        batch.delete(churn_key(g - 1));
    }
    batch
}

fn decode(bytes: &[u8], what: &str) -> u64 {
    let array: [u8; 8] = bytes
        .try_into()
        .unwrap_or_else(|_| panic!("{what}: {bytes:?} is not a value the writer wrote"));
    u64::from_be_bytes(array)
}

fn write_generations(store: &dyn KeyValueStore, progress: &Progress) {
    let _stop_readers = SetOnDrop(&progress.done);
    for g in 1..=GENERATIONS {
        progress.begun.store(g, SeqCst);
        store
            .write(generation_batch(g))
            .expect("write of a generation batch");
        progress.completed.store(g, SeqCst);
    }
}

fn read_until_done(store: &dyn KeyValueStore, progress: &Progress, reader: usize) {
    let mut scans = 0;
    loop {
        let finished = progress.done.load(SeqCst);
        check_scan(store, progress, (scans + reader) % 2 == 1);
        check_get(
            store,
            progress,
            static_key((scans * 7 + reader) % STATIC_KEYS),
        );
        scans += 1;
        if finished && scans >= MIN_SCANS {
            return;
        }
    }
}

/// A point read started after batch `completed` returned sees it or a later batch.
fn check_get(store: &dyn KeyValueStore, progress: &Progress, key: Vec<u8>) {
    let completed = progress.completed.load(SeqCst);
    let value = get(store, &key).expect("static keys are never deleted");
    let begun = progress.begun.load(SeqCst);
    let g = decode(&value, "get");
    assert!(
        (completed..=begun).contains(&g),
        "get saw {g} outside {completed}..={begun}"
    );
}

fn check_scan(store: &dyn KeyValueStore, progress: &Progress, reverse: bool) {
    let completed = progress.completed.load(SeqCst);
    let iter = if reverse {
        store.reverse_range(Unbounded, Unbounded)
    } else {
        store.range(Unbounded, Unbounded)
    };
    let mut entries = drain(iter.expect("creating an iterator"), "scan during writes");
    let begun = progress.begun.load(SeqCst);
    if reverse {
        entries.reverse();
    }
    for pair in entries.windows(2) {
        assert!(
            pair[0].0 < pair[1].0,
            "keys out of order or repeated: {pair:?}"
        );
    }
    let window = completed..=begun;
    let (churn, statics): (Vec<&KvPair>, Vec<&KvPair>) =
        entries.iter().partition(|(key, _)| key.starts_with(b"c/"));
    assert_eq!(
        statics.len(),
        STATIC_KEYS,
        "static keys were all written before the scan"
    );
    let static_gens: Vec<u64> = statics.iter().map(|(_, v)| decode(v, "static")).collect();
    for (key, value) in &churn {
        let g = decode(value, "churn");
        assert_eq!(key, &churn_key(g), "churn key holds another batch's value");
        assert!(
            window.contains(&g),
            "churn key of batch {g} outside {window:?}"
        );
    }
    for g in &static_gens {
        assert!(window.contains(g), "static value {g} outside {window:?}");
    }
    if store.capabilities().snapshot_iterators {
        let g = static_gens[0];
        assert!(
            static_gens.iter().all(|&x| x == g),
            "snapshot mixes batches: {static_gens:?}"
        );
        let churn_keys: Vec<&Vec<u8>> = churn.iter().map(|(key, _)| key).collect();
        assert_eq!(churn_keys, vec![&churn_key(g)], "snapshot churn keys");
    }
}

/// Four reader threads scan (forward and reverse) and `get` while one thread writes 200
/// batches. Every iterator, in either mode, sees every batch completed before its creation
/// and nothing not yet begun when it was drained, with keys strictly ordered and each once.
/// Snapshot iterators must moreover show exactly one batch: every static key at the same
/// generation and only that batch's churn key. Weak iterators may mix batches.
pub fn readers_and_writer_threads(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    store
        .write(generation_batch(0))
        .expect("write of generation 0");
    let progress = Progress::default();
    std::thread::scope(|scope| {
        for reader in 0..READERS {
            let progress = &progress;
            scope.spawn(move || read_until_done(store, progress, reader));
        }
        write_generations(store, &progress);
    });
    let last = churn_key(GENERATIONS);
    let last_value = GENERATIONS.to_be_bytes().to_vec();
    assert_eq!(get(store, &last), Some(last_value));
    assert_eq!(get(store, &churn_key(GENERATIONS - 1)), None);
}
