//! The Kafka changelog's options, their validation, and the redaction of secrets.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};
use store_api::{Error, Result};

use crate::record::MAX_TOPIC_LEN;

/// The placeholder printed instead of a secret property value.
pub const REDACTED: &str = "[redacted]";

/// Substrings of a property name that mark its value as secret (compared case-insensitively).
/// `key` is deliberately broad: it also hides `ssl.key.location`, a path, which costs nothing,
/// while missing `ssl.key.pem` or `ssl.key.password` would leak a credential.
const SECRET_MARKERS: &[&str] = &[
    "password",
    "secret",
    "key",
    "token",
    "credential",
    "oauthbearer.config",
];

/// Producer and consumer settings the log's guarantees rest on, with the one value accepted
/// for each. A property may repeat the value; any other value is refused.
const FIXED: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("enable.auto.commit", "false"),
    ("enable.partition.eof", "true"),
];

/// Properties set through a field of [`KafkaConfig`] instead, or not supported at all.
const REFUSED: &[(&str, &str)] = &[
    (
        "bootstrap.servers",
        "set the bootstrap_servers field instead",
    ),
    (
        "metadata.broker.list",
        "set the bootstrap_servers field instead",
    ),
    (
        "message.timeout.ms",
        "set the produce_timeout_ms field instead",
    ),
    (
        "delivery.timeout.ms",
        "set the produce_timeout_ms field instead",
    ),
    (
        "transactional.id",
        "the changelog does not use transactions",
    ),
    (
        "group.id",
        "the changelog reads by assignment, without a consumer group",
    ),
];

/// Options of a [`KafkaLog`](super::KafkaLog).
///
/// The log writes to topic `<application_id>-<store_name>-changelog`, creating it when missing
/// (compacted, `partitions` partitions, `replication_factor` replicas). Deserialize it from a
/// configuration table; unknown fields are rejected.
///
/// `Debug` and [`redacted_properties`](KafkaConfig::redacted_properties) hide the value of
/// every property whose name contains `password`, `secret`, `key`, `token`, `credential` or
/// `oauthbearer.config`, so logging a config never prints a credential.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: a comma-separated list of `host:port`. Default `localhost:9092`.
    pub bootstrap_servers: String,
    /// The application id, the first part of the topic name (Kafka Streams'
    /// `application.id`). Letters, digits, `.`, `_` and `-`. Default empty: must be set.
    pub application_id: String,
    /// The store name, the second part of the topic name. Same characters. Default empty:
    /// must be set.
    pub store_name: String,
    /// The number of partitions given to the topic when this log creates it. An existing
    /// topic keeps its own count. Default 1.
    pub partitions: u32,
    /// The replication factor given to the topic when this log creates it; `-1` asks for
    /// the broker's `default.replication.factor` (Kafka Streams' default since 3.0), which is
    /// 1 on a one-node broker and should be 3 on a production cluster. Default -1.
    pub replication_factor: i32,
    /// The longest an `append` waits for the brokers to acknowledge every record
    /// (`acks=all`), in milliseconds; also librdkafka's `message.timeout.ms`. Default 30000.
    pub produce_timeout_ms: u64,
    /// The longest a metadata, topic creation, watermark or read request waits, in
    /// milliseconds. Default 30000.
    pub admin_timeout_ms: u64,
    /// Topic-level configs given to the topic when this log creates it, such as
    /// `min.insync.replicas` (set it to 2 with 3 replicas so `acks=all` means two copies) or
    /// `max.message.bytes` (for values over 1 MB). `cleanup.policy` is always `compact`.
    /// Default empty.
    pub topic_properties: BTreeMap<String, String>,
    /// Any further librdkafka property, passed as is to the producer, the consumer and the
    /// admin client: security (`security.protocol`, `sasl.*`, `ssl.*`), tuning (`linger.ms`,
    /// `compression.type`, ...). Default empty. Properties the log's guarantees rest on
    /// (`acks`, `enable.idempotence`, ...) may only repeat the log's value.
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            bootstrap_servers: "localhost:9092".to_owned(),
            application_id: String::new(),
            store_name: String::new(),
            partitions: 1,
            replication_factor: -1,
            produce_timeout_ms: 30_000,
            admin_timeout_ms: 30_000,
            topic_properties: BTreeMap::new(),
            properties: BTreeMap::new(),
        }
    }
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("application_id", &self.application_id)
            .field("store_name", &self.store_name)
            .field("partitions", &self.partitions)
            .field("replication_factor", &self.replication_factor)
            .field("produce_timeout_ms", &self.produce_timeout_ms)
            .field("admin_timeout_ms", &self.admin_timeout_ms)
            .field("topic_properties", &self.topic_properties)
            .field("properties", &self.redacted_properties())
            .finish()
    }
}

