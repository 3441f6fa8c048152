//! Output records against the real broker: a keyed output lands in the partition the
//! configured key partitioner (murmur2 by default) gives its key, the one
//! `Queries::metadata_for_key` names; `send_record` sets headers, partition and timestamp; a
//! processor reads its input record's headers; a partition the topic lacks is a typed error.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, Timestamp, TopicPartitionList};
use statestore_tasks::{
    Application, KeyPartitioner, OutputRecord, ProcessorContext, ProductionErrorPolicy, TasksConfig,
};
use store_api::ErrorKind;
use support::*;

/// Not a power of two, so that the hash's sign bit counts.
const PARTITIONS: u32 = 7;

/// A header as a test compares it: name and value.
type OwnedHeader = (String, Option<Vec<u8>>);

/// Produces one record per key, key `key` and value `value` with `headers`, to partition
/// `index % partitions` (not where any hash puts it).
fn produce_keys(
    bootstrap: &str,
    topic: &str,
    partitions: u32,
    records: &[(String, Vec<OwnedHeader>)],
) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for (index, (key, headers)) in (0u32..).zip(records) {
        let owned = headers
            .iter()
            .fold(OwnedHeaders::new(), |all, (name, value)| {
                all.insert(Header {
                    key: name,
                    value: value.as_deref(),
                })
            });
        let partition = i32::try_from(index % partitions).expect("partition");
        let mut record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(key.as_bytes())
            .partition(partition)
            .headers(owned);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    producer.poll(Duration::from_millis(10));
                    record = back;
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Every record of `topic`, read until `expected` arrived or a minute passed.
fn read_topic(bootstrap: &str, topic: &str, partitions: u32, expected: usize) -> Vec<OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("reader"))
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for partition in 0..partitions {
        let partition = i32::try_from(partition).expect("partition");
        tpl.add_partition_offset(topic, partition, Offset::Beginning)
            .expect("offset");
    }
    consumer.assign(&tpl).expect("assign");
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while records.len() < expected && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            records.push(message.detach());
        }
    }
    // Anything past the expected records would be a duplicate or a stray.
    while let Some(Ok(message)) = consumer.poll(Duration::from_millis(500)) {
        records.push(message.detach());
    }
    records
}

/// The headers of `message`, in order.
fn headers_of(message: &OwnedMessage) -> Vec<OwnedHeader> {
    message.headers().map_or_else(Vec::new, |headers| {
        headers
            .iter()
            .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
            .collect()
    })
}

fn key_of(message: &OwnedMessage) -> Option<String> {
    message
        .key()
        .map(|key| String::from_utf8_lossy(key).into_owned())
}

fn partition_of_message(message: &OwnedMessage) -> u32 {
    u32::try_from(message.partition()).expect("partition")
}

/// Polls `app` with `processor` until `records` input records are processed.
fn process<P: statestore_tasks::Processor>(app: &mut Application, processor: &mut P, records: u64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut processed = 0;
    while processed < records {
        assert!(
            Instant::now() < deadline,
            "processed {processed} of {records}"
        );
        if app
            .poll(Duration::from_millis(50), processor)
            .expect("poll")
        {
            processed += 1;
        }
    }
}

