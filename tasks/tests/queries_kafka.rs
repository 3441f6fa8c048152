//! Interactive queries against the real broker: key partitioning as librdkafka's producer does
//! it, and two instances in one group answering for their active tasks and standby copies,
//! naming each key's owner and standby by their advertised endpoints.

mod support;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use statestore_tasks::{
    Application, KeyPartitioner, Queries, QueryError, ReadFrom, ReadSource, TasksConfig,
};
use support::*;

const PARTITIONS: u32 = 4;

/// Produces `keys` with librdkafka's `partitioner`, letting it choose the partitions.
fn produce_with(bootstrap: &str, topic: &str, partitioner: KeyPartitioner, keys: &[String]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("partitioner", partitioner.librdkafka_name())
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for key in keys {
        let mut record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(key.as_bytes());
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

/// Every record of `topic` of `partitions` partitions: (key, partition).
fn read_all(bootstrap: &str, topic: &str, partitions: u32, expected: usize) -> Vec<(String, u32)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("reader"))
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for partition in 0..partitions {
        tpl.add_partition_offset(topic, partition as i32, Offset::Beginning)
            .expect("offset");
    }
    consumer.assign(&tpl).expect("assign");
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while records.len() < expected && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
            records.push((key, u32::try_from(message.partition()).expect("partition")));
        }
    }
    records
}

/// librdkafka's producer puts every key where [`KeyPartitioner`] says, for both hashes, over 7
/// partitions (not a power of two, so that the hash's sign bit counts).
#[test]
fn key_partitioners_place_keys_as_librdkafkas_producer_does() {
    let Some(bootstrap) = bootstrap("key_partitioners_place_keys_as_librdkafkas_producer_does")
    else {
        return;
    };
    let keys: Vec<String> = (0..200).map(|i| format!("key-{i}-{}", word(i))).collect();
    const SEVEN: u32 = 7;
    for partitioner in [KeyPartitioner::Murmur2, KeyPartitioner::Crc32] {
        let topic = unique("iq-partitioner");
        create_topic(&bootstrap, &topic, SEVEN as i32);
        produce_with(&bootstrap, &topic, partitioner, &keys);
        let records = read_all(&bootstrap, &topic, SEVEN, keys.len());
        assert_eq!(records.len(), keys.len(), "{partitioner:?}");
        for (key, partition) in records {
            assert_eq!(
                partitioner.partition(key.as_bytes(), SEVEN),
                Some(partition),
                "{partitioner:?} {key}"
            );
        }
    }
}

/// An application on a thread of its own; its query handle is sent back once it exists.
struct Instance {
    stop: Arc<AtomicBool>,
    processed: Arc<AtomicU64>,
    queries: Queries,
    handle: JoinHandle<store_api::Result<()>>,
}

impl Instance {
    fn start(config: TasksConfig) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let processed = Arc::new(AtomicU64::new(0));
        let (sender, receiver) = mpsc::channel();
        let (stop2, processed2) = (Arc::clone(&stop), Arc::clone(&processed));
        let handle = thread::spawn(move || {
            let mut app = Application::new(config)?;
            let _ = sender.send(app.queries());
            while !stop2.load(Ordering::Relaxed) {
                if app.poll(Duration::from_millis(50), &mut count_word)? {
                    processed2.fetch_add(1, Ordering::Relaxed);
                }
            }
            app.close()
        });
        let queries = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("the application started");
        Instance {
            stop,
            processed,
            queries,
            handle,
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("no panic").expect("clean stop");
    }
}

fn instance_config(
    (bootstrap, app, input): (&str, &str, &str),
    dir: &Path,
    server: &str,
) -> TasksConfig {
    TasksConfig {
        application_server: Some(server.to_owned()),
        num_standby_replicas: 1,
        key_partitioner: KeyPartitioner::Murmur2,
        ..config(bootstrap, app, input, dir)
    }
}

