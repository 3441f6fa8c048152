//! Restore from Apache Kafka: a changelog topic of `STATESTORE_RESTORE_KEYS` distinct keys
//! (default 1 000 000) in statestore's format (framed records in whole commits of 10 000
//! updates, each closed by a marker, as `LoggedStore` appends them), restored into a fresh
//! store of each backend, with where the time goes. Not a criterion bench: one pass of each
//! case, printed as a table, since a pass at 10M keys takes tens of seconds. Needs
//! `STATESTORE_KAFKA_BOOTSTRAP`; skipped without it. Run by `cargo test --benches` (no
//! `--bench` argument) it restores 2000 keys by default.
//!
//! ```text
//! STATESTORE_KAFKA_BOOTSTRAP=127.0.0.1:9092 STATESTORE_RESTORE_KEYS=10000000 \
//!   cargo bench -p statestore-benches --bench kafka_restore
//! ```
//!
//! Rows, each from a fresh client on the same topic:
//! - `bare consumer`: an rdkafka consumer that reads the partition to its end and drops the
//!   messages (the fetch alone: librdkafka's floor);
//! - `reader`: `KafkaLog::read` from start to end in reads of the restore batch, records
//!   dropped (fetch + decode into `ChangelogRecord`s + the reader's bookkeeping);
//! - `<backend>`: `statestore_changelog::restore` into a fresh store with no checkpoint,
//!   split into `setup` (watermarks, wipe, finding the last commit end), `stream` (reading
//!   and applying, overlapped on two threads; `read` is the reading thread's time inside
//!   `Changelog::read`), and `finish` (the bulk loader's finish, the flush and the
//!   checkpoint write).
//!
//! Environment: `STATESTORE_RESTORE_BACKENDS` (comma-separated, default every backend),
//! `STATESTORE_RESTORE_TOPIC` (reuse a topic this bench filled before; default a new one),
//! `STATESTORE_RESTORE_BATCH_RECORDS` (as in the `restore` bench).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use statestore_benches::restore::batch;
use statestore_benches::{Fixture, backends};
use statestore_changelog::{
    Changelog, ChangelogRecord, Checkpoint, Framing, KafkaConfig, KafkaLog, RestoreListener,
    restore,
};
use store_api::{BatchOp, Result};

/// Updates per commit of the filled changelog.
const COMMIT_RECORDS: usize = 10_000;

fn main() -> Result<()> {
    let Ok(bootstrap) = std::env::var("STATESTORE_KAFKA_BOOTSTRAP") else {
        eprintln!("kafka_restore: STATESTORE_KAFKA_BOOTSTRAP is not set, skipping");
        return Ok(());
    };
    // `cargo test --benches` runs this without `--bench`: a check that it runs, in seconds.
    let benching = std::env::args().any(|arg| arg == "--bench");
    let keys: u64 = env_or(
        "STATESTORE_RESTORE_KEYS",
        if benching { 1_000_000 } else { 2_000 },
    );
    let batch = batch();
    let topic = match std::env::var("STATESTORE_RESTORE_TOPIC") {
        Ok(topic) => topic,
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("bench-kafka-restore-{keys}-{nanos}")
        }
    };
    let log = open(&bootstrap, &topic)?;
    if log.end_offset()? == 0 {
        let started = Instant::now();
        fill(&log, keys)?;
        eprintln!(
            "kafka_restore: filled {topic} with {keys} keys ({} records) in {:.1?}",
            log.end_offset()?,
            started.elapsed()
        );
    }
    let records = log.end_offset()? - log.start_offset()?;
    drop(log);
    println!("kafka_restore: topic {topic}, {records} records, batches of {batch}");
    println!("| case | records | total s | records/s | setup s | stream s | read s | finish s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let (count, elapsed) = bare_consume(&bootstrap, &topic)?;
    row("bare consumer", count, elapsed, None);
    let (count, elapsed) = read_all(&open(&bootstrap, &topic)?, batch)?;
    row("reader", count, elapsed, None);
    let wanted = std::env::var("STATESTORE_RESTORE_BACKENDS").ok();
    for backend in backends() {
        if wanted
            .as_deref()
            .is_some_and(|wanted| !wanted.split(',').any(|name| name == backend))
        {
            continue;
        }
        let timed = TimedLog::new(open(&bootstrap, &topic)?);
        let fixture = Fixture::open(backend)?;
        let checkpoint = Checkpoint::open(fixture.dir().join(".checkpoint"))?;
        let mut phases = Phases::default();
        let started = Instant::now();
        let outcome = restore(fixture.store(), &timed, &checkpoint, batch, &mut phases)?;
        let elapsed = started.elapsed();
        let split = Split {
            setup: phases.start.map_or(elapsed, |at| at - started),
            stream: match (phases.start, phases.last_batch) {
                (Some(start), Some(last)) => last - start,
                _ => Duration::ZERO,
            },
            read: Duration::from_nanos(timed.read_nanos.load(Ordering::Relaxed)),
            finish: match (phases.last_batch, phases.end) {
                (Some(last), Some(end)) => end - last,
                _ => Duration::ZERO,
            },
        };
        row(backend, outcome.records, elapsed, Some(split));
    }
    Ok(())
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn open(bootstrap: &str, topic: &str) -> Result<KafkaLog> {
    let config = KafkaConfig {
        bootstrap_servers: bootstrap.to_string(),
        ..KafkaConfig::default()
    };
    KafkaLog::open_topic(config, topic, 0)
}

/// Appends `keys` distinct keys with 8-byte values, in commits of [`COMMIT_RECORDS`].
fn fill(log: &KafkaLog, keys: u64) -> Result<()> {
    let mut ops = Vec::with_capacity(COMMIT_RECORDS);
    for key in 0..keys {
        ops.push(BatchOp::Put {
            key: format!("key-{key:012}").into_bytes(),
            value: key.to_be_bytes().to_vec(),
        });
        if ops.len() == COMMIT_RECORDS || key + 1 == keys {
            log.append_framed(&ops, Framing::Commit)?;
            ops.clear();
        }
    }
    log.sync()
}

/// Reads partition 0 of `topic` to its high watermark with a bare consumer; the messages read
/// and the time taken.
fn bare_consume(bootstrap: &str, topic: &str) -> Result<(u64, Duration)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "statestore-bench-bare")
        .set("enable.auto.commit", "false")
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .map_err(|err| store_api::Error::Corruption(format!("consumer: {err}")))?;
    let started = Instant::now();
    let (_, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(30))
        .map_err(|err| store_api::Error::Corruption(format!("watermarks: {err}")))?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .and_then(|()| consumer.assign(&assignment))
        .map_err(|err| store_api::Error::Corruption(format!("assign: {err}")))?;
    let mut count = 0u64;
    loop {
        match consumer.poll(Duration::from_secs(30)) {
            Some(Ok(message)) => {
                count += 1;
                if rdkafka::Message::offset(&message) + 1 >= high {
                    break;
                }
            }
            Some(Err(err)) => {
                return Err(store_api::Error::Corruption(format!("poll: {err}")));
            }
            None => break,
        }
    }
    Ok((count, started.elapsed()))
}

