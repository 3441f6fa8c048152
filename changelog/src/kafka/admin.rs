//! Topic creation and metadata checks through rdkafka's `AdminClient`.
//!
//! The admin client answers with futures that its own background thread completes, so a
//! ten-line `block_on` on `std::thread::park` drives them; no async runtime is needed.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::metadata::Metadata;
use rdkafka::types::RDKafkaErrorCode;
use store_api::{Error, Result};

use super::config::KafkaConfig;
use super::error::{convert, convert_because};
use super::retry::{Retry, is_fatal_for_consumer, is_retriable};
use super::watch::WatchedConsumer;

/// The partition count of `topic` in the brokers' metadata, or `None` when they do not know
/// the topic.
///
/// # Errors
/// `Timeout` when no broker answers within `timeout`, `Backend` otherwise.
pub fn partition_count(
    client: &WatchedConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<Option<usize>> {
    let doing = format!("fetching the metadata of topic {topic} (Metadata)");
    let metadata = metadata_retrying(client, topic, &doing, timeout)?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match found.error() {
        None if found.partitions().is_empty() => Ok(None),
        None => Ok(Some(found.partitions().len())),
        Some(code)
            if matches!(
                RDKafkaErrorCode::from(code),
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::LeaderNotAvailable
            ) =>
        {
            Ok(None)
        }
        Some(code) => Err(convert(&doing, KafkaError::MetadataFetch(code.into()))),
    }
}

/// The metadata of `topic`, [retried](retry) for `timeout`; an error that ends the retry
/// says what librdkafka said of it when its code does not (a refused certificate, a failed
/// TLS handshake or authentication: see [`WatchedContext::explain`]).
///
/// [`WatchedContext::explain`]: super::watch::WatchedContext::explain
fn metadata_retrying(
    client: &WatchedConsumer,
    topic: &str,
    doing: &str,
    timeout: Duration,
) -> Result<Metadata> {
    let mut retry = Retry::new(doing, timeout);
    loop {
        match fetch_metadata(client, topic, retry.attempt_timeout()) {
            Ok(metadata) => return Ok(metadata),
            Err(err) if !is_retriable(&err) => {
                let reason = client.context().explain(&err);
                return Err(convert_because(doing, err, reason));
            }
            Err(err) => retry.failed(err)?,
        }
    }
}

/// The metadata of `topic` within `timeout`, asked in slices from half a second up, between
/// which `consumer`'s queue is looked at: librdkafka reports a refusal of the credentials
/// (or a TLS failure) there, and every metadata request as a lost connection, so the
/// refusal ends the retry at once instead of after the timeout (see [`queued_fatal_error`]).
fn fetch_metadata(
    consumer: &WatchedConsumer,
    topic: &str,
    timeout: Duration,
) -> KafkaResult<Metadata> {
    let deadline = Instant::now() + timeout;
    let mut slice = Duration::from_millis(500);
    loop {
        if let Some(err) = queued_fatal_error(consumer) {
            return Err(err);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let this = slice.min(remaining);
        match consumer.fetch_metadata(Some(topic), this) {
            Ok(metadata) => {
                consumer.context().answered();
                return Ok(metadata);
            }
            Err(err) if this < remaining && is_retriable(&err) => {
                thread::sleep(Duration::from_millis(20).min(remaining - this));
                slice = slice.saturating_mul(2);
            }
            answer => return answer,
        }
    }
}

/// The first error no retry can change among the events queued on `consumer`, all of which
/// are taken: a refusal may be queued behind other errors (every broker down, which a
/// refused connection also makes them). A lost connection is such an error when librdkafka
/// logged it as the broker refusing this client's certificate (see [`WatchedContext`]); it
/// is reported as `SSL`.
///
/// [`WatchedContext`]: super::watch::WatchedContext
fn queued_fatal_error(consumer: &WatchedConsumer) -> Option<KafkaError> {
    let mut fatal = None;
    // rdkafka queues librdkafka's logs among the events, and a poll that does not wait
    // returns nothing once it took a log: each poll waits a millisecond to get past them.
    // Bounded, should events keep coming faster than that.
    for _ in 0..MAX_QUEUED_EVENTS {
        let Some(polled) = consumer.poll(Duration::from_millis(1)) else {
            break;
        };
        let Err(err) = polled else { continue };
        if fatal.is_some() {
            continue;
        }
        if is_fatal_for_consumer(&err) && !consumer.context().only_token_refresh(&err) {
            fatal = Some(err);
        } else if is_retriable(&err) && consumer.context().certificate_refused().is_some() {
            fatal = Some(KafkaError::MessageConsumption(RDKafkaErrorCode::SSL));
        }
    }
    fatal
}

/// The most events [`queued_fatal_error`] takes at once.
const MAX_QUEUED_EVENTS: usize = 1_000;

/// The topic config naming whose clock stamps a record: its producer's or the broker's.
const TIMESTAMP_TYPE: &str = "message.timestamp.type";

/// Creates `topic` with `admin`: compacted, `CreateTime` unless its properties say otherwise,
/// with the configured partitions, replication factor and topic properties. A topic that
/// already exists is left as it is.
///
/// # Errors
/// `Timeout` when the brokers do not answer within the admin timeout, `Backend` when they
/// refuse the topic.
pub fn create_topic(
    admin: &AdminClient<DefaultClientContext>,
    config: &KafkaConfig,
    topic: &str,
) -> Result<()> {
    let timeout = config.admin_timeout();
    let partitions = i32::try_from(config.partitions)
        .map_err(|_| Error::invalid("kafka partitions does not fit an i32"))?;
    let mut new_topic = NewTopic::new(
        topic,
        partitions,
        TopicReplication::Fixed(config.replication_factor),
    );
    // `validate` accepts only "compact" for cleanup.policy, which is set below.
    let extra = config
        .topic_properties
        .iter()
        .filter(|(key, _)| *key != "cleanup.policy");
    for (key, value) in extra {
        new_topic = new_topic.set(key, value);
    }
    new_topic = new_topic.set("cleanup.policy", "compact");
    // As Kafka Streams sets on its changelogs: the records keep the producer's timestamps
    // whatever the broker's default `log.message.timestamp.type`.
    if !config.topic_properties.contains_key(TIMESTAMP_TYPE) {
        new_topic = new_topic.set(TIMESTAMP_TYPE, "CreateTime");
    }
    let doing = format!("creating topic {topic} (CreateTopics)");
    create_retrying(admin, &new_topic, &doing, timeout)?;
    tracing::info!(%topic, partitions, "created changelog topic (or found it created)");
    Ok(())
}

/// Creates `new_topic` with `admin`, retrying retriable answers (the controller moving, a
/// broker down) until `timeout`; a topic that already exists is success. Shared with the
/// tasks crate's input-topic creation.
///
/// # Errors
/// `Timeout` when the deadline passes on retriable errors, `Backend` when the brokers refuse
/// the topic.
pub fn create_retrying(
    admin: &AdminClient<DefaultClientContext>,
    new_topic: &NewTopic<'_>,
    doing: &str,
    timeout: Duration,
) -> Result<()> {
    let mut retry = Retry::new(doing, timeout);
    loop {
        let attempt = retry.attempt_timeout();
        let options = AdminOptions::new()
            .request_timeout(Some(attempt))
            .operation_timeout(Some(attempt));
        // The admin client times the request out itself; the extra second only guards a hang.
        let answer = block_on(
            admin.create_topics([new_topic], &options),
            attempt + Duration::from_secs(1),
        )
        .unwrap_or(Err(KafkaError::AdminOp(
            RDKafkaErrorCode::OperationTimedOut,
        )));
        let code = match answer {
            // A topic that exists may be the work of an earlier attempt whose answer was lost.
            Ok(results) => match results.into_iter().find_map(Result::err) {
                None | Some((_, RDKafkaErrorCode::TopicAlreadyExists)) => return Ok(()),
                Some((_, code)) => code,
            },
            Err(err) => {
                retry.failed(err)?;
                continue;
            }
        };
        retry.failed(KafkaError::AdminOp(code))?;
    }
}

/// Waits until the brokers' metadata shows `partition` of `topic` (a new topic takes a moment
/// to appear), and returns the topic's partition count.
///
/// # Errors
/// `InvalidArgument` when the topic exists with too few partitions, `Timeout` when the
/// metadata does not show the topic within `timeout`.
pub fn await_partition(
    client: &WatchedConsumer,
    topic: &str,
    partition: u32,
    timeout: Duration,
) -> Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let doing = format!("fetching metadata of topic {topic} (Metadata)");
        let metadata = metadata_retrying(client, topic, &doing, remaining)?;
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none());
        if let Some(found) = found {
            let count = found.partitions().len();
            if usize::try_from(partition).is_ok_and(|p| p < count) {
                return Ok(count);
            }
            if count > 0 {
                return Err(Error::invalid(format!(
                    "kafka topic {topic} has {count} partitions, so partition {partition} does \
                     not exist (an existing topic keeps its partition count)"
                )));
            }
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "kafka topic {topic} did not appear in the metadata within {timeout:?}"
            )));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `future` on this thread until it completes or `timeout` passes (`None`).
pub fn block_on<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let deadline = Instant::now() + timeout;
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut context = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return Some(output);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return None;
        }
        thread::park_timeout(remaining);
    }
}

/// Wakes the blocked thread by unparking it.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}
