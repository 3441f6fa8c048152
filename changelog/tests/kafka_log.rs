//! `KafkaLog` against a real broker: topic creation, tombstones, the partition check, oversized
//! records, throughput, and a broker killed and restarted under an appending log.
#![cfg(feature = "kafka")]

mod kafka_support;

use std::time::{Duration, Instant};

use statestore_changelog::{Changelog, Framing, KafkaConfig, KafkaLog, RecordKind};
use store_api::{BatchOp, ErrorKind};

fn put(key: &str, value: &str) -> BatchOp {
    BatchOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

fn delete(key: &str) -> BatchOp {
    BatchOp::Delete {
        key: key.as_bytes().to_vec(),
    }
}

#[test]
fn topic_is_named_after_application_and_store_and_reopens() {
    let Some(bootstrap) = kafka_support::bootstrap("topic_is_named_after_application_and_store")
    else {
        return;
    };
    let config = kafka_support::config(&bootstrap, "counts");
    let log = KafkaLog::open(config.clone(), 0).unwrap();
    assert_eq!(
        log.topic(),
        format!("{}-counts-changelog", config.application_id)
    );
    let first = log.append(&[put("a", "1"), put("b", "2")]).unwrap();
    drop(log);
    // "Already exists" is fine: a second open finds the topic and its records.
    let again = KafkaLog::open(config, 0).unwrap();
    assert_eq!(again.end_offset().unwrap(), first.end);
    assert_eq!(again.read(first.start, 10).unwrap().len(), 2);
}

#[test]
fn tombstones_empty_values_and_empty_keys_round_trip() {
    let Some(bootstrap) = kafka_support::bootstrap("tombstones_empty_values_and_empty_keys") else {
        return;
    };
    let log = KafkaLog::open(kafka_support::config(&bootstrap, "tomb"), 0).unwrap();
    let ops = vec![put("k", ""), delete("k"), put("", "empty key"), delete("")];
    let offsets = log.append(&ops).unwrap();
    assert_eq!(offsets.end - offsets.start, 4);
    let read: Vec<BatchOp> = log
        .read(offsets.start, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.op)
        .collect();
    assert_eq!(read, ops);
}

/// A read that continues where the previous one stopped reads up to the end that read saw,
/// with no new watermark query; the read from that end on sees what was appended since.
#[test]
fn a_continued_read_stops_at_the_end_it_saw_and_the_next_one_sees_more() {
    let Some(bootstrap) = kafka_support::bootstrap("a_continued_read_stops_at_the_end_it_saw")
    else {
        return;
    };
    let log = KafkaLog::open(kafka_support::config(&bootstrap, "cont"), 0).unwrap();
    let ops: Vec<BatchOp> = (0..10).map(|i| put(&format!("k{i}"), "v")).collect();
    let first = log.append(&ops).unwrap();
    let offsets = |records: Vec<statestore_changelog::ChangelogRecord>| -> Vec<u64> {
        records.into_iter().map(|record| record.offset).collect()
    };
    let start = first.start;
    assert_eq!(
        offsets(log.read(start, 4).unwrap()),
        (start..start + 4).collect::<Vec<_>>()
    );
    let later = log.append(&ops[..5]).unwrap();
    assert_eq!(
        offsets(log.read(start + 4, 100).unwrap()),
        (start + 4..first.end).collect::<Vec<_>>(),
        "a continued read stops at the end the read before it saw"
    );
    assert_eq!(
        offsets(log.read(first.end, 100).unwrap()),
        (later.start..later.end).collect::<Vec<_>>(),
        "the read from that end asks for the end again"
    );
}

/// A record's framing and writer epoch both come back from its headers.
#[test]
fn framing_and_epoch_headers_round_trip() {
    let Some(bootstrap) = kafka_support::bootstrap("framing_and_epoch_headers_round_trip") else {
        return;
    };
    let log = KafkaLog::open(kafka_support::config(&bootstrap, "frames"), 0).unwrap();
    log.set_writer_epoch(7).unwrap();
    let offsets = log
        .append_framed(&[put("a", "1"), put("b", "2")], Framing::Commit)
        .unwrap();
    let read: Vec<(RecordKind, u64)> = log
        .read(offsets.start, 10)
        .unwrap()
        .into_iter()
        .map(|record| (record.kind, record.epoch))
        .collect();
    assert_eq!(
        read,
        vec![
            (RecordKind::Framed, 7),
            (RecordKind::Framed, 7),
            (RecordKind::CommitMarker, 7)
        ]
    );
}

#[test]
fn a_partition_the_topic_lacks_is_invalid() {
    let Some(bootstrap) = kafka_support::bootstrap("a_partition_the_topic_lacks_is_invalid") else {
        return;
    };
    let config = KafkaConfig {
        partitions: 2,
        ..kafka_support::config(&bootstrap, "parts")
    };
    let one = KafkaLog::open(config.clone(), 1).unwrap();
    let offsets = one.append(&[put("p1", "x")]).unwrap();
    assert_eq!(one.read(offsets.start, 1).unwrap().len(), 1);
    let err = KafkaLog::open(config, 2).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

#[test]
fn an_oversized_record_is_refused_and_nothing_of_its_batch_is_written() {
    let Some(bootstrap) = kafka_support::bootstrap("an_oversized_record_is_refused") else {
        return;
    };
    let log = KafkaLog::open(kafka_support::config(&bootstrap, "big"), 0).unwrap();
    let end = log.append(&[put("first", "1")]).unwrap().end;
    let huge = BatchOp::Put {
        key: b"huge".to_vec(),
        value: vec![7; 2_000_000],
    };
    let err = log.append(&[put("before", "1"), huge]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert_eq!(log.end_offset().unwrap(), end);
}

/// Appends in batches of 1000 and reads them back sequentially, printing the rates.
#[test]
fn throughput_of_batched_appends_and_sequential_reads() {
    let Some(bootstrap) = kafka_support::bootstrap("throughput_of_batched_appends") else {
        return;
    };
    const BATCHES: usize = 20;
    const BATCH: usize = 1000;
    let log = KafkaLog::open(kafka_support::config(&bootstrap, "rate"), 0).unwrap();
    let value = vec![b'v'; 150];
    let started = Instant::now();
    for b in 0..BATCHES {
        let ops: Vec<BatchOp> = (0..BATCH)
            .map(|i| BatchOp::Put {
                key: format!("key-{b:04}-{i:06}-padding-").into_bytes(),
                value: value.clone(),
            })
            .collect();
        let offsets = log.append(&ops).unwrap();
        assert_eq!(offsets.end - offsets.start, BATCH as u64);
    }
    let append_rate = (BATCHES * BATCH) as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut next = log.start_offset().unwrap();
    let mut count = 0;
    loop {
        let batch = log.read(next, BATCH).unwrap();
        let Some(last) = batch.last() else { break };
        next = last.offset + 1;
        count += batch.len();
    }
    let read_rate = count as f64 / started.elapsed().as_secs_f64();
    assert_eq!(count, BATCHES * BATCH);
    kafka_support::announce(&format!(
        "statestore-kafka: append {append_rate:.0} records/s (batches of {BATCH}), \
         sequential read {read_rate:.0} records/s ({count} records of 24+150 bytes)"
    ));
}

/// A broker killed under the log: `append` fails with `Timeout` within its timeout, and once
/// the broker is back, appends succeed and every acknowledged record is still there.
#[test]
fn appends_time_out_while_the_broker_is_down_and_resume_after() {
    if kafka_support::bootstrap("appends_time_out_while_the_broker_is_down").is_none() {
        return;
    }
    let broker = kafka_support::Cluster::start(1);
    let config = KafkaConfig {
        produce_timeout_ms: 3_000,
        admin_timeout_ms: 5_000,
        ..kafka_support::config(broker.bootstrap(), "outage")
    };
    let log = KafkaLog::open(config, 0).unwrap();
    let before = log.append(&[put("a", "1"), put("b", "2")]).unwrap();

    broker.kill(1);
    let started = Instant::now();
    let err = log.append(&[put("c", "3")]).unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        took < Duration::from_millis(4_000),
        "append took {took:?} with a 3 s timeout"
    );

    broker.restart(1);
    let within = Duration::from_secs(30);
    let after = retry(within, || log.append(&[put("c", "3"), delete("a")]));
    assert!(after.start >= before.end, "{before:?} then {after:?}");
    // The reader has its own connections, which reconnect with their own backoff.
    let records = retry(within, || log.read(0, 100));
    let ops: Vec<BatchOp> = records.into_iter().map(|r| r.op).collect();
    let acknowledged = [put("a", "1"), put("b", "2")];
    assert_eq!(ops[..2], acknowledged, "acknowledged records lost: {ops:?}");
    assert_eq!(
        ops[ops.len() - 2..],
        [put("c", "3"), delete("a")],
        "{ops:?}"
    );
}

/// Retries `op` while it fails with `Timeout` (the client reconnects with a backoff), until it
/// succeeds or `within` has passed.
fn retry<T>(within: Duration, mut op: impl FnMut() -> store_api::Result<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match op() {
            Ok(done) => return done,
            Err(err) if Instant::now() < deadline => {
                assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
            }
            Err(err) => panic!("the log did not recover within {within:?}: {err}"),
        }
    }
}