/// True when the value of property `key` must never be printed.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_MARKERS.iter().any(|marker| key.contains(marker))
}

impl KafkaConfig {
    /// The changelog topic: `<application_id>-<store_name>-changelog`.
    pub fn topic(&self) -> String {
        format!("{}-{}-changelog", self.application_id, self.store_name)
    }

    /// The properties with every secret value replaced by `[redacted]`, for logs and errors.
    pub fn redacted_properties(&self) -> BTreeMap<&str, &str> {
        self.properties
            .iter()
            .map(|(key, value)| {
                let shown = if is_secret(key) { REDACTED } else { value };
                (key.as_str(), shown)
            })
            .collect()
    }

    /// The produce (acknowledgement) timeout.
    pub fn produce_timeout(&self) -> Duration {
        Duration::from_millis(self.produce_timeout_ms)
    }

    /// The metadata, admin and read timeout.
    pub fn admin_timeout(&self) -> Duration {
        Duration::from_millis(self.admin_timeout_ms)
    }

    /// Checks names, counts, timeouts and properties.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad option (never a secret value).
    pub fn validate(&self) -> Result<()> {
        validate_name("application_id", &self.application_id)?;
        validate_name("store_name", &self.store_name)?;
        validate_topic(&self.topic())?;
        self.validate_settings()
    }

    /// Checks everything but the application id and store name, which a log opened on an
    /// explicit topic does not use.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad option (never a secret value).
    pub fn validate_settings(&self) -> Result<()> {
        if self.bootstrap_servers.trim().is_empty() {
            return Err(Error::invalid("kafka bootstrap_servers is empty"));
        }
        if self.partitions == 0 || i32::try_from(self.partitions).is_err() {
            return Err(Error::invalid(
                "kafka partitions must be between 1 and 2^31-1",
            ));
        }
        if self.replication_factor == 0 || self.replication_factor < -1 {
            return Err(Error::invalid(
                "kafka replication_factor must be -1 or positive",
            ));
        }
        validate_timeout("produce_timeout_ms", self.produce_timeout_ms)?;
        validate_timeout("admin_timeout_ms", self.admin_timeout_ms)?;
        if let Some(policy) = self.topic_properties.get("cleanup.policy")
            && policy != "compact"
        {
            return Err(Error::invalid(format!(
                "kafka topic property cleanup.policy must be \"compact\", not {policy:?}: a \
                 changelog keeps the latest record of every key"
            )));
        }
        self.properties
            .iter()
            .try_for_each(|(key, value)| validate_property(key, value))
    }

    /// A librdkafka client configuration holding the bootstrap servers and every passthrough
    /// property. Callers add their role's settings.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config.set("bootstrap.servers", &self.bootstrap_servers);
        config
    }

    /// [`client_config`](KafkaConfig::client_config) for one role of client, named as Kafka
    /// Streams names its clients: `client.id` is the `client.id` property (or, without one,
    /// the application id) followed by `-<role>` (`-producer`, `-restore-consumer`,
    /// `-admin`), so the brokers' logs, quotas and metrics tell the clients apart.
    pub(crate) fn role_config(&self, role: &str) -> ClientConfig {
        let mut config = self.client_config();
        let prefix = self
            .properties
            .get("client.id")
            .unwrap_or(&self.application_id);
        if !prefix.is_empty() {
            config.set("client.id", format!("{prefix}-{role}"));
        }
        config
    }
}

/// Checks a whole topic name: Kafka's characters, at most 249 bytes, not `.` or `..`.
///
/// # Errors
/// `InvalidArgument` naming the topic.
pub fn validate_topic(topic: &str) -> Result<()> {
    validate_name("topic", topic)?;
    if topic.len() > MAX_TOPIC_LEN || topic == "." || topic == ".." {
        return Err(Error::invalid(format!(
            "kafka topic {topic:?} must not be \".\" or \"..\" nor longer than {MAX_TOPIC_LEN} bytes"
        )));
    }
    Ok(())
}

fn validate_name(field: &str, name: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(allowed) {
        return Err(Error::invalid(format!(
            "kafka {field} {name:?} must be non-empty and hold only letters, digits, '.', '_' \
             and '-'"
        )));
    }
    Ok(())
}

fn validate_timeout(field: &str, millis: u64) -> Result<()> {
    // librdkafka takes timeouts as a C int of milliseconds.
    if millis == 0 || i32::try_from(millis).is_err() {
        return Err(Error::invalid(format!(
            "kafka {field} must be between 1 and 2^31-1 milliseconds"
        )));
    }
    Ok(())
}

