//! The changelog conformance suite on `KafkaLog`, against the broker named by
//! `STATESTORE_KAFKA_BOOTSTRAP` (see `kafka_support`).
#![cfg(feature = "kafka")]

mod kafka_support;

use std::collections::BTreeMap;
use std::path::Path;

use statestore_changelog::{Changelog, KafkaConfig, KafkaLog};

/// Records up to 4 MiB, so the suite's 1 MiB value fits (Kafka's defaults stop near 1 MB).
const MAX_MESSAGE_BYTES: &str = "4194304";
/// The topic's limit applies to a whole record batch, whose header and record framing come on
/// top of the producer's largest record: leave them room.
const TOPIC_MAX_MESSAGE_BYTES: &str = "4195328";

/// Opens the suite's topic as a Kafka changelog (the suite names a fresh topic per case, and
/// reopening it finds the same Kafka topic and its records).
fn kafka_factory(
    bootstrap: String,
) -> impl Fn(&Path, &str, u32) -> store_api::Result<Box<dyn Changelog>> {
    move |_dir: &Path, topic: &str, partition: u32| {
        let config = KafkaConfig {
            bootstrap_servers: bootstrap.clone(),
            produce_timeout_ms: 15_000,
            admin_timeout_ms: 15_000,
            topic_properties: BTreeMap::from([(
                "max.message.bytes".to_owned(),
                TOPIC_MAX_MESSAGE_BYTES.to_owned(),
            )]),
            properties: BTreeMap::from([(
                "message.max.bytes".to_owned(),
                MAX_MESSAGE_BYTES.to_owned(),
            )]),
            ..KafkaConfig::default()
        };
        KafkaLog::open_topic(config, topic, partition)
            .map(|log| Box::new(log) as Box<dyn Changelog>)
    }
}

// The factory expression is evaluated inside each generated `#[test]` function, so the
// `return` below ends that test early when there is no broker (see `kafka_support`).
statestore_conformance::changelog_suite!({
    let Some(bootstrap) = kafka_support::bootstrap("changelog conformance suite") else {
        return;
    };
    kafka_factory(bootstrap)
});
