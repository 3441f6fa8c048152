//! Shared by the task tests: the broker, unique names, input topics, a word-count processor and
//! a replay of changelog topics.
//!
//! The tests run against the broker named by `STATESTORE_KAFKA_BOOTSTRAP` (start one with
//! `export STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)`); without it they pass
//! without running, after one SKIP line (see `statestore_test_support`).

#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different part of this module"
)]

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use statestore_changelog::{Changelog, CommitReader, EPOCH_KEY, KafkaConfig, KafkaLog};
use statestore_tasks::{POSITION_KEY, ProcessorContext, StoreSpec, TasksConfig};
use store_api::BatchOp;

pub use statestore_test_support::{announce, kafka_bootstrap as bootstrap};

pub mod failing;

/// A name no other test run has used.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// A word-count configuration on `input`, with test-sized timeouts.
pub fn config(bootstrap: &str, app: &str, input: &str, state_dir: &std::path::Path) -> TasksConfig {
    TasksConfig {
        application_id: app.to_owned(),
        state_dir: state_dir.to_owned(),
        bootstrap_servers: bootstrap.to_owned(),
        input_topics: vec![input.to_owned()],
        stores: vec![StoreSpec::new("counts", "redb")],
        commit_interval_ms: 500,
        session_timeout_ms: 6_000,
        heartbeat_interval_ms: 1_000,
        request_timeout_ms: 10_000,
        ..TasksConfig::default()
    }
}

/// Counts the record's key in store `counts`.
pub fn count_word(ctx: &mut ProcessorContext<'_>) -> store_api::Result<()> {
    let word = ctx.key().unwrap_or_default().to_vec();
    let counts = ctx.store("counts")?;
    let count = counts.get(&word)?.map_or(0, |v| decode(&v));
    counts.put(&word, &(count + 1).to_be_bytes())
}

pub fn decode(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().expect("8-byte count"))
}

/// Creates input topic `topic` with `partitions` partitions.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    statestore_tasks::create_topic(bootstrap, topic, partitions).expect("create topic");
}

/// Creates the compacted changelog topic of store `counts` of `app` with `partitions`.
pub fn create_changelog(bootstrap: &str, app: &str, partitions: u32) {
    let config = KafkaConfig {
        bootstrap_servers: bootstrap.to_owned(),
        application_id: app.to_owned(),
        store_name: "counts".to_owned(),
        partitions,
        ..KafkaConfig::default()
    };
    drop(KafkaLog::open(config, 0).expect("changelog topic"));
}

/// The word of record `i`: 97 distinct words, so counts are uneven.
pub fn word(i: u64) -> String {
    format!("w{}", (i * 7919) % 97)
}

/// Produces records `range` (key = value = [`word`]) to `topic`, each word to partition
/// `hash % partitions`, and returns the expected count per word.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    partitions: u32,
    range: std::ops::Range<u64>,
) -> BTreeMap<String, u64> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut expected = BTreeMap::new();
    for i in range {
        let word = word(i);
        let partition = partition_of(&word, partitions);
        *expected.entry(word.clone()).or_insert(0) += 1;
        let record = BaseRecord::to(topic)
            .key(word.as_bytes())
            .payload(word.as_bytes())
            .partition(partition);
        send_waiting(&producer, record);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    expected
}