fn validate_property(key: &str, value: &str) -> Result<()> {
    let key_lower = key.to_ascii_lowercase();
    if let Some((_, why)) = REFUSED.iter().find(|(refused, _)| *refused == key_lower) {
        return Err(Error::invalid(format!(
            "kafka property {key:?} is not accepted: {why}"
        )));
    }
    if let Some((_, fixed)) = FIXED.iter().find(|(name, _)| *name == key_lower) {
        let same = value.eq_ignore_ascii_case(fixed) || (*fixed == "all" && value == "-1");
        if !same {
            return Err(Error::invalid(format!(
                "kafka property {key:?} must be {fixed:?}: the changelog's durability rests on it"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named() -> KafkaConfig {
        KafkaConfig {
            application_id: "app".into(),
            store_name: "counts".into(),
            ..KafkaConfig::default()
        }
    }

    #[test]
    fn each_client_is_named_by_its_prefix_and_role() {
        let mut config = named();
        let id = |config: &KafkaConfig, role| {
            config.role_config(role).get("client.id").map(str::to_owned)
        };
        assert_eq!(id(&config, "producer").as_deref(), Some("app-producer"));
        config
            .properties
            .insert("client.id".into(), "app-host1-0".into());
        assert_eq!(
            id(&config, "restore-consumer").as_deref(),
            Some("app-host1-0-restore-consumer")
        );
        assert_eq!(id(&config, "admin").as_deref(), Some("app-host1-0-admin"));
        let unnamed = KafkaConfig::default();
        assert_eq!(id(&unnamed, "producer"), None);
    }

    #[test]
    fn topic_is_application_store_changelog() {
        assert_eq!(named().topic(), "app-counts-changelog");
        assert!(named().validate().is_ok());
    }

    #[test]
    fn secrets_are_redacted_in_debug_and_redacted_properties() {
        let mut config = named();
        for (key, value) in [
            ("sasl.password", "hunter2-a"),
            ("ssl.key.password", "hunter2-b"),
            ("sasl.oauthbearer.client.secret", "hunter2-c"),
            ("SSL.KEY.PEM", "hunter2-d"),
            ("sasl.username", "alice"),
            ("security.protocol", "SASL_SSL"),
        ] {
            config.properties.insert(key.into(), value.into());
        }
        let printed = format!("{config:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(
            printed.contains("alice") && printed.contains("SASL_SSL"),
            "{printed}"
        );
        let shown = config.redacted_properties();
        assert_eq!(shown["sasl.password"], REDACTED);
        assert_eq!(shown["SSL.KEY.PEM"], REDACTED);
        assert_eq!(shown["sasl.username"], "alice");
    }

    #[test]
    fn names_must_be_valid_topic_parts() {
        for bad in ["", "a/b", "a b", "ä", "a\0"] {
            let config = KafkaConfig {
                store_name: bad.into(),
                ..named()
            };
            assert!(config.validate().is_err(), "{bad:?} accepted");
        }
        let long = KafkaConfig {
            store_name: "s".repeat(250),
            ..named()
        };
        assert!(long.validate().is_err());
    }

    #[test]
    fn guarantees_cannot_be_weakened_through_properties() {
        for (key, value) in [
            ("acks", "1"),
            ("enable.idempotence", "false"),
            ("bootstrap.servers", "elsewhere:9092"),
            ("transactional.id", "t"),
            ("group.id", "g"),
        ] {
            let mut config = named();
            config.properties.insert(key.into(), value.into());
            assert!(config.validate().is_err(), "{key}={value} accepted");
        }
        let mut config = named();
        config.properties.insert("acks".into(), "-1".into());
        config.properties.insert("linger.ms".into(), "5".into());
        assert!(config.validate().is_ok());
    }

    #[test]
    fn counts_and_timeouts_are_checked() {
        let bad = [
            KafkaConfig {
                partitions: 0,
                ..named()
            },
            KafkaConfig {
                replication_factor: 0,
                ..named()
            },
            KafkaConfig {
                replication_factor: -2,
                ..named()
            },
            KafkaConfig {
                produce_timeout_ms: 0,
                ..named()
            },
            KafkaConfig {
                admin_timeout_ms: u64::MAX,
                ..named()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?} accepted");
        }
    }

    #[test]
    fn deserializes_with_defaults_and_rejects_unknown_fields() {
        let config: KafkaConfig = serde_json::from_value(serde_json::json!({
            "application_id": "app",
            "store_name": "counts",
            "properties": { "security.protocol": "SSL" }
        }))
        .unwrap();
        assert_eq!(config.partitions, 1);
        assert_eq!(config.replication_factor, -1, "the broker's default");
        assert_eq!(config.properties["security.protocol"], "SSL");
        let unknown = serde_json::from_value::<KafkaConfig>(serde_json::json!({ "acks": "1" }));
        assert!(unknown.is_err());
    }
}