/// Reads `log` from start to end in reads of `batch` records; the records and the time.
fn read_all(log: &KafkaLog, batch: usize) -> Result<(u64, Duration)> {
    let started = Instant::now();
    let (mut from, end) = (log.start_offset()?, log.end_offset()?);
    let mut count = 0u64;
    while from < end {
        let records = log.read(from, batch.max(1))?;
        let Some(last) = records.last() else { break };
        from = last.offset + 1;
        count += records.len() as u64;
        std::hint::black_box(records);
    }
    Ok((count, started.elapsed()))
}

struct Split {
    setup: Duration,
    stream: Duration,
    read: Duration,
    finish: Duration,
}

fn row(case: &str, records: u64, elapsed: Duration, split: Option<Split>) {
    let rate = records as f64 / elapsed.as_secs_f64().max(1e-9);
    let secs = |d: Duration| format!("{:.2}", d.as_secs_f64());
    let split = split.map_or_else(
        || "| | | |".to_string(),
        |s| {
            format!(
                "{} | {} | {} | {} |",
                secs(s.setup),
                secs(s.stream),
                secs(s.read),
                secs(s.finish)
            )
        },
    );
    println!(
        "| {case} | {records} | {} | {rate:.0} | {split}",
        secs(elapsed)
    );
}

/// When the restore's phases began and ended.
#[derive(Default)]
struct Phases {
    start: Option<Instant>,
    last_batch: Option<Instant>,
    end: Option<Instant>,
}

impl RestoreListener for Phases {
    fn on_start(&mut self, _topic: &str, _partition: u32, _start: u64, _end: u64) {
        self.start = Some(Instant::now());
    }

    fn on_batch(&mut self, _topic: &str, _partition: u32, _offset: u64, _records: usize) {
        self.last_batch = Some(Instant::now());
    }

    fn on_end(&mut self, _topic: &str, _partition: u32, _total: u64) {
        self.end = Some(Instant::now());
    }
}

/// A log that adds up the time spent in its reads.
#[derive(Debug)]
struct TimedLog {
    log: Arc<KafkaLog>,
    read_nanos: AtomicU64,
}

impl TimedLog {
    fn new(log: KafkaLog) -> TimedLog {
        TimedLog {
            log: Arc::new(log),
            read_nanos: AtomicU64::new(0),
        }
    }
}

impl Changelog for TimedLog {
    fn topic(&self) -> &str {
        self.log.topic()
    }

    fn partition(&self) -> u32 {
        self.log.partition()
    }

    fn max_record_len(&self) -> usize {
        self.log.max_record_len()
    }

    fn append_framed(&self, ops: &[BatchOp], framing: Framing) -> Result<std::ops::Range<u64>> {
        self.log.append_framed(ops, framing)
    }

    fn sync(&self) -> Result<()> {
        self.log.sync()
    }

    fn read(&self, from: u64, max_records: usize) -> Result<Vec<ChangelogRecord>> {
        let started = Instant::now();
        let records = self.log.read(from, max_records);
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.read_nanos.fetch_add(nanos, Ordering::Relaxed);
        records
    }

    fn start_offset(&self) -> Result<u64> {
        self.log.start_offset()
    }

    fn end_offset(&self) -> Result<u64> {
        self.log.end_offset()
    }
}
