//! The window store's `fetch` and its segment expiry, on memory and RocksDB (or the backends in
//! `STATESTORE_WINDOW_BENCH_BACKENDS`, comma-separated).
//!
//! Group `window_fetch`: one key's `WINDOWS` windows (100, or `STATESTORE_WINDOW_BENCH_WINDOWS`)
//! among `KEYS` keys (1000, or `STATESTORE_WINDOW_BENCH_KEYS`), one-minute windows in segments
//! of ten minutes: `<backend>/window_store` is `WindowStore::fetch` over every live segment;
//! `<backend>/raw_range` reads the same number of entries as one range of `key | start` keys
//! in the same engine, the floor any layout pays. Throughput in windows.
//!
//! Group `window_expiry`: steady state of `SEGMENTS` live segments (5) of `PER_SEGMENT` records
//! each (2000, or `STATESTORE_WINDOW_BENCH_PER_SEGMENT`). Each iteration writes a new segment's
//! records (not timed), then times what expires the oldest segment:
//! `<backend>/segment_drop` is the window store's put that moves the stream time (the range of
//! the expired segment and one batch of its deletes); `<backend>/scan_and_delete` does the same
//! for a store without segments (`key | start` keys): a scan of every record to find the expired
//! ones and one batch of their deletes. Throughput in expired records.

mod common;

use std::hint::black_box;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use statestore_operator_stores::window::{WindowStore, WindowStoreConfig};
use store_api::{KeyValueStore, WriteBatch};
use tempfile::TempDir;

const MINUTE: i64 = 60_000;
const SEGMENT: i64 = 10 * MINUTE;
const SEGMENTS: i64 = 5;

fn env(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn backends() -> Vec<String> {
    std::env::var("STATESTORE_WINDOW_BENCH_BACKENDS")
        .unwrap_or_else(|_| "memory,rocksdb".into())
        .split(',')
        .map(str::to_string)
        .collect()
}

/// A store of `backend` in a directory that outlives it.
struct Opened {
    store: Arc<dyn KeyValueStore>,
    _dir: TempDir,
}

fn open(backend: &str) -> Opened {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = statestore_benches::open_store(backend, &dir.path().join("store")).expect("open");
    Opened {
        store: Arc::from(store),
        _dir: dir,
    }
}

fn key(n: i64) -> Vec<u8> {
    format!("key-{n:06}").into_bytes()
}

/// `key | start` with the start big-endian and sign-flipped: a layout without segments.
fn raw_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut out = key.to_vec();
    out.extend_from_slice(&((start as u64) ^ (1 << 63)).to_be_bytes());
    out
}

fn fetch(c: &mut Criterion) {
    let (keys, windows) = (
        env("STATESTORE_WINDOW_BENCH_KEYS", 1000),
        env("STATESTORE_WINDOW_BENCH_WINDOWS", 100),
    );
    let mut group = c.benchmark_group("window_fetch");
    group.throughput(Throughput::Elements(windows as u64));
    let value = [7_u8; 16];
    for backend in backends() {
        let segmented = open(&backend);
        let config = WindowStoreConfig::new(windows * MINUTE).with_segment_interval(SEGMENT);
        let store = WindowStore::open(Arc::clone(&segmented.store), config).expect("window store");
        let raw = open(&backend);
        for w in 0..windows {
            let mut batch = WriteBatch::new();
            for k in 0..keys {
                let _ = store.put(&key(k), &value, w * MINUTE).expect("put");
                batch.put(raw_key(&key(k), w * MINUTE), value.to_vec());
            }
            raw.store.write(batch).expect("write");
        }
        let probe = key(keys / 2);
        group.bench_function(BenchmarkId::new(&backend, "window_store"), |b| {
            b.iter(|| {
                let found = store.fetch(&probe, 0, i64::MAX).expect("fetch").count();
                assert_eq!(found as i64, windows);
            });
        });
        let (from, to) = (raw_key(&probe, 0), raw_key(&probe, i64::MAX));
        group.bench_function(BenchmarkId::new(&backend, "raw_range"), |b| {
            b.iter(|| {
                let range = raw
                    .store
                    .range(Bound::Included(&from), Bound::Included(&to));
                let found = range.expect("range").count();
                assert_eq!(found as i64, windows);
            });
        });
    }
    group.finish();
}

