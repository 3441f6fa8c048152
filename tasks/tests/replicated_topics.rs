//! Replication of the topics an application creates, on a 3-node cluster of the test's own
//! (default replication factor 3, `min.insync.replicas` 2): by default every topic takes the
//! broker's replication factor, and the application's and a store's settings override it.
//! And on the shared broker, the configs changelog topics carry, as Kafka Streams sets them.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP` like every Kafka test (without it the test prints one
//! SKIP line and passes); the cluster itself is started here through `scripts/broker.sh`.

mod support;

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, ConfigSource, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use statestore_changelog::kafka_util::block_on;
use statestore_tasks::{Application, StoreSpec, TasksConfig};
use statestore_test_support::Cluster;
use support::{bootstrap, config, create_topic, unique};

const PARTITIONS: i32 = 3;
const TIMEOUT: Duration = Duration::from_secs(30);

/// The replica count of every partition of `topic`, in partition order.
fn replicas(bootstrap: &str, topic: &str) -> Vec<usize> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("metadata client");
    // A topic just created takes a moment to reach every broker's metadata.
    let deadline = Instant::now() + TIMEOUT;
    let metadata = loop {
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .expect("topic metadata");
        let found = &metadata.topics()[0];
        if found.error().is_none() && !found.partitions().is_empty() {
            break metadata;
        }
        assert!(
            Instant::now() < deadline,
            "topic {topic}: {:?}",
            found.error()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut partitions: Vec<_> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| (p.id(), p.replicas().len()))
        .collect();
    partitions.sort_unstable();
    partitions.into_iter().map(|(_, count)| count).collect()
}

/// The effective `min.insync.replicas` of `topic` (its own, or the broker's when it has none).
fn min_insync(bootstrap: &str, topic: &str) -> String {
    topic_config(bootstrap, topic, "min.insync.replicas").0
}

/// The effective value of config `name` of `topic`, and whether the topic sets it itself
/// (rather than taking the broker's).
fn topic_config(bootstrap: &str, topic: &str, name: &str) -> (String, bool) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let options = AdminOptions::new().request_timeout(Some(TIMEOUT));
    // A topic created moments before may not be in the answering broker's metadata yet: the
    // broker then answers with an error, or with the topic but none of its configs.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let resources = block_on(
            admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options),
            TIMEOUT,
        )
        .expect("describe_configs answered in time")
        .expect("describe_configs");
        let answer = match resources.into_iter().next().expect("one resource") {
            Ok(resource) => match resource.get(name) {
                Some(entry) => {
                    let own = entry.source == ConfigSource::DynamicTopic;
                    return (entry.value.clone().expect("a value"), own);
                }
                None => format!("{} configs, none {name}", resource.entries.len()),
            },
            Err(err) => err.to_string(),
        };
        assert!(
            std::time::Instant::now() < deadline,
            "the configs of {topic}: {answer}"
        );
        eprintln!("describing {topic}: {answer}; asking again");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts an application (which creates its changelog topics) and closes it.
fn create_changelogs(config: TasksConfig) {
    let mut app = Application::new(config).expect("application");
    app.close().expect("close");
}

#[test]
fn topics_take_the_brokers_replication_unless_configured() {
    if bootstrap("topics_take_the_brokers_replication_unless_configured").is_none() {
        return;
    }
    let cluster = Cluster::start(3);
    let bootstrap = cluster.bootstrap().to_owned();
    let dir = tempfile::tempdir().expect("state dir");
    let input = unique("repl-input");
    create_topic(&bootstrap, &input, PARTITIONS);
    let all = |count| vec![count; PARTITIONS as usize];
    assert_eq!(replicas(&bootstrap, &input), all(3), "input topic {input}");

    // Defaults: the broker's replication factor and min.insync.replicas.
    let plain = unique("repl-plain");
    create_changelogs(config(&bootstrap, &plain, &input, dir.path()));
    let counts = format!("{plain}-counts-changelog");
    assert_eq!(replicas(&bootstrap, &counts), all(3), "{counts}");
    assert_eq!(
        min_insync(&bootstrap, &counts),
        "2",
        "{counts}: the broker's"
    );

    // The application's min.insync.replicas on every changelog topic; a store's own
    // replication factor and topic properties win over the application's.
    let set = unique("repl-set");
    let mut small = StoreSpec::new("small", "memory");
    small.replication_factor = Some(2);
    small
        .topic_properties
        .insert("min.insync.replicas".into(), "1".into());
    let configured = TasksConfig {
        min_insync_replicas: Some(3),
        stores: vec![StoreSpec::new("counts", "redb"), small],
        ..config(&bootstrap, &set, &input, dir.path())
    };
    create_changelogs(configured);
    let counts = format!("{set}-counts-changelog");
    assert_eq!(replicas(&bootstrap, &counts), all(3), "{counts}");
    assert_eq!(min_insync(&bootstrap, &counts), "3", "{counts}");
    let small = format!("{set}-small-changelog");
    assert_eq!(replicas(&bootstrap, &small), all(2), "{small}");
    assert_eq!(min_insync(&bootstrap, &small), "1", "{small}");
}

#[test]
fn changelog_topics_are_compacted_and_keep_the_producers_timestamps() {
    let Some(bootstrap) =
        bootstrap("changelog_topics_are_compacted_and_keep_the_producers_timestamps")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("state dir");
    let input = unique("configs-input");
    create_topic(&bootstrap, &input, PARTITIONS);
    let app = unique("configs");
    create_changelogs(config(&bootstrap, &app, &input, dir.path()));
    let counts = format!("{app}-counts-changelog");
    // Set on the topic itself, so a broker whose default differs does not change them.
    let own = |value: &str| (value.to_owned(), true);
    assert_eq!(
        topic_config(&bootstrap, &counts, "cleanup.policy"),
        own("compact")
    );
    assert_eq!(
        topic_config(&bootstrap, &counts, "message.timestamp.type"),
        own("CreateTime")
    );
}
