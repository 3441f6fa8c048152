//! The librdkafka settings of the instance's group consumer.

use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::ClientConfig;

use crate::config::TasksConfig;

/// How often the group consumer's statistics (and so the tasks' lag metric) are refreshed,
/// unless the properties say otherwise.
const STATISTICS_INTERVAL_MS: &str = "5000";

/// The group consumer's `fetch.queue.backoff.ms`, unless the properties say otherwise: how
/// long librdkafka waits before it looks again at a partition whose fetched records reached
/// `queued.min.messages` (100 000) or `queued.max.messages.kbytes`. librdkafka's default,
/// 1000 ms, starves an instance that processes faster than 100 000 records a second: without
/// partition queues of their own (one processing thread) every partition's records share
/// the consumer's queue, whose length is what each partition is compared with, so once it
/// held 100 000 records no partition was fetched for a second, and the instance processed
/// its queue in about half of that and then waited (40-50% of its time, measured). Java's
/// consumer, which Kafka Streams uses, has no such pause.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// The group consumer's `queued.min.messages`, unless the properties say otherwise: how many
/// fetched records librdkafka keeps ready before it stops fetching (until
/// [`FETCH_QUEUE_BACKOFF_MS`] later). librdkafka's default, 100 000, held 100 000 records of
/// a few dozen bytes each, with an operation and a buffer reference per record, ready at all
/// times: about 28 MiB of the instance's peak RSS (149 to 121 MiB in the partitioned word
/// count). 20 000 records are 20 ms of work at a million records a second, twice the
/// fetch backoff, so the instance does not wait for them.
const QUEUED_MIN_MESSAGES: &str = "20000";

/// The group consumer's `max.partition.fetch.bytes` with several stream threads, unless the
/// properties say otherwise (librdkafka's default: 1 MiB). With several threads each input
/// partition has a queue of its own, and librdkafka fetches a partition when that queue runs
/// below `queued.min.messages`: the partitions fall out of step and most fetches carry one
/// partition, where with one queue for all partitions every fetch carries all of them. A
/// larger share per fetch makes up for it; each fetched buffer stays in memory until its
/// last record is processed, so the share is kept at 1.5 MiB, not more.
const SPLIT_MAX_PARTITION_FETCH_BYTES: &str = "1572864";

/// The group consumer's `fetch.wait.max.ms`, unless the properties say otherwise: how long the
/// broker holds a fetch that finds no new record. librdkafka sends a broker its next fetch only
/// once the one in flight returns, so a partition resumed (a task taken in after a
/// rebalance) waited for the fetch of the instance's idle partitions, up to librdkafka's
/// default of 500 ms: 0.05-0.43 s from a restored task's take-in to its first record in the
/// peers failover benchmark. The cost is an idle instance's fetch rate, 10 a second to each
/// broker instead of 2; a busy one's fetches return with records before the wait.
const FETCH_WAIT_MAX_MS: &str = "100";

/// What every `client.id` of this instance starts with: `<client_id>-<instance id>`, the
/// client id defaulting to the application id and the instance id to the
/// `group_instance_id`, or else to 16 hex digits made from the clock and the process, so no
/// other instance's clients share it. Each client adds `-<role>`.
pub(crate) fn client_prefix(config: &TasksConfig) -> String {
    let name = config
        .client_id
        .as_deref()
        .unwrap_or(&config.application_id);
    let instance = config
        .group_instance_id
        .clone()
        .unwrap_or_else(made_up_instance_id);
    format!("{name}-{instance}")
}

/// 16 hex digits that differ between instances and sort by their start: the clock in units
/// of 65.5 µs, then the process id's and a counter's last 8 bits, so instances of one process
/// or of several started together still differ. Member ids start with the client id, and
/// the members in that order are the order the group assigns in.
fn made_up_instance_id() -> String {
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let pid = u64::from(std::process::id()) & 0xFF;
    let count = STARTED.fetch_add(1, Ordering::Relaxed) & 0xFF;
    format!("{:016x}", (nanos & !0xFFFF) | (pid << 8) | count)
}