/// The window store kept at `SEGMENTS` live segments; each call adds a segment of records
/// and times the put that expires the oldest.
struct Segmented {
    store: WindowStore,
    next_segment: i64,
    _opened: Opened,
}

impl Segmented {
    fn new(backend: &str, per_segment: i64) -> Self {
        let opened = open(backend);
        let config = WindowStoreConfig::new(SEGMENTS * SEGMENT).with_segment_interval(SEGMENT);
        let store = WindowStore::open(Arc::clone(&opened.store), config).expect("window store");
        let mut this = Segmented {
            store,
            next_segment: 0,
            _opened: opened,
        };
        for _ in 0..SEGMENTS {
            this.fill(per_segment);
        }
        this
    }

    /// Writes a segment's records at one-minute starts, without moving the stream time past
    /// the segment (the last put is its first minute).
    fn fill(&mut self, per_segment: i64) {
        let base = self.next_segment * SEGMENT;
        for n in (0..per_segment).rev() {
            let _ = self
                .store
                .put(&key(n), b"v", base + (n % 10) * MINUTE)
                .expect("put");
        }
        self.next_segment += 1;
    }

    fn expire_one(&self) -> Duration {
        let start = Instant::now();
        // The first minute of the next segment moves the stream time one segment on.
        let tick = self.next_segment * SEGMENT + SEGMENT - 1;
        let _ = black_box(self.store.put(b"tick", b"", tick).expect("tick"));
        start.elapsed()
    }
}

/// The same records without segments: expiry scans them all.
struct Unsegmented {
    opened: Opened,
    next_segment: i64,
}

impl Unsegmented {
    fn fill(&mut self, per_segment: i64) {
        let base = self.next_segment * SEGMENT;
        let mut batch = WriteBatch::new();
        for n in 0..per_segment {
            batch.put(raw_key(&key(n), base + (n % 10) * MINUTE), b"v".to_vec());
        }
        self.opened.store.write(batch).expect("write");
        self.next_segment += 1;
    }

    fn expire_one(&self) -> Duration {
        let start = Instant::now();
        // As the window store's tick: the oldest of the `SEGMENTS` segments expires.
        let cutoff = (self.next_segment - SEGMENTS + 1) * SEGMENT;
        let mut batch = WriteBatch::new();
        let all = self.opened.store.range(Bound::Unbounded, Bound::Unbounded);
        for entry in all.expect("scan") {
            let (raw, _) = entry.expect("entry");
            let ts = raw[raw.len() - 8..].try_into().map(u64::from_be_bytes);
            if ((ts.expect("8 bytes") ^ (1 << 63)) as i64) < cutoff {
                batch.delete(raw);
            }
        }
        self.opened.store.write(batch).expect("delete");
        start.elapsed()
    }
}

fn expiry(c: &mut Criterion) {
    let per_segment = env("STATESTORE_WINDOW_BENCH_PER_SEGMENT", 2000);
    let mut group = c.benchmark_group("window_expiry");
    group.throughput(Throughput::Elements(per_segment as u64));
    for backend in backends() {
        let mut segmented = Segmented::new(&backend, per_segment);
        group.bench_function(BenchmarkId::new(&backend, "segment_drop"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let took = segmented.expire_one();
                        segmented.fill(per_segment);
                        took
                    })
                    .sum()
            });
        });
        let mut unsegmented = Unsegmented {
            opened: open(&backend),
            next_segment: 0,
        };
        for _ in 0..SEGMENTS {
            unsegmented.fill(per_segment);
        }
        group.bench_function(BenchmarkId::new(&backend, "scan_and_delete"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let took = unsegmented.expire_one();
                        unsegmented.fill(per_segment);
                        took
                    })
                    .sum()
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = fetch, expiry
}
criterion_main!(benches);
