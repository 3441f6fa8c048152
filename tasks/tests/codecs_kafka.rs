//! Input written by Apache Kafka's own Java producer with every `compression.type`, an input
//! topic the broker compresses with zstd, and changelog topics compressed with zstd: each is
//! counted exactly, and each changelog replays to the same counts.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use statestore_changelog::kafka_util::create_retrying;
use statestore_tasks::{Application, TasksConfig};
use statestore_test_support::java_produce;
use support::*;

const PARTITIONS: u32 = 4;
const RECORDS: u64 = 2_000;

/// Creates `topic` with `PARTITIONS` partitions and topic config `compression.type`.
fn create_compressed_topic(bootstrap: &str, topic: &str, codec: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let new_topic = NewTopic::new(
        topic,
        i32::try_from(PARTITIONS).expect("small"),
        TopicReplication::Fixed(-1),
    )
    .set("compression.type", codec);
    create_retrying(
        &admin,
        &new_topic,
        "creating a test topic",
        Duration::from_secs(30),
    )
    .expect("topic created");
}

/// The partition count of `topic` in the brokers' metadata (0 while it does not exist), asked
/// by a consumer, which never creates a topic it asks about.
fn partitions(bootstrap: &str, topic: &str) -> u32 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("consumer");
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .ok()
        .and_then(|metadata| {
            let found = metadata.topics().first()?;
            found.error().is_none().then(|| found.partitions().len())
        })
        .map_or(0, |count| u32::try_from(count).expect("small"))
}

/// The records and counts of one input: [`word`]s as keys and values.
fn words() -> (Vec<(String, String)>, BTreeMap<String, u64>) {
    let mut expected = BTreeMap::new();
    let records = (0..RECORDS)
        .map(|i| {
            let word = word(i);
            *expected.entry(word.clone()).or_insert(0) += 1;
            (word.clone(), word)
        })
        .collect();
    (records, expected)
}

/// Runs the word count on `input` with a changelog compressed with zstd until the changelog
/// holds `expected`, and fails after two minutes with what it holds.
fn counts_exactly(bootstrap: &str, input: &str, expected: &BTreeMap<String, u64>) {
    let app = unique("codecs");
    let dir = tempfile::tempdir().expect("dir");
    let mut config: TasksConfig = config(bootstrap, &app, input, dir.path());
    config.stores[0]
        .topic_properties
        .insert("compression.type".into(), "zstd".into());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let instance = thread::spawn(move || -> store_api::Result<()> {
        let mut app = Application::new(config)?;
        while !stop2.load(Ordering::Relaxed) {
            app.poll(Duration::from_millis(50), &mut count_word)?;
        }
        app.close()
    });
    // Reading a changelog topic before the application created it would create it, with
    // one partition.
    let changelog = format!("{app}-counts-changelog");
    let created = wait_until(Duration::from_secs(60), || {
        instance.is_finished() || partitions(bootstrap, &changelog) == PARTITIONS
    });
    assert!(created, "{changelog} was not created");
    let mut last = BTreeMap::new();
    let exact = wait_until(Duration::from_secs(120), || {
        if instance.is_finished() {
            return true;
        }
        last = try_changelog_counts(bootstrap, &app, PARTITIONS).unwrap_or_default();
        &last == expected
    });
    stop.store(true, Ordering::Relaxed);
    instance
        .join()
        .expect("instance thread")
        .expect("the application ran without an error");
    assert!(
        exact,
        "input {input}: the changelog holds {} words, {} records, of {} and {RECORDS}",
        last.len(),
        last.values().sum::<u64>(),
        expected.len()
    );
    assert_eq!(&changelog_counts(bootstrap, &app, PARTITIONS), expected);
}

#[test]
fn input_from_the_java_producer_is_counted_exactly_with_every_codec() {
    let Some(bootstrap) =
        bootstrap("input_from_the_java_producer_is_counted_exactly_with_every_codec")
    else {
        return;
    };
    let (records, expected) = words();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let input = unique(&format!("codecs-{codec}-input"));
        create_topic(&bootstrap, &input, 4);
        java_produce(&bootstrap, &input, codec, &records);
        counts_exactly(&bootstrap, &input, &expected);
    }
}

#[test]
fn a_topic_the_broker_compresses_with_zstd_is_counted_exactly() {
    let Some(bootstrap) = bootstrap("a_topic_the_broker_compresses_with_zstd_is_counted_exactly")
    else {
        return;
    };
    let input = unique("codecs-broker-zstd-input");
    create_compressed_topic(&bootstrap, &input, "zstd");
    let (records, expected) = words();
    java_produce(&bootstrap, &input, "none", &records);
    counts_exactly(&bootstrap, &input, &expected);
}
