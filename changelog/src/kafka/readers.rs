//! The reader consumers that the changelogs of one [`KafkaClients`](super::KafkaClients) share:
//! lent to one read at a time, kept idle for the next.

use parking_lot::Mutex;
use rdkafka::ClientConfig;
use store_api::Result;

use super::error::convert;
use super::watch::{WatchedConsumer, WatchedContext};

/// The reader consumers kept idle for the next read; more run while more reads do at once.
const IDLE_READERS: usize = 2;

/// The group id of readers whose clients name no application (a log opened on an explicit
/// topic). librdkafka needs a group id before it accepts an assignment; a reader never
/// subscribes, so it never joins the group and commits nothing, but it looks up the group's
/// coordinator, which the broker authorises as DESCRIBE on the group.
const FALLBACK_GROUP: &str = "statestore-changelog-reader";

/// How long a broker may hold a fetch that finds no new record (librdkafka's default is 500).
/// The reader fetches only while a read runs, so a short wait costs no idle traffic, and a
/// read that reaches the end of the partition learns it after 10 ms instead of 500.
const FETCH_WAIT_MS: &str = "10";

/// How long librdkafka waits before it fetches again for a partition whose fetched records
/// reached `queued.min.messages` (librdkafka's default is 1000): a restore that applies its
/// batches faster than the queue refills would otherwise sit idle for a second at a time.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// Creates a reader consumer from `base` (bootstrap servers and passthrough properties).
///
/// # Errors
/// `InvalidArgument` for a property librdkafka refuses.
fn new_consumer(base: &ClientConfig, group: &str) -> Result<WatchedConsumer> {
    let mut config = base.clone();
    if config.get("fetch.wait.max.ms").is_none() {
        config.set("fetch.wait.max.ms", FETCH_WAIT_MS);
    }
    if config.get("fetch.queue.backoff.ms").is_none() {
        config.set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    }
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        // librdkafka's default, named because restores depend on it: an aborted
        // transaction's records are never returned, and the end of the partition (its
        // watermark and end-of-partition event) is the last stable offset, below any
        // transaction still open.
        .set("isolation.level", "read_committed");
    config
        .create_with_context(WatchedContext::default())
        .map_err(|err| convert("creating the kafka consumer", err))
}

/// Reader consumers made from one configuration: an idle one for each read, or a new one.
pub struct ReaderPool {
    base: ClientConfig,
    group: String,
    idle: Mutex<Vec<WatchedConsumer>>,
}

impl ReaderPool {
    /// A pool of consumers made from `base` (bootstrap servers and passthrough properties).
    /// They take `application_id` as their group id, so the application's group ACL (READ on
    /// the group, as Kafka Streams documents) covers them and no other group is ever named;
    /// with no application id, a fixed one.
    pub fn new(base: ClientConfig, application_id: &str) -> ReaderPool {
        let group = if application_id.is_empty() {
            FALLBACK_GROUP
        } else {
            application_id
        };
        ReaderPool {
            base,
            group: group.to_owned(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `read` with a reader consumer: an idle one, or a new one. It goes back to the
    /// idle ones after a read that succeeded; one whose read failed is dropped, so that the
    /// next read starts from the brokers' answers rather than from what the failed consumer
    /// cached (librdkafka keeps a leader it learned as unavailable, while the broker was
    /// fenced, until its next periodic metadata refresh).
    ///
    /// # Errors
    /// `read`'s error, or that of creating a consumer.
    pub fn with_reader<T>(&self, read: impl FnOnce(&WatchedConsumer) -> Result<T>) -> Result<T> {
        let consumer = self.take()?;
        let result = read(&consumer);
        if result.is_ok() {
            self.give_back(consumer);
        }
        result
    }

    /// An idle reader consumer, or a new one.
    ///
    /// # Errors
    /// `InvalidArgument` for a property librdkafka refuses.
    pub fn take(&self) -> Result<WatchedConsumer> {
        if let Some(consumer) = self.idle.lock().pop() {
            return Ok(consumer);
        }
        new_consumer(&self.base, &self.group)
    }

    /// Keeps an unassigned reader consumer for the next read (or drops it when enough are
    /// idle).
    pub fn give_back(&self, consumer: WatchedConsumer) {
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_READERS {
            idle.push(consumer);
        }
    }
}
