//! The librdkafka settings of the instance's group consumer.

use rdkafka::ClientConfig;

use crate::config::TasksConfig;

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
    crate::group::endpoint::encode(&unique, endpoint)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_consumer_carries_the_instance_id_only_when_set() {
        let mut config = TasksConfig::default();
        assert_eq!(consumer_config(&config).get("group.instance.id"), None);
        config.group_instance_id = Some("host-1".into());
        let client = consumer_config(&config);
        assert_eq!(client.get("group.instance.id"), Some("host-1"));
    }
}
