//! The librdkafka settings of the instance's group consumer.

use rdkafka::ClientConfig;

use crate::config::TasksConfig;
use store_api::{Error, Result};

/// How often the group consumer's statistics (and so the tasks' lag metric) are refreshed,
/// unless the properties say otherwise.
const STATISTICS_INTERVAL_MS: &str = "5000";

/// A `client.id` no other instance uses: `<application_id>-<pid>-<nanoseconds>`, followed by
/// the instance's endpoint when it has one (see the `endpoint` module).
pub(crate) fn unique_client_id(application_id: &str, endpoint: Option<&str>) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let unique = format!("{application_id}-{}-{nanos}", std::process::id());
    crate::endpoint::encode(&unique, endpoint)
}

/// Bootstrap servers, the passthrough properties and the timeouts.
pub(crate) fn base_config(config: &TasksConfig) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in &config.properties {
        client.set(key, value);
    }
    client
        .set("bootstrap.servers", &config.bootstrap_servers)
        .set("socket.timeout.ms", config.request_timeout_ms.to_string());
    client
}

/// The group consumer: no automatic commits, positions from the tasks.
pub(crate) fn consumer_config(config: &TasksConfig) -> ClientConfig {
    let mut client = base_config(config);
    if client.get("statistics.interval.ms").is_none() {
        // The tasks' lag metric comes from librdkafka's statistics.
        client.set("statistics.interval.ms", STATISTICS_INTERVAL_MS);
    }
    client
        .set("group.id", &config.application_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", config.session_timeout_ms.to_string())
        .set(
            "heartbeat.interval.ms",
            config.heartbeat_interval_ms.to_string(),
        )
        .set(
            "max.poll.interval.ms",
            config.max_poll_interval_ms.to_string(),
        )
        .set(
            "partition.assignment.strategy",
            config.assignment_strategy.librdkafka_name(),
        );
    if let Some(id) = &config.group_instance_id {
        client.set("group.instance.id", id);
    }
    client
}

/// The longest `group.instance.id` accepted: Kafka's limit for names it keeps, as for topics.
const MAX_GROUP_INSTANCE_ID: usize = 249;

/// Checks a `group.instance.id` as Kafka does: 1 to 249 characters of `[A-Za-z0-9._-]`.
///
/// # Errors
/// `InvalidArgument` naming the id and the rule.
pub(crate) fn validate_group_instance_id(id: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > MAX_GROUP_INSTANCE_ID || !id.chars().all(allowed) {
        return Err(Error::invalid(format!(
            "group_instance_id {id:?} must hold 1 to {MAX_GROUP_INSTANCE_ID} letters, digits, \
             '.', '_' or '-'"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_instance_ids_follow_kafka() {
        for good in ["host-1", "a", "web_3.eu-west", &"i".repeat(249)] {
            validate_group_instance_id(good).expect(good);
        }
        for bad in ["", "a b", "host/1", "wörd", "a:b", &"i".repeat(250)] {
            let err = validate_group_instance_id(bad).expect_err(bad);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains("group_instance_id"), "{err}");
        }
    }

    #[test]
    fn the_group_consumer_carries_the_instance_id_only_when_set() {
        let mut config = TasksConfig::default();
        assert_eq!(consumer_config(&config).get("group.instance.id"), None);
        config.group_instance_id = Some("host-1".into());
        let client = consumer_config(&config);
        assert_eq!(client.get("group.instance.id"), Some("host-1"));
    }
}
