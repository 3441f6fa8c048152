//! Changelog overhead: a store written directly against the same store behind a
//! `LoggedStore`, on the embedded file log and, when `STATESTORE_KAFKA_BOOTSTRAP` names a
//! broker, on Kafka. Groups `changelog_put_random` and `changelog_ycsb_a`, ids
//! `<backend>/unlogged`, `<backend>/logged-file`, `<backend>/logged-kafka`.
//!
//! Measured: one iteration is [`COMMIT_EVERY`] operations; on the logged sides it ends with a
//! commit (append the buffered writes to the log and sync it, write them to the store as one
//! batch and flush it, rewrite the checkpoint). The unlogged side never syncs, as
//! `put_random` specifies. A commit every 10 000 writes (1.7 MB of `put_random` data) is far
//! more often than Kafka Streams' default commit interval of 30 s at these rates, so the
//! overhead shown is an upper bound for a default configuration.
//!
//! Not measured: opening stores and logs, the preload (YCSB A's records go through the
//! `LoggedStore` and its log, untimed, because a `LoggedStore` wipes a store its log does not
//! vouch for). YCSB A runs over at most [`MAX_YCSB_RECORDS`] records here, so the preload
//! through a loopback broker stays short; both sides use the same records.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use statestore_benches::{ApiTarget, Driver, Fixture, Scale, Target, Workload, backends, prepare};
use statestore_changelog::{
    Changelog, Checkpoint, FileLog, FileLogConfig, KafkaConfig, KafkaLog, LoggedStore,
    LoggedStoreConfig,
};
use store_api::KeyValueStore;

/// Operations per iteration, and per commit on the logged sides.
const COMMIT_EVERY: u64 = 10_000;
/// The largest YCSB record count used here.
const MAX_YCSB_RECORDS: u64 = 100_000;

fn scale() -> Scale {
    let mut scale = common::scale();
    scale.ycsb_records = scale.ycsb_records.min(MAX_YCSB_RECORDS);
    scale
}

/// Times `iters` rounds of [`COMMIT_EVERY`] steps, each followed by a commit when `commit`.
fn time_rounds<T: Target + ?Sized>(
    driver: &mut Driver,
    target: &T,
    iters: u64,
    commit: bool,
) -> Duration {
    (0..iters)
        .map(|_| {
            let mut elapsed = common::time_steps(driver, target, COMMIT_EVERY);
            if commit {
                let start = std::time::Instant::now();
                target.flush().expect("commit");
                elapsed += start.elapsed();
            }
            elapsed
        })
        .sum()
}

fn bench<T: Target + ?Sized>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    target: &T,
    workload: Workload,
    commit: bool,
) {
    prepare(target, workload, scale(), |_| {}).expect("preload");
    let mut driver = Driver::new(workload, scale());
    group.bench_function(id, |b| {
        b.iter_custom(|iters| time_rounds(&mut driver, target, iters, commit))
    });
}

fn logged(store: Arc<dyn KeyValueStore>, log: Arc<dyn Changelog>, dir: &Path) -> LoggedStore {
    let checkpoint = Arc::new(Checkpoint::open(dir.join(".checkpoint")).expect("checkpoint"));
    LoggedStore::open(store, log, checkpoint, LoggedStoreConfig::default()).expect("logged store")
}

fn kafka_log(bootstrap: &str, workload: Workload, backend: &str) -> Arc<dyn Changelog> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let config = KafkaConfig {
        bootstrap_servers: bootstrap.to_string(),
        application_id: format!("statestore-bench-{nanos}"),
        store_name: format!("{backend}-{workload}"),
        ..KafkaConfig::default()
    };
    Arc::new(KafkaLog::open(config, 0).expect("kafka log"))
}

fn backend_cases(
    group: &mut BenchmarkGroup<'_, WallTime>,
    backend: &str,
    workload: Workload,
    kafka: Option<&str>,
) {
    let plain = Fixture::open(backend).expect("open store");
    bench(
        group,
        BenchmarkId::new(backend, "unlogged"),
        &plain.target(),
        workload,
        false,
    );
    drop(plain);

    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::from(
        statestore_benches::open_store(backend, &dir.path().join("store")).expect("store"),
    );
    let topic = format!("bench-{backend}-{workload}");
    let log = FileLog::open(&dir.path().join("log"), &topic, 0, FileLogConfig::default())
        .expect("file log");
    let store = logged(store, Arc::new(log), dir.path());
    bench(
        group,
        BenchmarkId::new(backend, "logged-file"),
        &ApiTarget(&store),
        workload,
        true,
    );
    drop(store);

    if let Some(bootstrap) = kafka {
        let dir = tempfile::tempdir().expect("tempdir");
        let inner = Arc::from(
            statestore_benches::open_store(backend, &dir.path().join("store")).expect("store"),
        );
        let store = logged(inner, kafka_log(bootstrap, workload, backend), dir.path());
        bench(
            group,
            BenchmarkId::new(backend, "logged-kafka"),
            &ApiTarget(&store),
            workload,
            true,
        );
    }
}

fn changelog(c: &mut Criterion) {
    let kafka = std::env::var("STATESTORE_KAFKA_BOOTSTRAP")
        .ok()
        .filter(|b| !b.is_empty());
    if kafka.is_none() {
        println!(
            "changelog: STATESTORE_KAFKA_BOOTSTRAP is not set, skipping the logged-kafka cases"
        );
    }
    for workload in [Workload::PutRandom, Workload::YcsbA] {
        let mut group = c.benchmark_group(format!("changelog_{workload}"));
        group.throughput(Throughput::Elements(COMMIT_EVERY));
        for backend in backends() {
            backend_cases(&mut group, backend, workload, kafka.as_deref());
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = changelog
}
criterion_main!(benches);