/// Writes `records` records (record `i` keyed and valued [`word`]`(i)`) to `topic` with the
/// client `properties` of a secured cluster, partitioned by librdkafka's default partitioner.
pub fn produce_words_with(
    bootstrap: &str,
    properties: &BTreeMap<String, String>,
    topic: &str,
    records: u64,
) {
    let mut producer = ClientConfig::new();
    for (key, value) in properties {
        producer.set(key, value);
    }
    let producer: BaseProducer = producer
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for i in 0..records {
        let word = word(i);
        send_waiting(
            &producer,
            BaseRecord::to(topic)
                .key(word.as_bytes())
                .payload(word.as_bytes()),
        );
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Queues `record` on `producer`, serving delivery reports while its queue is full.
pub fn send_waiting(producer: &BaseProducer, mut record: BaseRecord<'_, [u8], [u8]>) {
    while let Err((_, back)) = producer.send(record) {
        producer.poll(Duration::from_millis(10));
        record = back;
    }
}

pub fn partition_of(word: &str, partitions: u32) -> i32 {
    let hash = word
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    i32::try_from(hash % partitions).expect("small")
}

/// A store's content: each key's value.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The state that whole commits of partition `partition` of changelog `topic` from offset
/// `from` up to offset `to` (default: the end) build, and the number of updates they hold
/// (commit markers and a torn tail are not replayed, as a restore does not).
pub fn replay_from(
    bootstrap: &str,
    topic: &str,
    partition: u32,
    from: Option<u64>,
    to: Option<u64>,
) -> (BTreeMap<Vec<u8>, Vec<u8>>, u64) {
    try_replay_from(bootstrap, topic, partition, from, to).expect("replaying a changelog")
}

/// [`replay_from`], with the error of a log that cannot be read (yet).
pub fn try_replay_from(
    bootstrap: &str,
    topic: &str,
    partition: u32,
    from: Option<u64>,
    to: Option<u64>,
) -> store_api::Result<(Model, u64)> {
    try_replay_with(bootstrap, &BTreeMap::new(), topic, partition, from, to)
}

/// [`try_replay_from`] with the client `properties` of a secured cluster.
pub fn try_replay_with(
    bootstrap: &str,
    properties: &BTreeMap<String, String>,
    topic: &str,
    partition: u32,
    from: Option<u64>,
    to: Option<u64>,
) -> store_api::Result<(Model, u64)> {
    // Opening a log creates a missing topic: one the application has yet to create (with
    // its input's partitions) is waited for instead.
    if !topic_exists(bootstrap, properties, topic) {
        return Err(store_api::Error::invalid(format!(
            "topic {topic} does not exist yet"
        )));
    }
    let config = KafkaConfig {
        bootstrap_servers: bootstrap.to_owned(),
        admin_timeout_ms: 10_000,
        properties: properties.clone(),
        ..KafkaConfig::default()
    };
    let log = KafkaLog::open_topic(config, topic, partition)?;
    let from = match from {
        Some(from) => from,
        None => log.start_offset()?,
    };
    let end = match to {
        Some(to) => to,
        None => log.end_offset()?,
    };
    let mut reader = CommitReader::new(&log, from);
    let mut model = BTreeMap::new();
    let mut updates = 0;
    while reader.position() < end {
        // Never past `end`, so a later writer's commits are not counted.
        let window = usize::try_from(end - reader.position()).map_or(1000, |w| w.min(1000));
        let released = reader.read(window)?;
        if released.last_read.is_none() {
            break;
        }
        for op in released.ops {
            updates += 1;
            match op {
                BatchOp::Put { key, value } => {
                    model.insert(key, value);
                }
                BatchOp::Delete { key } => {
                    model.remove(&key);
                }
            }
        }
    }
    Ok((model, updates))
}

/// Whether the brokers know `topic` (a metadata request, which creates nothing).
pub fn topic_exists(bootstrap: &str, properties: &BTreeMap<String, String>, topic: &str) -> bool {
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    let Ok(consumer) = config
        .set("bootstrap.servers", bootstrap)
        .set("allow.auto.create.topics", "false")
        .create::<BaseConsumer>()
    else {
        return false;
    };
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .is_ok_and(|metadata| {
            metadata
                .topics()
                .iter()
                .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        })
}

/// [`replay_from`] the start of the log.
pub fn replay(bootstrap: &str, topic: &str, partition: u32) -> (BTreeMap<Vec<u8>, Vec<u8>>, u64) {
    replay_from(bootstrap, topic, partition, None, None)
}

/// The word counts of a replayed changelog partition, without the position key.
pub fn counts_of(model: &BTreeMap<Vec<u8>, Vec<u8>>) -> BTreeMap<String, u64> {
    model
        .iter()
        .filter(|(key, _)| key.as_slice() != POSITION_KEY && key.as_slice() != EPOCH_KEY)
        .map(|(key, value)| (String::from_utf8_lossy(key).into_owned(), decode(value)))
        .collect()
}

/// Sums the counts of every partition of `<app>-counts-changelog`.
pub fn changelog_counts(bootstrap: &str, app: &str, partitions: u32) -> BTreeMap<String, u64> {
    try_changelog_counts(bootstrap, app, partitions).expect("reading the changelog counts")
}

/// [`changelog_counts`], with the error of a changelog that cannot be read (yet): for checks
/// polled while brokers or the application's topics may not answer.
pub fn try_changelog_counts(
    bootstrap: &str,
    app: &str,
    partitions: u32,
) -> store_api::Result<BTreeMap<String, u64>> {
    try_changelog_counts_with(bootstrap, &BTreeMap::new(), app, partitions)
}

/// [`try_changelog_counts`] with the client `properties` of a secured cluster.
pub fn try_changelog_counts_with(
    bootstrap: &str,
    properties: &BTreeMap<String, String>,
    app: &str,
    partitions: u32,
) -> store_api::Result<BTreeMap<String, u64>> {
    let topic = format!("{app}-counts-changelog");
    let mut total = BTreeMap::new();
    for partition in 0..partitions {
        let (model, _) = try_replay_with(bootstrap, properties, &topic, partition, None, None)?;
        for (word, count) in counts_of(&model) {
            *total.entry(word).or_insert(0) += count;
        }
    }
    Ok(total)
}

/// Polls until `done` or `timeout`.
pub fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// A record read back: its key, value and headers, as text.
pub type Read = (Option<String>, Option<String>, Vec<(String, String)>);

/// Every record of `topic`, read from the start of each partition to its end.
pub fn read_topic(bootstrap: &str, topic: &str) -> Vec<Read> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    let partitions = partition_count(&consumer, topic);
    for partition in 0..partitions {
        let partition = i32::try_from(partition).expect("small");
        let (_, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .expect("watermarks");
        ends.insert(partition, high);
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    let mut read = Vec::new();
    let mut at: BTreeMap<i32, i64> = ends.keys().map(|&p| (p, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while at.iter().any(|(p, &o)| o < ends[p]) && Instant::now() < deadline {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        at.insert(message.partition(), message.offset() + 1);
        let text = |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8_lossy(b).into_owned());
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| (h.key.to_owned(), text(h.value).unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        read.push((text(message.key()), text(message.payload()), headers));
    }
    read
}

/// The number of partitions of `topic`, as `consumer` fetches them.
fn partition_count(consumer: &BaseConsumer, topic: &str) -> usize {
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len())
}

/// The value of every record of `topic` a `read_committed` reader sees: the records of
/// committed transactions only, each partition read from its start to its last stable
/// offset (the end of the last transaction decided). Read once every transaction writing to
/// it committed or aborted, or it stops at the first one still open.
pub fn read_committed_values(bootstrap: &str, topic: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("committed-reader"))
        .set("isolation.level", "read_committed")
        // A partition's end is where its committed records end: the commit markers after
        // them are never handed over, so the reader learns the end from an end-of-partition
        // event, not from an offset.
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let partitions = partition_count(&consumer, topic);
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        let partition = i32::try_from(partition).expect("small");
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    let mut at_end = vec![false; partitions];
    let mut values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !at_end.iter().all(|&done| done) {
        assert!(
            Instant::now() < deadline,
            "{topic} not read to its end in time"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                let partition = usize::try_from(message.partition()).expect("partition");
                at_end[partition] = false;
                if let Some(value) = message.payload() {
                    values.push(String::from_utf8_lossy(value).into_owned());
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(partition))) => {
                at_end[usize::try_from(partition).expect("partition")] = true;
            }
            Some(Err(err)) => eprintln!("reading {topic}: {err}"),
            None => {}
        }
    }
    values
}

/// The Prometheus recorder of this test binary, installed at the first call: tasks opened
/// before it record nothing.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        // Histograms with buckets: their `_count` counts every sample.
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0])
            .expect("buckets")
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).expect("the only recorder");
        handle
    })
}

/// The value of metric `name` of `app`'s task `0_<partition>` (and `more` labels) in the
/// Prometheus text, if it was recorded.
pub fn metric(app: &str, name: &str, partition: u32, more: &str) -> Option<f64> {
    let app_label = format!("application=\"{app}\"");
    let task_label = format!("task=\"0_{partition}\"");
    prometheus().render().lines().find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        let matches = key.starts_with(&format!("{name}{{"))
            && key.contains(&app_label)
            && key.contains(&task_label)
            && key.contains(more);
        matches.then(|| value.parse().ok()).flatten()
    })
}

/// The sum of metric `name` over every task of `app` in the Prometheus text.
pub fn metric_sum(app: &str, name: &str) -> f64 {
    let app_label = format!("application=\"{app}\"");
    prometheus()
        .render()
        .lines()
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            let matches = key.starts_with(&format!("{name}{{")) && key.contains(&app_label);
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}
