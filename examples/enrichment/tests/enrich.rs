//! `enrichment` on the real broker: every order is enriched with its customer's name from the
//! global store, restored before the first order, and a customer renamed while the
//! application runs is seen by the orders after it.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const BIN: &str = env!("CARGO_BIN_EXE_enrichment");

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Every record of `topic` by key, the last value of each.
fn read_all(bootstrap: &str, topic: &str) -> BTreeMap<String, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("enrichment-reader"))
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions = metadata.topics()[0].partitions().len();
    let mut assignment = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for partition in 0..i32::try_from(partitions).expect("few") {
        let (_, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .expect("watermarks");
        ends.insert(partition, high);
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    let mut at: BTreeMap<i32, i64> = ends.keys().map(|&p| (p, 0)).collect();
    let mut read = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while at.iter().any(|(p, o)| *o < ends[p]) && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            at.insert(message.partition(), message.offset() + 1);
            let text =
                |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
            read.insert(text(message.key()), text(message.payload()));
        }
    }
    read
}

#[test]
fn every_order_is_enriched_with_its_customer_and_a_rename_is_seen_while_running() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap("enrichment") else {
        return;
    };
    let (app, customers, orders, output) = (
        unique("enrichment"),
        unique("customers"),
        unique("orders"),
        unique("enriched"),
    );
    for (topic, partitions) in [(&customers, 2), (&orders, 4), (&output, 4)] {
        statestore_tasks::create_topic(&bootstrap, topic, partitions).expect("topic");
    }
    let produced = Command::new(BIN)
        .args([
            "produce",
            "--bootstrap",
            &bootstrap,
            "--customers",
            &customers,
        ])
        .args(["--orders", &orders, "--count", "1000"])
        .status()
        .expect("produce");
    assert!(produced.success());

    let dir = tempfile::tempdir().expect("dir");
    let mut child = Command::new(BIN)
        .args(["run", "--bootstrap", &bootstrap, "--customers", &customers])
        .args([
            "--orders",
            &orders,
            "--output",
            &output,
            "--application-id",
            &app,
        ])
        .args([
            "--commit-interval-ms",
            "200",
            "--stop-on-stdin-eof",
            "--state-dir",
        ])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .spawn()
        .expect("run");
    let wait_for = |done: &dyn Fn(&BTreeMap<String, String>) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let read = read_all(&bootstrap, &output);
            if done(&read) || Instant::now() > deadline {
                return read;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let enriched = wait_for(&|read| read.len() >= 1000);
    for i in 0..1000 {
        let customer = i % 100;
        assert_eq!(
            enriched.get(&format!("o{i}")),
            Some(&format!("c{customer}:name-{customer}")),
            "order o{i}"
        );
    }

    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("producer");
    producer
        .send(BaseRecord::to(&customers).key("c7").payload("renamed"))
        .map_err(|(err, _)| err)
        .expect("rename");
    producer.flush(Duration::from_secs(30)).expect("flush");
    // The table follows its topic on a thread of its own: orders for c7 keep coming until one
    // sees the new name.
    let round = std::cell::Cell::new(0);
    let renamed = wait_for(&|read| {
        let key = format!("late-{}", round.replace(round.get() + 1));
        producer
            .send(BaseRecord::to(&orders).key(&key).payload("c7"))
            .map_err(|(err, _)| err)
            .expect("order");
        producer.flush(Duration::from_secs(30)).expect("flush");
        read.values().any(|v| v == "c7:renamed")
    });
    assert!(
        renamed.values().any(|v| v == "c7:renamed"),
        "no order saw the renamed customer"
    );
    drop(child.stdin.take());
    assert!(child.wait().expect("exit").success());
}
