//! Reading an output topic whole, `read_committed`, as a consumer of the application's
//! results would.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of this module"
)]

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::instances::PARTITIONS;
use super::unique;

/// The end offset of every partition of `topic` (under `read_committed`, the last stable
/// offsets).
pub fn ends(consumer: &BaseConsumer, topic: &str) -> Vec<i64> {
    (0..PARTITIONS)
        .map(|p| {
            let (_, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("watermarks");
            high
        })
        .collect()
}

/// A `read_committed` consumer in a group of its own, reporting partition ends.
pub fn reader(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("eos-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader")
}

/// Calls `each` with every committed record of `topic`, from the start of each partition to
/// its end when the read began, in each partition's order.
pub fn read_committed(bootstrap: &str, topic: &str, mut each: impl FnMut(&BorrowedMessage<'_>)) {
    let consumer = reader(bootstrap);
    let ends = ends(&consumer, topic);
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut at_end: Vec<bool> = ends.iter().map(|&end| end == 0).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !at_end.iter().all(|&done| done) {
        assert!(Instant::now() < deadline, "{topic} not read in time");
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(message)) => {
                each(&message);
                let p = usize::try_from(message.partition()).expect("partition");
                at_end[p] |= message.offset() + 1 >= ends[p];
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end[usize::try_from(p).expect("partition")] = true;
            }
            Some(Err(err)) => eprintln!("reading {topic}: {err}"),
            None => {}
        }
    }
}
