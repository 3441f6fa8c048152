//! The topics an application needs: its input topics, which must exist with one partition
//! count, and one changelog topic per store, created when missing with that partition count.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use statestore_changelog::KafkaClients;
pub(crate) use statestore_changelog::kafka_util::convert;
use statestore_changelog::kafka_util::create_retrying;
use store_api::{Error, Result};

use crate::config::{StoreSpec, TasksConfig};

/// The topic property that says how many replicas must hold a write before `acks=all` returns.
const MIN_INSYNC: &str = "min.insync.replicas";

/// Checks the input topics and every changelog topic, creating the missing changelog topics,
/// and returns the inputs' partition count: the number of tasks.
///
/// # Errors
/// `InvalidArgument` when an input topic does not exist, two input topics have different
/// partition counts, or a changelog topic has another partition count than the input (both
/// counts named); `Timeout` when no broker answers.
pub(crate) fn prepare(clients: &KafkaClients, config: &TasksConfig) -> Result<u32> {
    let mut counted: Option<(&str, u32)> = None;
    for input in &config.input_topics {
        let count = clients.partition_count(input)?.ok_or_else(|| {
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

/// The topic properties of `store`'s changelog topic: the store's own, with the application's
/// `min.insync.replicas` added unless the store names it.
pub(crate) fn changelog_topic_properties(
    config: &TasksConfig,
    store: &StoreSpec,
) -> BTreeMap<String, String> {
    let mut properties = store.topic_properties.clone();
    if let Some(min_insync) = config.min_insync_replicas {
        properties
            .entry(MIN_INSYNC.to_owned())
            .or_insert_with(|| min_insync.to_string());
    }
    properties
}

/// Checks `min.insync.replicas`, the application's and each changelog topic's: a whole number
/// of at least 1, and at most the topic's replication factor when that is given, since a topic
/// with fewer replicas than it needs in sync refuses every `acks=all` write.
///
/// # Errors
/// `InvalidArgument` naming the store or the option.
pub(crate) fn validate_replication(config: &TasksConfig) -> Result<()> {
    if config.min_insync_replicas == Some(0) {
        return Err(Error::invalid("min_insync_replicas must be at least 1"));
    }
    for store in config.stores.iter().filter(|store| store.logging) {
        let changelog = config.changelog_config(store, 1);
        let Some(value) = changelog.topic_properties.get(MIN_INSYNC) else {
            continue;
        };
        let min_insync = value
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "store {:?}: {MIN_INSYNC} must be a whole number of at least 1, not {value:?}",
                    store.name
                ))
            })?;
        let replicas = changelog.replication_factor;
        if replicas > 0 && min_insync > replicas {
            return Err(Error::invalid(format!(
                "store {:?}: {MIN_INSYNC} {min_insync} exceeds the changelog topic's \
                 replication factor {replicas}: no write could ever be acknowledged",
                store.name
            )));
        }
    }
    Ok(())
}

/// Creates `topic` with `partitions` partitions unless it exists: for tools, examples and tests
/// that need an input topic. It takes the broker's cleanup policy (delete), replication factor
/// (`default.replication.factor`) and `min.insync.replicas`. Retriable answers (a
/// controller or broker restarting) are retried for up to 30 s.
///
/// # Errors
/// `Timeout` when no broker answers within 30 s; `Backend` when the broker refuses the topic.
pub fn create_topic(bootstrap_servers: &str, topic: &str, partitions: i32) -> Result<()> {
    let doing = format!("creating topic {topic}");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap_servers)
        .create()
        .map_err(|err| convert(&doing, err))?;
    // -1 with no replica assignment asks the broker for its default (KIP-464, Kafka 2.4).
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    create_retrying(&admin, &new_topic, &doing, Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> TasksConfig {
        TasksConfig {
            application_id: "app".into(),
            input_topics: vec!["input".into()],
            stores: vec![StoreSpec::new("counts", "memory")],
            ..TasksConfig::default()
        }
    }

    #[test]
    fn changelogs_take_the_applications_min_insync_unless_the_store_names_one() {
        let mut own = StoreSpec::new("own", "memory");
        own.topic_properties.insert(MIN_INSYNC.into(), "1".into());
        let config = TasksConfig {
            min_insync_replicas: Some(2),
            stores: vec![StoreSpec::new("counts", "memory"), own],
            ..valid()
        };
        config.validate().expect("valid");
        let properties = |store| {
            config
                .changelog_config(&config.stores[store], 1)
                .topic_properties
        };
        assert_eq!(properties(0)[MIN_INSYNC], "2");
        assert_eq!(properties(1)[MIN_INSYNC], "1");
        let plain = valid();
        let changelog = plain.changelog_config(&plain.stores[0], 1);
        assert!(!changelog.topic_properties.contains_key(MIN_INSYNC));
        assert_eq!(changelog.replication_factor, -1, "the broker's default");
    }

    #[test]
    fn min_insync_is_at_least_one_and_at_most_the_replicas() {
        let mut two = StoreSpec::new("two", "memory");
        two.replication_factor = Some(2);
        let mut word = StoreSpec::new("word", "memory");
        word.topic_properties
            .insert(MIN_INSYNC.into(), "two".into());
        let cases = [
            (
                TasksConfig {
                    min_insync_replicas: Some(0),
                    ..valid()
                },
                "min_insync_replicas must be at least 1",
            ),
            (
                TasksConfig {
                    min_insync_replicas: Some(3),
                    stores: vec![two.clone()],
                    ..valid()
                },
                "store \"two\": min.insync.replicas 3 exceeds",
            ),
            (
                TasksConfig {
                    stores: vec![word],
                    ..valid()
                },
                "not \"two\"",
            ),
        ];
        for (config, expected) in cases {
            let err = config.validate().expect_err(expected);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains(expected), "{err}");
        }
        // With the broker's replication factor (-1) there is nothing to compare with.
        TasksConfig {
            min_insync_replicas: Some(3),
            ..valid()
        }
        .validate()
        .expect("unknown replication factor");
    }
}
