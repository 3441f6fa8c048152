//! The topics an application needs: its input topics, which must exist with one partition
//! count, its repartition topics and one changelog topic per store, created when missing with
//! that partition count.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use statestore_changelog::KafkaClients;
pub(crate) use statestore_changelog::kafka_util::convert;
use statestore_changelog::kafka_util::create_retrying;
use store_api::{Error, Result};

use crate::config::TasksConfig;

/// Checks the input topics and every changelog topic, creating the missing changelog topics,
/// and returns the inputs' partition count: the number of tasks.
///
/// # Errors
/// `InvalidArgument` when an input topic or the dead-letter topic does not exist (still
/// unknown after 10 s), two input topics have different
/// partition counts, or a changelog topic has another partition count than the input (both
/// counts named); `Timeout` when no broker answers.
pub(crate) fn prepare(clients: &KafkaClients, config: &TasksConfig) -> Result<u32> {
    let mut counted: Option<(&str, u32)> = None;
    let external = config
        .input_topics
        .iter()
        .filter(|input| !config.repartition_topics.contains(input));
    for input in external {
        let count = input_partition_count(clients, input)?.ok_or_else(|| {
            Error::invalid(format!(
                "input topic {input} does not exist (application {}); create it first: its \
                 partition count sets the number of tasks",
                config.application_id
            ))
        })?;
        match counted {
            None => counted = Some((input, count)),
            Some((first, first_count)) if first_count != count => {
                return Err(Error::invalid(format!(
                    "input topic {input} has {count} partitions but input topic {first} has \
                     {first_count}: a task owns the same partition of every input topic, so \
                     they must be co-partitioned (repartition one of them)"
                )));
            }
            Some(_) => {}
        }
    }
    let Some((input, partitions)) = counted else {
        return Err(Error::invalid("no input topic is configured"));
    };
    for topic in &config.repartition_topics {
        let count = match clients.partition_count(topic)? {
            Some(count) => count,
            None => {
                let count = i32::try_from(partitions).unwrap_or(i32::MAX);
                create_topic_with(&config.bootstrap_servers, &config.properties, topic, count)?;
                input_partition_count(clients, topic)?.unwrap_or(0)
            }
        };
        if count != partitions {
            return Err(Error::invalid(format!(
                "repartition topic {topic} has {count} partitions but input topic {input} has \
                 {partitions}: a task reads the same partition of both (delete the \
                 repartition topic)"
            )));
        }
    }
    if let Some(topic) = &config.dead_letter_topic
        && input_partition_count(clients, topic)?.is_none()
    {
        return Err(Error::invalid(format!(
            "dead_letter_topic {topic} does not exist (application {}); create it first",
            config.application_id
        )));
    }
    for store in config.stores.iter().filter(|store| store.logging) {
        let changelog = config.changelog_config(store, partitions);
        let topic = changelog.topic();
        let count = match clients.partition_count(&topic)? {
            Some(count) => count,
            None => {
                // Opening partition 0 creates the topic with `partitions` partitions and waits
                // until the metadata shows it.
                drop(clients.open(changelog, 0)?);
                clients.partition_count(&topic)?.unwrap_or(0)
            }
        };
        if count != partitions {
            return Err(Error::invalid(format!(
                "changelog topic {topic} has {count} partitions but input topic {input} has \
                 {partitions}: each task logs to the changelog partition of its input \
                 partition, so the counts must be equal (delete the changelog topic or \
                 repartition the input)"
            )));
        }
    }
    Ok(partitions)
}

/// How long an input topic that the brokers do not know is asked for again before it is
/// reported missing: a topic created moments before reaches every broker's metadata a little
/// later, and the broker asked first may not have it yet.
const INPUT_TOPIC_GRACE: Duration = Duration::from_secs(10);

/// The partition count of input topic `input`, or `None` when the brokers still do not know it
/// after [`INPUT_TOPIC_GRACE`].
fn input_partition_count(clients: &KafkaClients, input: &str) -> Result<Option<u32>> {
    let deadline = std::time::Instant::now() + INPUT_TOPIC_GRACE;
    let mut pause = Duration::from_millis(50);
    loop {
        let found = clients.partition_count(input)?;
        if found.is_some() || std::time::Instant::now() + pause > deadline {
            return Ok(found);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Creates `topic` with `partitions` partitions unless it exists: for tools, examples and tests
/// that need an input topic. It takes the broker's cleanup policy (delete), replication factor
/// (`default.replication.factor`) and `min.insync.replicas`. Retriable answers (a
/// controller or broker restarting) are retried for up to 30 s.
///
/// # Errors
/// `Timeout` when no broker answers within 30 s; `Backend` when the broker refuses the topic.
pub fn create_topic(bootstrap_servers: &str, topic: &str, partitions: i32) -> Result<()> {
    create_topic_with(bootstrap_servers, &BTreeMap::new(), topic, partitions)
}

/// [`create_topic`] through an admin client with librdkafka `properties` (security, client
/// id), as a secured cluster needs.
///
/// # Errors
/// As [`create_topic`]; `InvalidArgument` for a property librdkafka refuses.
pub fn create_topic_with(
    bootstrap_servers: &str,
    properties: &BTreeMap<String, String>,
    topic: &str,
    partitions: i32,
) -> Result<()> {
    let doing = format!("creating topic {topic}");
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    let admin: AdminClient<DefaultClientContext> = config
        .set("bootstrap.servers", bootstrap_servers)
        .create()
        .map_err(|err| convert(&doing, err))?;
    // -1 with no replica assignment asks the broker for its default (KIP-464, Kafka 2.4).
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    create_retrying(&admin, &new_topic, &doing, Duration::from_secs(30))
}
