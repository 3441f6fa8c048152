//! librdkafka errors converted into the one store error, in one place.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use store_api::Error;

use super::config::{REDACTED, is_secret};

/// The name Kafka errors carry as [`Error::Backend`].
pub const BACKEND: &str = "kafka";

/// Converts a librdkafka error met while `doing` something into a store error.
///
/// Timeouts become [`Error::Timeout`], an oversized record [`Error::InvalidArgument`], a bad
/// configuration property an `InvalidArgument` that names the property but hides a secret
/// value (rdkafka's own message prints the value), anything else [`Error::Backend`].
pub fn convert(doing: &str, err: KafkaError) -> Error {
    convert_because(doing, err, None)
}

/// [`convert`], with what librdkafka said of the failure when its code alone does not (see
/// [`WatchedContext::explain`](super::watch::WatchedContext::explain)).
pub fn convert_because(doing: &str, err: KafkaError, reason: Option<String>) -> Error {
    if let KafkaError::ClientConfig(_, description, key, value) = &err {
        let shown = if is_secret(key) { REDACTED } else { value };
        return Error::invalid(format!(
            "kafka property {key:?} = {shown:?} refused while {doing}: {description}"
        ));
    }
    let code = match &err {
        KafkaError::AdminOp(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    match code {
        Some(code) if is_timeout(code) => Error::Timeout(format!(
            "kafka, while {doing}: {err}{}",
            reason
                .map(|reason| format!(": {reason}"))
                .unwrap_or_default()
        )),
        Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
            Error::invalid(format!("kafka refused the record while {doing}: {err}"))
        }
        _ => Error::backend(
            BACKEND,
            Context {
                doing: doing.to_owned(),
                err,
                reason: reason
                    .map(|reason| format!(": {reason}"))
                    .unwrap_or_default(),
            },
        ),
    }
}

/// A timeout reported by librdkafka, "no broker answered" (which is what a timeout looks
/// like while every broker is down), or a producer queue still full when the caller's
/// deadline passed (the producer's sends wait for room until then).
pub fn is_timeout(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageTimedOut
            | RDKafkaErrorCode::QueueFull
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::BrokerTransportFailure
    )
}

/// A Kafka error with what was being done, kept as the source of [`Error::Backend`].
#[derive(Debug, thiserror::Error)]
#[error("while {doing}: {err}{reason}")]
struct Context {
    doing: String,
    #[source]
    err: KafkaError,
    /// What librdkafka said, after ": ", or nothing.
    reason: String,
}

#[cfg(test)]
mod tests {
    use rdkafka::types::RDKafkaConfRes;

    use super::*;

    fn config_error(key: &str, value: &str) -> Error {
        let err = KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value".into(),
            key.into(),
            value.into(),
        );
        convert("creating the producer", err)
    }

    #[test]
    fn config_errors_name_the_property_but_hide_secret_values() {
        let secret = config_error("ssl.key.password", "hunter2").to_string();
        assert!(
            secret.contains("ssl.key.password") && !secret.contains("hunter2"),
            "{secret}"
        );
        let plain = config_error("linger.ms", "soon").to_string();
        assert!(plain.contains("soon"), "{plain}");
    }

    #[test]
    fn timeouts_and_oversized_records_get_their_kinds() {
        let timeout = convert("x", KafkaError::Flush(RDKafkaErrorCode::MessageTimedOut));
        assert_eq!(timeout.kind(), store_api::ErrorKind::Timeout);
        let big = convert(
            "x",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        assert_eq!(big.kind(), store_api::ErrorKind::InvalidArgument);
        let other = convert(
            "x",
            KafkaError::Global(RDKafkaErrorCode::TopicAuthorizationFailed),
        );
        assert_eq!(other.kind(), store_api::ErrorKind::Backend);
    }
}
