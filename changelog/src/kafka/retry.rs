//! Which Kafka errors a later attempt may not meet, and the retry loop that waits them out.
//!
//! A broker that dies, restarts or hands a partition's leadership to another answers for a
//! few seconds with errors that say "ask again later" (NOT_LEADER_OR_FOLLOWER, a lost
//! connection, a coordinator moving). Kafka Streams' StoreChangelogReader retries such
//! errors until the operation's own timeout; so does every request of this crate's restore,
//! standby, metadata and topic paths, through [`retry`]. Only when the deadline passes does
//! the caller get an error, and then an [`Error::Timeout`] naming the last answer.

use std::thread;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use store_api::{Error, Result};

use super::error::convert;

/// The first pause after a retriable error; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest pause between two attempts: a leader elected after a broker's death (about
/// the brokers' session timeout, 9 s by default) is found within a second of it.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Whether a request that failed with `err` may succeed when sent again, after librdkafka
/// learned the cluster's new state: a leader or coordinator that moved, a broker that is
/// down or restarting, a topic not yet in every broker's metadata, a request that timed out.
///
/// The one place that says which errors are retriable; [`is_retriable_code`] the same for
/// a bare code.
pub fn is_retriable(err: &KafkaError) -> bool {
    let code = match err {
        KafkaError::AdminOp(code) => Some(*code),
        // librdkafka says the consumer cannot go on, whatever the code.
        KafkaError::MessageConsumptionFatal(_) => None,
        // A configuration, a message or a canceled operation carry no code: refused the
        // same way again.
        other => other.rdkafka_error_code(),
    };
    code.is_some_and(is_retriable_code)
}

/// [`is_retriable`] for a code: broker answers that Kafka's protocol marks retriable, and
/// librdkafka's local errors for a broker it cannot reach (yet).
pub fn is_retriable_code(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        // The partition's leader moved, is being elected, or is not known yet (a topic just
        // created, a broker just restarted).
        C::NotLeaderForPartition
            | C::LeaderNotAvailable
            | C::UnknownTopicOrPartition
            | C::ReplicaNotAvailable
            | C::FencedLeaderEpoch
            | C::UnknownLeaderEpoch
            | C::OffsetNotAvailable
            | C::PreferredLeaderNotAvailable
            | C::EligibleLeadersNotAvailable
            | C::NotEnoughReplicas
            | C::NotEnoughReplicasAfterAppend
            | C::KafkaStorageError
            // The group coordinator moved or is loading its state.
            | C::NotCoordinator
            | C::CoordinatorNotAvailable
            | C::CoordinatorLoadInProgress
            | C::UnstableOffsetCommit
            // The controller moved (topic creation).
            | C::NotController
            // A broker that went away, did not answer in time, or asks to slow down.
            | C::RequestTimedOut
            | C::BrokerNotAvailable
            | C::NetworkException
            | C::ThrottlingQuotaExceeded
            // librdkafka's own: no connection yet, every connection down, waiting for the
            // coordinator, the metadata or a broker, or its own timeout of the request.
            | C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::Resolve
            | C::OperationTimedOut
            | C::MessageTimedOut
            | C::TimedOutQueue
            | C::WaitingForCoordinator
            | C::WaitCache
            | C::NodeUpdate
            | C::UnknownBroker
            // A broker the cluster's metadata no longer lists (a KRaft broker fenced after
            // its death) has its handle destroyed, failing what waited on it.
            | C::DestroyBroker
            | C::UnknownPartition
            | C::Retry
    )
}

/// Whether a consumer that met `err` can never get past it by fetching again: the broker
/// refused the principal (authentication, or authorisation of the topic, group, cluster or
/// transactional id), or a record cannot be read (corrupt, or compressed with a codec this
/// build lacks, which librdkafka reports as not implemented and fetches again forever). A
/// poll loop returns these instead of logging them as transient.
pub fn is_fatal_for_consumer(err: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    if matches!(err, KafkaError::MessageConsumptionFatal(_)) {
        return true;
    }
    matches!(
        err.rdkafka_error_code(),
        Some(
            C::Authentication
                | C::SaslAuthenticationFailed
                | C::IllegalSASLState
                | C::UnsupportedSASLMechanism
                | C::TopicAuthorizationFailed
                | C::GroupAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::TransactionalIdAuthorizationFailed
                | C::DelegationTokenAuthorizationFailed
                | C::NotImplemented
                | C::UnsupportedCompressionType
                | C::BadCompression
                | C::InvalidRecord
                | C::InvalidMessage
                | C::BadMessage
                | C::SSL
        )
    )
}

/// Runs `attempt` until it succeeds, fails with an error that is not [retriable](is_retriable),
/// or `timeout` has passed since the first attempt, pausing between attempts (50 ms doubling
/// to 1 s). Each attempt is given the time it may take: what is left of `timeout`, at most a
/// third of it, so that an attempt stuck on a dead broker leaves time for one sent after the
/// leadership moved. `doing` names the operation in errors.
///
/// # Errors
/// `Timeout` when the deadline passes on retriable errors (naming the last one); the error
/// [`convert`]ed otherwise.
pub fn retry<T>(
    doing: &str,
    timeout: Duration,
    mut attempt: impl FnMut(Duration) -> KafkaResult<T>,
) -> Result<T> {
    let mut retry = Retry::new(doing, timeout);
    loop {
        match attempt(retry.attempt_timeout()) {
            Ok(value) => return Ok(value),
            Err(err) => retry.failed(err)?,
        }
    }
}

/// The state of a [`retry`] loop, for callers whose attempt is more than one call (an
/// answer with errors per item, a metadata refresh before the next attempt).
#[derive(Debug)]
pub struct Retry {
    doing: String,
    timeout: Duration,
    deadline: Instant,
    backoff: Duration,
    attempts: u32,
}