/// The group consumer's `client.id`: `<prefix>-consumer`, followed by the instance's
/// endpoint when it has one (see the `endpoint` module).
pub(crate) fn consumer_client_id(prefix: &str, endpoint: Option<&str>) -> String {
    crate::group::endpoint::encode(&format!("{prefix}-consumer"), endpoint)
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
    if client.get("fetch.queue.backoff.ms").is_none() {
        client.set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    }
    if client.get("queued.min.messages").is_none() {
        client.set("queued.min.messages", QUEUED_MIN_MESSAGES);
    }
    if config.stream_threads > 1 && client.get("max.partition.fetch.bytes").is_none() {
        client.set("max.partition.fetch.bytes", SPLIT_MAX_PARTITION_FETCH_BYTES);
    }
    if client.get("fetch.wait.max.ms").is_none() {
        client.set("fetch.wait.max.ms", FETCH_WAIT_MAX_MS);
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
    fn clients_are_named_application_instance_role() {
        let mut config = TasksConfig {
            application_id: "wordcount".into(),
            group_instance_id: Some("host-1".into()),
            ..TasksConfig::default()
        };
        let prefix = client_prefix(&config);
        assert_eq!(prefix, "wordcount-host-1");
        assert_eq!(
            consumer_client_id(&prefix, None),
            "wordcount-host-1-consumer"
        );
        let with_endpoint = consumer_client_id(&prefix, Some("127.0.0.1:8080"));
        assert!(
            with_endpoint.starts_with("wordcount-host-1-consumer"),
            "{with_endpoint}"
        );
        assert_eq!(
            crate::group::endpoint::decode(&with_endpoint).as_deref(),
            Some("127.0.0.1:8080")
        );
        config.client_id = Some("shop".into());
        assert_eq!(client_prefix(&config), "shop-host-1");
        // The changelog clients take the prefix as their `client.id` and add their roles.
        let store = crate::StoreSpec::new("counts", "memory");
        config
            .properties
            .insert("client.id".into(), client_prefix(&config));
        let changelog = config.changelog_config(&store, 1);
        assert_eq!(
            changelog.properties.get("client.id").map(String::as_str),
            Some("shop-host-1")
        );
    }

    #[test]
    fn instances_without_a_group_instance_id_get_ids_of_their_own() {
        let config = TasksConfig {
            application_id: "wordcount".into(),
            ..TasksConfig::default()
        };
        let (a, b) = (client_prefix(&config), client_prefix(&config));
        assert!(a < b, "{a} sorts before {b}, started later");
        let instance = a
            .strip_prefix("wordcount-")
            .expect("the application id first");
        assert!(
            instance.len() == 16 && instance.bytes().all(|b| b.is_ascii_hexdigit()),
            "{a}"
        );
    }

    /// The group consumer's `key` is `default` under `config`, and `set` once the properties
    /// say so.
    fn assert_default_unless_set(
        mut config: TasksConfig,
        key: &str,
        default: Option<&str>,
        set: &str,
    ) {
        assert_eq!(consumer_config(&config).get(key), default, "{key}");
        config.properties.insert(key.into(), set.into());
        assert_eq!(consumer_config(&config).get(key), Some(set), "{key}");
    }

    #[test]
    fn the_group_consumer_fetches_again_soon_unless_the_properties_say_otherwise() {
        assert_default_unless_set(
            TasksConfig::default(),
            "fetch.queue.backoff.ms",
            Some("10"),
            "1000",
        );
    }

    #[test]
    fn the_group_consumer_waits_less_for_an_empty_fetch_unless_the_properties_say_otherwise() {
        assert_default_unless_set(
            TasksConfig::default(),
            "fetch.wait.max.ms",
            Some("100"),
            "500",
        );
    }

    #[test]
    fn the_group_consumer_keeps_fewer_records_ready_unless_the_properties_say_otherwise() {
        assert_default_unless_set(
            TasksConfig::default(),
            "queued.min.messages",
            Some("20000"),
            "100000",
        );
    }

    #[test]
    fn with_several_threads_the_group_consumer_fetches_more_of_a_partition_unless_told() {
        let key = "max.partition.fetch.bytes";
        assert_default_unless_set(TasksConfig::default(), key, None, "1048576");
        let threads = TasksConfig {
            stream_threads: 2,
            ..TasksConfig::default()
        };
        assert_default_unless_set(threads, key, Some("1572864"), "1048576");
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