/// Asks until `ask` answers `Some` or `timeout` passes.
fn eventually<T>(timeout: Duration, mut ask: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(answer) = ask() {
            return answer;
        }
        assert!(Instant::now() < deadline, "no answer within {timeout:?}");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn two_instances_answer_for_their_tasks_and_name_owners_and_standbys() {
    let Some(bootstrap) =
        bootstrap("two_instances_answer_for_their_tasks_and_name_owners_and_standbys")
    else {
        return;
    };
    let (app, input) = (unique("iq-app"), unique("iq-input"));
    create_topic(&bootstrap, &input, PARTITIONS as i32);
    let words: Vec<String> = (0..2_000).map(word).collect();
    produce_with(&bootstrap, &input, KeyPartitioner::Murmur2, &words);
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for word in &words {
        *expected.entry(word.clone()).or_default() += 1;
    }
    // Advertised only: this test reads through the handles, nothing listens there.
    let endpoints = ["127.0.0.1:7001", "127.0.0.1:7002"];
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    let names = (bootstrap.as_str(), app.as_str(), input.as_str());
    let a = Instance::start(instance_config(names, dirs[0].path(), endpoints[0]));
    let b = Instance::start(instance_config(names, dirs[1].path(), endpoints[1]));
    let instances = [&a, &b];
    let all_processed = || {
        instances
            .iter()
            .map(|i| i.processed.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    // Both hold tasks, so each one's answers are partly its own and partly the other's.
    eventually(Duration::from_secs(120), || {
        let all = a.queries.all_metadata().ok()?;
        (all.len() == 2
            && all.iter().all(|i| !i.active.is_empty())
            && all_processed() >= words.len() as u64)
            .then_some(())
    });

    for (word, &count) in &expected {
        let key = word.as_bytes();
        let metadata = eventually(Duration::from_secs(30), || {
            let from_a = a.queries.metadata_for_key(key).ok()?;
            let from_b = b.queries.metadata_for_key(key).ok()?;
            (from_a == from_b).then_some(from_a)
        });
        let owner = endpoints
            .iter()
            .position(|e| metadata.active.as_deref() == Some(*e))
            .expect("an owner with an endpoint");
        let other = 1 - owner;
        assert_eq!(metadata.standbys, [endpoints[other]], "{word}");
        assert_eq!(
            metadata.partition,
            KeyPartitioner::Murmur2
                .partition(key, PARTITIONS)
                .expect("p")
        );
        let read = instances[owner]
            .queries
            .get("counts", key, ReadFrom::Active)
            .expect("the owner answers");
        assert_eq!(read.source, ReadSource::Active);
        assert_eq!(read.value.as_deref().map(decode), Some(count), "{word}");
        assert!(matches!(
            instances[other].queries.get("counts", key, ReadFrom::Active),
            Err(QueryError::NotLocal { partition }) if partition == metadata.partition
        ));
        // The standby copy holds what the owner committed, applied within about a second.
        let (copy, staleness) = eventually(Duration::from_secs(30), || {
            let read = instances[other]
                .queries
                .get("counts", key, ReadFrom::ActiveOrStandby)
                .ok()?;
            match read.source {
                ReadSource::Standby(staleness)
                    if read.value.as_deref().map(decode) == Some(count) =>
                {
                    Some((read.value, staleness))
                }
                _ => None,
            }
        });
        assert_eq!(copy.as_deref().map(decode), Some(count));
        assert!(staleness.age() < Duration::from_secs(30), "{staleness:?}");
    }
    // Each partition's entries, from its owner and from the standby copy on the other one.
    for partition in 0..PARTITIONS {
        let wanted: BTreeMap<String, u64> = expected
            .iter()
            .filter(|(w, _)| {
                KeyPartitioner::Murmur2.partition(w.as_bytes(), PARTITIONS) == Some(partition)
            })
            .map(|(w, &c)| (w.clone(), c))
            .collect();
        let read = |queries: &Queries, from| -> Option<(BTreeMap<String, u64>, ReadSource)> {
            let range = queries
                .range(
                    "counts",
                    partition,
                    (Bound::Unbounded, Bound::Unbounded),
                    false,
                    from,
                )
                .ok()?;
            let entries = range
                .entries
                .map(|entry| {
                    entry.map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), decode(&v)))
                })
                .collect::<store_api::Result<_>>()
                .expect("entries");
            Some((entries, range.source))
        };
        let (owner, other) = match read(&a.queries, ReadFrom::Active) {
            Some(_) => (&a, &b),
            None => (&b, &a),
        };
        let (entries, source) = read(&owner.queries, ReadFrom::Active).expect("the owner");
        assert_eq!(
            (entries, source),
            (wanted.clone(), ReadSource::Active),
            "{partition}"
        );
        eventually(Duration::from_secs(30), || {
            let (entries, source) = read(&other.queries, ReadFrom::ActiveOrStandby)?;
            (matches!(source, ReadSource::Standby(_)) && entries == wanted).then_some(())
        });
        let prefixed: Vec<_> = owner
            .queries
            .prefix_scan("counts", partition, b"w1", ReadFrom::Active)
            .expect("prefix scan")
            .entries
            .map(|entry| String::from_utf8_lossy(&entry.expect("entry").0).into_owned())
            .collect();
        let wanted_prefixed: Vec<_> = wanted
            .keys()
            .filter(|w| w.starts_with("w1"))
            .cloned()
            .collect();
        assert_eq!(prefixed, wanted_prefixed, "{partition}");
    }
    assert!(matches!(
        a.queries.get("nope", b"w1", ReadFrom::Active),
        Err(QueryError::UnknownStore(_))
    ));
    assert!(matches!(
        a.queries.get("counts", statestore_tasks::POSITION_KEY, ReadFrom::ActiveOrStandby),
        Err(QueryError::Store(err)) if err.kind() == store_api::ErrorKind::InvalidArgument
    ));
    let queries = a.queries.clone();
    a.stop();
    assert!(matches!(
        queries.metadata_for_key(b"w1"),
        Err(QueryError::Closed)
    ));
    assert!(matches!(
        queries.get("counts", b"w1", ReadFrom::ActiveOrStandby),
        Err(QueryError::Closed)
    ));
    b.stop();
}