/// 400 distinct keys, read from partitions no hash chose and sent to a 7-partition topic with
/// `send` (default key partitioner: murmur2), land where murmur2 and `metadata_for_key` put
/// them; keyless outputs are all delivered wherever librdkafka put them.
#[test]
fn keyed_outputs_land_in_the_partition_metadata_for_key_names() {
    let Some(bootstrap) = bootstrap("keyed_outputs_land_in_the_partition_metadata_for_key_names")
    else {
        return;
    };
    let (app_id, input, output) = (unique("out-app"), unique("out-input"), unique("out-output"));
    create_topic(&bootstrap, &input, PARTITIONS as i32);
    create_topic(&bootstrap, &output, PARTITIONS as i32);
    let keys: Vec<String> = (0..400).map(|i| format!("key-{i}-{}", word(i))).collect();
    // librdkafka's default partitioner, which outputs used before, puts most keys elsewhere.
    let moved = keys
        .iter()
        .filter(|k| {
            KeyPartitioner::Crc32.partition(k.as_bytes(), PARTITIONS)
                != KeyPartitioner::Murmur2.partition(k.as_bytes(), PARTITIONS)
        })
        .count();
    assert!(moved > 200, "{moved}");
    let records: Vec<(String, Vec<OwnedHeader>)> =
        keys.iter().map(|k| (k.clone(), Vec::new())).collect();
    produce_keys(&bootstrap, &input, PARTITIONS, &records);

    let dir = tempfile::tempdir().expect("dir");
    let config = TasksConfig {
        application_server: Some("127.0.0.1:7001".to_owned()),
        ..config(&bootstrap, &app_id, &input, dir.path())
    };
    assert_eq!(config.key_partitioner, KeyPartitioner::Murmur2);
    let mut app = Application::new(config).expect("application");
    let mut processor = |ctx: &mut ProcessorContext<'_>| -> store_api::Result<()> {
        ctx.send(&output, ctx.key(), ctx.value());
        ctx.send(&output, None, Some(b"keyless"));
        Ok(())
    };
    process(&mut app, &mut processor, 400);
    let queries = app.queries();
    let metadata: BTreeMap<String, u32> = keys
        .iter()
        .map(|key| {
            let deadline = Instant::now() + Duration::from_secs(30);
            let found = loop {
                if let Ok(found) = queries.metadata_for_key(key.as_bytes()) {
                    break found;
                }
                assert!(Instant::now() < deadline, "no metadata for {key}");
                app.poll(Duration::from_millis(50), &mut processor)
                    .expect("poll");
            };
            (key.clone(), found.partition)
        })
        .collect();
    app.close().expect("close");

    let written = read_topic(&bootstrap, &output, PARTITIONS, 800);
    let (keyed, keyless): (Vec<_>, Vec<_>) = written.iter().partition(|m| m.key().is_some());
    assert_eq!(keyless.len(), 400);
    assert_eq!(keyed.len(), 400);
    let mut landed = BTreeMap::new();
    for message in keyed {
        let key = key_of(message).expect("key");
        assert!(landed.insert(key, partition_of_message(message)).is_none());
    }
    assert_eq!(landed.len(), 400);
    let misplaced: Vec<(&String, u32, u32)> = landed
        .iter()
        .filter(|&(key, partition)| metadata[key] != *partition)
        .map(|(key, &partition)| (key, partition, metadata[key]))
        .collect();
    assert!(
        misplaced.is_empty(),
        "{} of 400 keys (key, landed in, metadata_for_key) elsewhere than metadata_for_key names: {misplaced:?}",
        misplaced.len()
    );
    for (key, partition) in &landed {
        assert_eq!(
            KeyPartitioner::Murmur2.partition(key.as_bytes(), PARTITIONS),
            Some(*partition),
            "{key}"
        );
    }
}

/// The input headers a processor saw, and what `send_record` refused.
#[derive(Default)]
struct Seen {
    headers: BTreeMap<String, Vec<OwnedHeader>>,
    trace: BTreeMap<String, Option<Vec<u8>>>,
    refused: Vec<ErrorKind>,
}

