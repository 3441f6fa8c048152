//! The cost of `MeteredStore` on `get`, the cheapest and most frequent store call, on the
//! memory backend (where a call is shortest, so the overhead shows most) and on redb.
//!
//! `cargo bench -p statestore-operator-stores --bench metered -- --quick` runs it in about
//! 15 s: 10 samples over 1 s each (5 s without `--quick`).
//!
//! Time is the bench thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: on a shared
//! machine, the time other processes hold the core would otherwise swamp differences of a few
//! nanoseconds. What they do to the caches still shows.
//! Group `metered_get_<backend>`, ids:
//! - `bare`: the backend's store;
//! - `metered-no-recorder`: a `MeteredStore` made while no recorder is installed, which
//!   records nothing;
//! - `metered-prometheus-counts`: handles of a Prometheus recorder, `RecordingLevel::Counts`
//!   (the floor with a recorder: one atomic add per call);
//! - `metered-prometheus`: the same at the default level (counts, latency of one call in 64);
//! - `metered-prometheus-every`: `RecordingLevel::EveryLatency`, every call timed.
//!
//! Measured: a `get` of a random present key (16-byte keys, 100-byte values) through
//! `&dyn KeyValueStore`. Not measured: rendering the Prometheus text, or contention between
//! threads on the recorder's atomics (one thread). The Prometheus recorder keeps every latency
//! until it renders, so a full-length run of `metered-prometheus-every` holds a few hundred MB.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use metrics_exporter_prometheus::PrometheusBuilder;
use statestore_operator_stores::{MeteredStore, RecordingLevel};
use store_api::{BackendFactory, KeyValueStore, WriteBatch};

const KEYS: u64 = 10_000;

fn key(index: u64) -> [u8; 16] {
    let mut key = [b'k'; 16];
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

fn preload(store: &dyn KeyValueStore) {
    let mut batch = WriteBatch::new();
    for index in 0..KEYS {
        batch.put(key(index).to_vec(), vec![7_u8; 100]);
    }
    store.write(batch).expect("preload");
    store.flush().expect("flush");
}

fn open(backend: &str, dir: &Path) -> Arc<dyn KeyValueStore> {
    let options = serde_json::Value::Null;
    let store = match backend {
        "memory" => statestore_memory::MemoryFactory.open(dir, &options),
        _ => statestore_redb::RedbFactory.open(dir, &options),
    };
    Arc::from(store.expect("open the store"))
}

/// The CPU time of the calling thread.
struct ThreadCpuTime;

/// Only for its formatter, which formats nanoseconds as durations.
static WALL_TIME: WallTime = WallTime;

fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec.unsigned_abs(), now.tv_nsec.unsigned_abs() as u32)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu()
    }

    fn end(&self, start: Duration) -> Duration {
        thread_cpu().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        WALL_TIME.formatter()
    }
}

/// 10 samples over 5 s, or over 1 s under `--quick`.
fn config() -> Criterion<ThreadCpuTime> {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let measurement = Duration::from_secs(if quick { 1 } else { 5 });
    Criterion::default()
        .with_measurement(ThreadCpuTime)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(measurement)
}

fn metered_get(c: &mut Criterion<ThreadCpuTime>) {
    let recorder = PrometheusBuilder::new().build_recorder();
    for backend in ["memory", "redb"] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let bare = open(backend, dir.path());
        preload(bare.as_ref());
        let unrecorded = MeteredStore::new(Arc::clone(&bare), "bench");
        assert_eq!(
            unrecorded.recording_level(),
            None,
            "no recorder is installed"
        );
        // Handles registered under the recorder stay live after the closure returns.
        let recorded = |name: &str, level: RecordingLevel| {
            metrics::with_local_recorder(&recorder, || {
                MeteredStore::new(Arc::clone(&bare), name).with_recording_level(level)
            })
        };
        let counts = recorded("bench-counts", RecordingLevel::Counts);
        let default = recorded("bench", RecordingLevel::default());
        let every = recorded("bench-every", RecordingLevel::EveryLatency);
        let targets: [(&str, &dyn KeyValueStore); 5] = [
            ("bare", bare.as_ref()),
            ("metered-no-recorder", &unrecorded),
            ("metered-prometheus-counts", &counts),
            ("metered-prometheus", &default),
            ("metered-prometheus-every", &every),
        ];
        let mut group = c.benchmark_group(format!("metered_get_{backend}"));
        group.throughput(Throughput::Elements(1));
        for (id, store) in targets {
            let mut next = 0x9E37_79B9_7F4A_7C15_u64;
            group.bench_function(BenchmarkId::from_parameter(id), |b| {
                b.iter(|| {
                    // A cheap xorshift, so every variant reads the same sequence of keys.
                    next ^= next << 13;
                    next ^= next >> 7;
                    next ^= next << 17;
                    store.get(&key(next % KEYS)).expect("get")
                });
            });
        }
        group.finish();
    }
    let rendered = recorder.handle().render();
    assert!(
        rendered.contains("statestore_operations_total"),
        "the recorder saw the metered calls"
    );
}

criterion_group! {
    name = benches;
    config = config();
    targets = metered_get
}
criterion_main!(benches);
