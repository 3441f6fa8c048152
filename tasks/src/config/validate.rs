//! The checks of a configuration, made without contacting a broker.

use std::collections::BTreeMap;

use statestore_changelog::validate_topic;
use store_api::{Error, Result};

use super::{AssignmentStrategy, ErrorAction, MAX_STREAM_THREADS, StoreSpec, TasksConfig};

impl TasksConfig {
    /// Checks the input topics: at least one, each a Kafka topic name, none twice, and several
    /// only with range assignment.
    fn validate_inputs(&self) -> Result<()> {
        if self.input_topics.is_empty() {
            return Err(Error::invalid("no input topic is configured"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for input in &self.input_topics {
            if let Err(err) = validate_topic(input) {
                return Err(Error::invalid(format!(
                    "input topic {input:?} is not a Kafka topic name: {err}"
                )));
            }
            if !seen.insert(input) {
                return Err(Error::invalid(format!(
                    "input topic {input:?} is configured twice"
                )));
            }
        }
        if let Some(topic) = self
            .repartition_topics
            .iter()
            .find(|topic| !self.input_topics.contains(topic))
        {
            return Err(Error::invalid(format!(
                "repartition topic {topic:?} is not an input topic: the application creates it \
                 to read it"
            )));
        }
        if self.input_topics.len() > 1 && self.assignment_strategy != AssignmentStrategy::Range {
            return Err(Error::invalid(format!(
                "{} input topics are configured with assignment_strategy {:?}: a task owns the \
                 same partition of every input topic, which of librdkafka's assignors only \
                 range guarantees",
                self.input_topics.len(),
                self.assignment_strategy.librdkafka_name()
            )));
        }
        Ok(())
    }

    /// Checks the sub-topologies: numbers unique, each input topic read by exactly one, each
    /// store held by exactly one.
    fn validate_subtopologies(&self) -> Result<()> {
        if self.subtopologies.is_empty() {
            return Ok(());
        }
        let mut ids = std::collections::BTreeSet::new();
        let mut topics = BTreeMap::new();
        let mut stores = BTreeMap::new();
        for sub in &self.subtopologies {
            if !ids.insert(sub.id) {
                return Err(Error::invalid(format!(
                    "sub-topology {} is configured twice",
                    sub.id
                )));
            }
            if sub.input_topics.is_empty() {
                return Err(Error::invalid(format!(
                    "sub-topology {} reads no input topic",
                    sub.id
                )));
            }
            for (names, seen, what) in [
                (&sub.input_topics, &mut topics, "input topic"),
                (&sub.stores, &mut stores, "store"),
            ] {
                for name in names {
                    if let Some(other) = seen.insert(name.as_str(), sub.id) {
                        return Err(Error::invalid(format!(
                            "{what} {name:?} is in sub-topologies {other} and {}",
                            sub.id
                        )));
                    }
                }
            }
        }
        if let Some(topic) = self
            .input_topics
            .iter()
            .find(|topic| !topics.contains_key(topic.as_str()))
        {
            return Err(Error::invalid(format!(
                "input topic {topic:?} is in no sub-topology"
            )));
        }
        if let Some(topic) = topics
            .keys()
            .find(|topic| !self.input_topics.iter().any(|input| input == *topic))
        {
            return Err(Error::invalid(format!(
                "sub-topology input topic {topic:?} is not an input topic"
            )));
        }
        if let Some(store) = self
            .stores
            .iter()
            .find(|store| !stores.contains_key(store.name.as_str()))
        {
            return Err(Error::invalid(format!(
                "store {:?} is in no sub-topology",
                store.name
            )));
        }
        if let Some(store) = stores
            .keys()
            .find(|name| !self.stores.iter().any(|store| store.name == **name))
        {
            return Err(Error::invalid(format!(
                "sub-topology store {store:?} is not a configured store"
            )));
        }
        Ok(())
    }

    /// Checks every option without contacting a broker.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad option.
    pub fn validate(&self) -> Result<()> {
        validate_application_id(&self.application_id)?;
        self.validate_client_id()?;
        if self.bootstrap_servers.trim().is_empty() {
            return Err(Error::invalid("bootstrap_servers is empty"));
        }
        self.validate_inputs()?;
        if self.stores.is_empty() {
            return Err(Error::invalid("no store is configured"));
        }
        self.validate_subtopologies()?;
        let mut names = std::collections::BTreeSet::new();
        for store in &self.stores {
            if !names.insert(store.name.as_str()) {
                return Err(Error::invalid(format!(
                    "store {:?} is configured twice",
                    store.name
                )));
            }
            if let Err(err) = statestore::resolve(&store.backend) {
                return Err(Error::invalid(format!("store {:?}: {err}", store.name)));
            }
            store.kind.validate(&store.name)?;
            let changelog = self.changelog_config(store, 1);
            changelog.validate()?;
            let topic = changelog.topic();
            if self.input_topics.contains(&topic) {
                return Err(Error::invalid(format!(
                    "input topic {topic:?} is the changelog topic of store {:?}: the application \
                     would process its own state updates",
                    store.name
                )));
            }
        }
        for (name, value) in [
            ("commit_interval_ms", self.commit_interval_ms),
            ("session_timeout_ms", self.session_timeout_ms),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("max_poll_interval_ms", self.max_poll_interval_ms),
            ("request_timeout_ms", self.request_timeout_ms),
        ] {
            if value == 0 || i32::try_from(value).is_err() {
                return Err(Error::invalid(format!(
                    "{name} must be between 1 and 2^31-1 milliseconds, not {value}"
                )));
            }
        }
        if self.max_poll_interval_ms < self.session_timeout_ms {
            return Err(Error::invalid(format!(
                "max_poll_interval_ms ({}) must be at least session_timeout_ms ({})",
                self.max_poll_interval_ms, self.session_timeout_ms
            )));
        }
        if self.heartbeat_interval_ms >= self.session_timeout_ms {
            return Err(Error::invalid(format!(
                "heartbeat_interval_ms ({}) must be below session_timeout_ms ({})",
                self.heartbeat_interval_ms, self.session_timeout_ms
            )));
        }
        if !(1..=MAX_STREAM_THREADS).contains(&self.stream_threads) {
            return Err(Error::invalid(format!(
                "stream_threads must be between 1 and {MAX_STREAM_THREADS}, not {}",
                self.stream_threads
            )));
        }
        if !(1_000..=MAX_TRANSACTION_TIMEOUT_MS).contains(&self.transaction_timeout_ms) {
            return Err(Error::invalid(format!(
                "transaction_timeout_ms must be between 1000 and {MAX_TRANSACTION_TIMEOUT_MS} \
                 (the brokers' default transaction.max.timeout.ms), not {}",
                self.transaction_timeout_ms
            )));
        }
        if self.max_poll_records == 0 {
            return Err(Error::invalid("max_poll_records must be at least 1"));
        }
        if self.restore_parallelism == 0 {
            return Err(Error::invalid("restore_parallelism must be at least 1"));
        }
        if let Some(snapshots) = &self.snapshots {
            snapshots.validate()?;
        }
        validate_replication(self)?;
        validate_error_handling(self)?;
        if let Some(id) = &self.group_instance_id {
            validate_group_instance_id(id)?;
        }
        Ok(())
    }
}

/// The brokers' default `transaction.max.timeout.ms`: they refuse a longer transaction
/// timeout.
const MAX_TRANSACTION_TIMEOUT_MS: u64 = 900_000;

/// Checks an application id as Kafka Streams does: not empty, only `[A-Za-z0-9._-]`.
///
/// # Errors
/// `InvalidArgument` naming the id and the rule.
pub fn validate_application_id(id: &str) -> Result<()> {
    if let Err(err) = validate_topic(id) {
        return Err(Error::invalid(format!(
            "application_id {id:?} is not valid, as a part of topic names: {err}"
        )));
    }
    Ok(())
}

impl TasksConfig {
    /// `client_id` holds only the characters of a Kafka name, and no property sets
    /// `client.id` past it.
    fn validate_client_id(&self) -> Result<()> {
        if self.properties.contains_key("client.id") {
            return Err(Error::invalid(
                "the property client.id is set through the client_id field, which each \
                 client's role follows",
            ));
        }
        let Some(id) = &self.client_id else {
            return Ok(());
        };
        if let Err(err) = validate_topic(id) {
            return Err(Error::invalid(format!(
                "client_id {id:?} is not valid: {err}"
            )));
        }
        Ok(())
    }
}

/// The topic property that says how many replicas must hold a write before `acks=all` returns.
pub(super) const MIN_INSYNC: &str = "min.insync.replicas";

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

/// The longest `group.instance.id` accepted: Kafka's limit for names it keeps, as for topics.
const MAX_GROUP_INSTANCE_ID: usize = 249;

/// Checks a `group.instance.id` as Kafka does: 1 to 249 characters of `[A-Za-z0-9._-]`.
///
/// # Errors
/// `InvalidArgument` naming the id and the rule.
pub(super) fn validate_group_instance_id(id: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > MAX_GROUP_INSTANCE_ID || !id.chars().all(allowed) {
        return Err(Error::invalid(format!(
            "group_instance_id {id:?} must hold 1 to {MAX_GROUP_INSTANCE_ID} letters, digits, \
             '.', '_' or '-'"
        )));
    }
    Ok(())
}

/// Checks the handlers' options: a dead-letter action needs a topic.
///
/// # Errors
/// `InvalidArgument` naming the option.
fn validate_error_handling(config: &TasksConfig) -> Result<()> {
    let dead_letters =
        [config.processing_error, config.deserialization_error].contains(&ErrorAction::DeadLetter);
    match &config.dead_letter_topic {
        None if dead_letters => Err(Error::invalid(
            "a dead_letter error action needs dead_letter_topic: the topic failed records go to",
        )),
        Some(topic) if config.input_topics.contains(topic) => Err(Error::invalid(format!(
            "dead_letter_topic {topic:?} is an input topic: the application would process its \
             own dead letters"
        ))),
        Some(topic) => validate_topic(topic).map_err(|err| {
            Error::invalid(format!(
                "dead_letter_topic {topic:?} is not a Kafka topic name: {err}"
            ))
        }),
        None => Ok(()),
    }
}