/// Records with headers (a repeated name, a null value): the processor reads them in order,
/// `header` gives the last of a name, and `send_record` writes each output with the partition,
/// timestamp and headers it was given.
#[test]
fn send_record_sets_headers_partition_and_timestamp_and_input_headers_are_read() {
    let Some(bootstrap) =
        bootstrap("send_record_sets_headers_partition_and_timestamp_and_input_headers_are_read")
    else {
        return;
    };
    let (app_id, input, output) = (unique("hdr-app"), unique("hdr-input"), unique("hdr-output"));
    create_topic(&bootstrap, &input, 2);
    create_topic(&bootstrap, &output, PARTITIONS as i32);
    let records: Vec<(String, Vec<OwnedHeader>)> = (0..30)
        .map(|i| {
            let headers = vec![
                ("trace".to_owned(), Some(format!("t{i}").into_bytes())),
                ("dup".to_owned(), Some(b"first".to_vec())),
                ("nothing".to_owned(), None),
                ("dup".to_owned(), Some(b"last".to_vec())),
            ];
            (format!("k{i}"), headers)
        })
        .collect();
    produce_keys(&bootstrap, &input, 2, &records);

    let dir = tempfile::tempdir().expect("dir");
    let mut app =
        Application::new(config(&bootstrap, &app_id, &input, dir.path())).expect("application");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (seen2, output2) = (Arc::clone(&seen), output.clone());
    let mut processor = move |ctx: &mut ProcessorContext<'_>| -> store_api::Result<()> {
        let key = String::from_utf8_lossy(ctx.key().unwrap_or_default()).into_owned();
        let i: u32 = key[1..].parse().expect("k<i>");
        let headers: Vec<OwnedHeader> = ctx
            .headers()
            .map(|(name, value)| (name.to_owned(), value.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(ctx.header("dup"), Some(&b"last"[..]));
        assert_eq!(ctx.header("nothing"), None);
        assert_eq!(ctx.header("absent"), None);
        let mut seen = seen2.lock();
        seen.trace
            .insert(key.clone(), ctx.header("trace").map(<[u8]>::to_vec));
        seen.headers.insert(key.clone(), headers);
        if let Err(err) = ctx.send_record(OutputRecord::new(&output2).timestamp(-1)) {
            seen.refused.push(err.kind());
        }
        // Every key to the same partition, whatever its hash.
        let mut record = OutputRecord::new(&output2)
            .key(&key)
            .value(format!("v{i}"))
            .partition(5)
            .timestamp(1_600_000_000_000 + i64::from(i));
        for (name, value) in ctx.headers() {
            record = record.header(name, value);
        }
        ctx.send_record(record.header("copied-trace", ctx.header("trace")))
    };
    process(&mut app, &mut processor, 30);
    app.close().expect("close");

    let seen = seen.lock();
    assert_eq!(seen.refused, vec![ErrorKind::InvalidArgument; 30]);
    let written = read_topic(&bootstrap, &output, PARTITIONS, 30);
    assert_eq!(written.len(), 30);
    for message in &written {
        let key = key_of(message).expect("key");
        let i: i64 = key[1..].parse().expect("k<i>");
        let sent = &records[usize::try_from(i).expect("index")].1;
        assert_eq!(seen.headers[&key], *sent, "{key}");
        assert_eq!(seen.trace[&key], Some(format!("t{i}").into_bytes()));
        assert_eq!(partition_of_message(message), 5, "{key}");
        assert_eq!(
            message.timestamp(),
            Timestamp::CreateTime(1_600_000_000_000 + i)
        );
        assert_eq!(message.payload(), Some(format!("v{i}").as_bytes()));
        let mut expected = sent.clone();
        expected.push((
            "copied-trace".to_owned(),
            Some(format!("t{i}").into_bytes()),
        ));
        assert_eq!(headers_of(message), expected, "{key}");
    }
}

/// An output to partition 9 of a 7-partition topic stops the instance with `InvalidArgument`
/// under the default policy; under `Continue` it is counted as dropped and the other outputs
/// are delivered.
#[test]
fn an_output_to_a_partition_the_topic_lacks_is_a_typed_error() {
    let Some(bootstrap) = bootstrap("an_output_to_a_partition_the_topic_lacks_is_a_typed_error")
    else {
        return;
    };
    for policy in [ProductionErrorPolicy::Fail, ProductionErrorPolicy::Continue] {
        let (app_id, input, output) = (
            unique("lack-app"),
            unique("lack-input"),
            unique("lack-output"),
        );
        create_topic(&bootstrap, &input, 1);
        create_topic(&bootstrap, &output, PARTITIONS as i32);
        let records: Vec<(String, Vec<OwnedHeader>)> =
            (0..5).map(|i| (format!("k{i}"), Vec::new())).collect();
        produce_keys(&bootstrap, &input, 1, &records);
        let dir = tempfile::tempdir().expect("dir");
        let config = TasksConfig {
            production_error: policy,
            ..config(&bootstrap, &app_id, &input, dir.path())
        };
        let mut app = Application::new(config).expect("application");
        let mut processor = |ctx: &mut ProcessorContext<'_>| -> store_api::Result<()> {
            ctx.send_record(OutputRecord::new(&output).key(&app_id).partition(9))?;
            ctx.send(&output, Some(app_id.as_bytes()), Some(b"fine"));
            Ok(())
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut processed = 0;
        let failure = loop {
            assert!(
                Instant::now() < deadline,
                "{policy:?}: processed {processed}"
            );
            match app.poll(Duration::from_millis(50), &mut processor) {
                Ok(true) => processed += 1,
                Ok(false) if processed == 5 => break None,
                Ok(false) => {}
                Err(err) => break Some(err),
            }
        };
        match policy {
            ProductionErrorPolicy::Fail => {
                let err = failure.expect("the output fails the instance");
                assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
                assert!(err.to_string().contains("partition 9"), "{err}");
                drop(app);
            }
            _ => {
                assert!(failure.is_none(), "{failure:?}");
                app.close().expect("close");
                assert_eq!(app.dropped_outputs(), 5);
                let written = read_topic(&bootstrap, &output, PARTITIONS, 5);
                assert_eq!(written.len(), 5);
                assert!(written.iter().all(|m| m.payload() == Some(&b"fine"[..])));
            }
        }
    }
}

/// Outputs to two topics in turn, several to one topic in a row, each land in the topic they
/// were sent to (outputs in a row to one topic share its name), all of them and once.
#[test]
fn outputs_to_topics_in_turn_land_each_in_its_own_topic() {
    let Some(bootstrap) = bootstrap("outputs_to_topics_in_turn_land_each_in_its_own_topic") else {
        return;
    };
    let (app_id, input) = (unique("turn-app"), unique("turn-input"));
    let (first, second) = (unique("turn-first"), unique("turn-second"));
    for topic in [&input, &first, &second] {
        create_topic(&bootstrap, topic, PARTITIONS as i32);
    }
    let records: Vec<(String, Vec<OwnedHeader>)> =
        (0..50).map(|i| (format!("key-{i}"), Vec::new())).collect();
    produce_keys(&bootstrap, &input, PARTITIONS, &records);

    let dir = tempfile::tempdir().expect("dir");
    let mut app =
        Application::new(config(&bootstrap, &app_id, &input, dir.path())).expect("application");
    let mut processor = |ctx: &mut ProcessorContext<'_>| -> store_api::Result<()> {
        ctx.send(&first, ctx.key(), Some(b"first-1"));
        ctx.send(&first, ctx.key(), Some(b"first-2"));
        ctx.send(&second, ctx.key(), Some(b"second"));
        ctx.send(&first, ctx.key(), Some(b"first-3"));
        Ok(())
    };
    process(&mut app, &mut processor, 50);
    app.close().expect("close");

    let values = |topic: &str, expected: usize| -> BTreeMap<Vec<u8>, usize> {
        let mut counts = BTreeMap::new();
        for message in read_topic(&bootstrap, topic, PARTITIONS, expected) {
            *counts
                .entry(message.payload().unwrap_or_default().to_vec())
                .or_insert(0) += 1;
        }
        counts
    };
    let expected_first: BTreeMap<Vec<u8>, usize> = [b"first-1", b"first-2", b"first-3"]
        .iter()
        .map(|value| (value.to_vec(), 50))
        .collect();
    assert_eq!(values(&first, 150), expected_first);
    assert_eq!(
        values(&second, 50),
        BTreeMap::from([(b"second".to_vec(), 50)])
    );
}