impl Retry {
    /// A loop for `doing` that may go on for `timeout` from now.
    pub fn new(doing: &str, timeout: Duration) -> Retry {
        Retry {
            doing: doing.to_owned(),
            timeout,
            deadline: Instant::now() + timeout,
            backoff: FIRST_BACKOFF,
            attempts: 0,
        }
    }

    /// The time the next attempt may take: what is left, at most a third of the timeout
    /// (never less than 1 ms, which librdkafka would read as "do not wait").
    pub fn attempt_timeout(&self) -> Duration {
        let left = self.deadline.saturating_duration_since(Instant::now());
        left.min((self.timeout / 3).max(Duration::from_secs(1)))
            .max(Duration::from_millis(1))
    }

    /// How many attempts failed so far.
    pub fn failures(&self) -> u32 {
        self.attempts
    }

    /// After a failed attempt: pauses and returns `Ok` when `err` is retriable and time is
    /// left for another attempt.
    ///
    /// # Errors
    /// `Timeout` when the deadline has passed (or would during the pause) on a retriable
    /// error; the error [`convert`]ed when it is not retriable.
    pub fn failed(&mut self, err: KafkaError) -> Result<()> {
        if !is_retriable(&err) {
            return Err(convert(&self.doing, err));
        }
        self.attempts += 1;
        let now = Instant::now();
        if now + self.backoff >= self.deadline {
            return Err(Error::Timeout(format!(
                "kafka, while {}: still failing after {} attempts in {:?}: {err}",
                self.doing, self.attempts, self.timeout
            )));
        }
        tracing::debug!(doing = %self.doing, %err, attempt = self.attempts, "retrying a kafka request");
        thread::sleep(self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use store_api::ErrorKind;

    use super::*;

    #[test]
    fn leader_coordinator_and_transport_errors_are_retriable() {
        use RDKafkaErrorCode as C;
        for code in [
            C::NotLeaderForPartition,
            C::LeaderNotAvailable,
            C::UnknownTopicOrPartition,
            C::RequestTimedOut,
            C::NotCoordinator,
            C::CoordinatorNotAvailable,
            C::CoordinatorLoadInProgress,
            C::BrokerNotAvailable,
            C::NetworkException,
            C::NotEnoughReplicas,
            C::BrokerTransportFailure,
            C::AllBrokersDown,
            C::OperationTimedOut,
            C::WaitingForCoordinator,
            C::NotController,
            C::DestroyBroker,
        ] {
            assert!(is_retriable_code(code), "{code:?}");
        }
        for code in [
            C::TopicAuthorizationFailed,
            C::InvalidReplicationFactor,
            C::TopicAlreadyExists,
            C::InvalidConfig,
            C::PolicyViolation,
            C::MessageSizeTooLarge,
            C::OffsetOutOfRange,
            C::InvalidArgument,
            C::Fatal,
            C::ProducerFenced,
            C::UnknownMemberId,
        ] {
            assert!(!is_retriable_code(code), "{code:?}");
        }
    }

    #[test]
    fn the_error_variants_carry_their_codes() {
        // The error seen in issue 31: a watermarks request answered NOT_LEADER_OR_FOLLOWER.
        let watermarks = KafkaError::MetadataFetch(RDKafkaErrorCode::NotLeaderForPartition);
        assert!(is_retriable(&watermarks));
        // The same request while the dead leader's handle went away (seen in broker_faults).
        let destroyed = KafkaError::MetadataFetch(RDKafkaErrorCode::DestroyBroker);
        assert!(is_retriable(&destroyed));
        assert!(is_retriable(&KafkaError::AdminOp(
            RDKafkaErrorCode::NotController
        )));
        assert!(is_retriable(&KafkaError::ConsumerCommit(
            RDKafkaErrorCode::CoordinatorNotAvailable
        )));
        assert!(!is_retriable(&KafkaError::MetadataFetch(
            RDKafkaErrorCode::TopicAuthorizationFailed
        )));
        assert!(!is_retriable(&KafkaError::Canceled));
    }

    #[test]
    fn retriable_errors_are_retried_until_an_answer() {
        let calls = Cell::new(0);
        let answer = retry("x", Duration::from_secs(10), |_| {
            calls.set(calls.get() + 1);
            if calls.get() < 4 {
                Err(KafkaError::MetadataFetch(
                    RDKafkaErrorCode::NotLeaderForPartition,
                ))
            } else {
                Ok(7)
            }
        });
        assert_eq!(answer.expect("the fourth attempt answers"), 7);
        assert_eq!(calls.get(), 4);
    }

    #[test]
    fn retriable_errors_become_a_timeout_at_the_deadline() {
        let started = Instant::now();
        let err = retry(
            "fetching x",
            Duration::from_millis(400),
            |_| -> KafkaResult<()> {
                Err(KafkaError::MetadataFetch(
                    RDKafkaErrorCode::LeaderNotAvailable,
                ))
            },
        )
        .expect_err("never answers");
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        assert!(err.to_string().contains("fetching x"), "{err}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[test]
    fn other_errors_fail_at_once() {
        let calls = Cell::new(0);
        let err = retry("x", Duration::from_secs(10), |_| -> KafkaResult<()> {
            calls.set(calls.get() + 1);
            Err(KafkaError::MetadataFetch(
                RDKafkaErrorCode::TopicAuthorizationFailed,
            ))
        })
        .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn an_attempt_gets_at_most_a_third_of_the_timeout() {
        let retry = Retry::new("x", Duration::from_secs(30));
        assert!(retry.attempt_timeout() <= Duration::from_secs(10));
        let short = Retry::new("x", Duration::from_millis(500));
        assert!(short.attempt_timeout() <= Duration::from_millis(500));
    }
}
