//! The Kafka changelog: one partition of a compacted topic, through rdkafka (librdkafka).
//!
//! - Topic `<application_id>-<store_name>-changelog`, created when missing with the admin
//!   client: `cleanup.policy=compact`, the configured partitions and replication factor.
//! - Appends go through an idempotent producer with `acks=all` (`enable.idempotence=true`):
//!   `append` returns once every replica in sync acknowledged every record, with the offsets
//!   from the delivery reports. A put is a record with a value, a delete a record with a null
//!   value (a tombstone), so compaction keeps the latest update of every key.
//! - Commit framing is a record header `ssf`: `f` on an update inside a commit, `c` on a
//!   commit marker (key [`COMMIT_MARKER_KEY`](crate::COMMIT_MARKER_KEY), empty value).
//!   Records without it are unframed, as every record written before framing is.
//! - The largest record is `message.max.bytes` (librdkafka's default 1 000 000) less 64 bytes
//!   of room for the record's framing; keep the topic's `max.message.bytes` (which counts
//!   a whole record batch) about 1 KiB larger.
//! - Reads assign the partition to a consumer at the wanted offset (no consumer group, no
//!   offset commits), reading committed records only (`isolation.level=read_committed`):
//!   start and end offsets are the partition's low watermark and last stable offset, and
//!   the records of an aborted transaction, and the transactions' control records, leave
//!   gaps in the offsets read.
//! - With transactional clients ([`KafkaClients::set_transactional`]),
//!   [`append_transactional`](Changelog::append_transactional) appends inside the owner's
//!   open transaction; every other append (a fence, the repair of an abandoned commit) stays
//!   on the idempotent producer, outside any transaction.
//!
//! The API is synchronous: librdkafka runs its own threads, `append` waits on a condition
//! variable signalled by the delivery callback, and the admin client's futures are driven by
//! a small `block_on`. No async runtime is pulled in.

mod admin;
mod clients;
mod config;
mod error;
mod producer;
mod reader;
mod readers;
mod retry;
mod transactions;
mod watch;
mod wire;

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use store_api::{BatchOp, Error, Result};

pub use clients::{KafkaClients, SendRecord};
pub use config::{KafkaConfig, is_secret, validate_topic};
pub use producer::{Deliveries, ReportTo};

/// Not part of the API: the admin client's `block_on`, the conversion of librdkafka errors and
/// the retry of retriable ones, for the workspace's tasks crate, which talks to the same
/// brokers.
#[doc(hidden)]
pub mod util {
    pub use super::admin::{block_on, create_retrying};
    pub use super::error::{convert, convert_because};
    pub use super::retry::{Retry, is_fatal_for_consumer, is_retriable, is_retriable_code, retry};
    pub use super::watch::{WatchedContext, is_certificate_refusal, log_to_tracing};
    pub use crate::logged::fence_nonce as unique_number;
}

use crate::record::Framing;
use crate::{Changelog, ChangelogRecord};
use producer::Appender;
use reader::Reader;

/// A [`Changelog`] kept in one partition of a Kafka topic.
///
/// One `KafkaLog` should be the only writer of its partition (as a Kafka Streams task is), so
/// the records of one `append` get consecutive offsets. Reads may run while appends do.
///
/// ```no_run
/// use statestore_changelog::{Changelog, KafkaConfig, KafkaLog};
/// use store_api::BatchOp;
///
/// let config = KafkaConfig {
///     bootstrap_servers: "127.0.0.1:9092".into(),
///     application_id: "wordcount".into(),
///     store_name: "counts".into(),
///     ..KafkaConfig::default()
/// };
/// let log = KafkaLog::open(config, 0)?; // topic wordcount-counts-changelog, partition 0
/// let offsets = log.append(&[BatchOp::Put { key: b"a".to_vec(), value: b"1".to_vec() }])?;
/// assert_eq!(log.read(offsets.start, 10)?.len(), 1);
/// # Ok::<(), store_api::Error>(())
/// ```
pub struct KafkaLog {
    clients: KafkaClients,
    config: KafkaConfig,
    topic: String,
    partition: u32,
    /// Where and how this log's records are appended; serializes appends, so one call's
    /// records stay consecutive.
    appender: Mutex<Appender>,
    /// The appender's largest record, read on every buffered write: kept out of its lock,
    /// which a commit holds while it waits for the brokers.
    max_record_len: usize,
    reader: Mutex<Reader>,
    /// The writer epoch stamped on appended records (0: none).
    epoch: AtomicU64,
}

impl KafkaLog {
    /// Opens partition `partition` of topic `<application_id>-<store_name>-changelog`,
    /// creating the topic when it is missing, with Kafka clients of its own (to share them
    /// among many logs, open them through one [`KafkaClients`]).
    ///
    /// # Errors
    /// `InvalidArgument` for a bad option or property, or a partition the topic does not have;
    /// `Timeout` when no broker answers within `admin_timeout_ms`; `Backend` when the brokers
    /// refuse the topic.
    pub fn open(config: KafkaConfig, partition: u32) -> Result<KafkaLog> {
        KafkaClients::new(&config)?.open(config, partition)
    }

    /// Opens partition `partition` of `topic`, named explicitly (as a state directory's
    /// `changelog_topic` names it); `application_id` and `store_name` are not used. Creates
    /// the topic when it is missing.
    ///
    /// # Errors
    /// As [`open`](KafkaLog::open), and `InvalidArgument` for a name Kafka does not accept.
    pub fn open_topic(config: KafkaConfig, topic: &str, partition: u32) -> Result<KafkaLog> {
        KafkaClients::new(&config)?.open_topic(config, topic, partition)
    }

    /// A log of `topic`/`partition` (which exists) on `clients`.
    fn new(
        clients: KafkaClients,
        config: KafkaConfig,
        topic: &str,
        partition: u32,
    ) -> Result<KafkaLog> {
        let partition_id = i32::try_from(partition)
            .map_err(|_| Error::invalid(format!("kafka partition {partition} is too large")))?;
        let appender = Appender::new(
            clients.base(),
            topic,
            partition_id,
            clients.produce_timeout(),
        );
        let reader = Reader::new(
            clients.readers(),
            clients.admin_timeout(),
            topic,
            partition_id,
        );
        Ok(KafkaLog {
            clients,
            config,
            topic: topic.to_owned(),
            partition,
            max_record_len: appender.max_record_len(),
            appender: Mutex::new(appender),
            reader: Mutex::new(reader),
            epoch: AtomicU64::new(0),
        })
    }

    /// The configuration this log was opened with.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// The clients this log runs on.
    pub fn clients(&self) -> &KafkaClients {
        &self.clients
    }
}

impl fmt::Debug for KafkaLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaLog")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Changelog for KafkaLog {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn partition(&self) -> u32 {
        self.partition
    }

    fn max_record_len(&self) -> usize {
        self.max_record_len
    }

    fn append_framed(&self, ops: &[BatchOp], framing: Framing) -> Result<Range<u64>> {
        if ops.is_empty() && framing != Framing::Commit {
            let end = self.end_offset()?;
            return Ok(end..end);
        }
        let appender = self.appender.lock();
        appender.check_sizes(ops)?;
        let producer = self.clients.producer()?;
        let result = appender.append(&producer, ops, framing, self.epoch.load(Ordering::Relaxed));
        if result.is_err() {
            self.clients.retire(producer);
        }
        result
    }

    /// On the clients' transactional producer (see
    /// [`KafkaClients::set_transactional`]); `Unsupported` when they have none.
    fn append_transactional(&self, ops: &[BatchOp], framing: Framing) -> Result<Range<u64>> {
        let appender = self.appender.lock();
        appender.check_sizes(ops)?;
        let producer = self.clients.transaction_producer()?;
        // A failure is the transaction's: its owner aborts it, which drops these records. A
        // producer that failed for good names the fatal error behind the failure.
        appender
            .append(&producer, ops, framing, self.epoch.load(Ordering::Relaxed))
            .map_err(|err| {
                transactions::failed_for_good(&producer, "appending to a changelog").unwrap_or(err)
            })
    }

    fn set_writer_epoch(&self, epoch: u64) -> Result<()> {
        self.epoch.store(epoch, Ordering::Relaxed);
        Ok(())
    }

    /// Nothing to wait for: `append` returns only once the brokers acknowledged its records
    /// with `acks=all`, which is the Kafka log's durability.
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn read(&self, from: u64, max_records: usize) -> Result<Vec<ChangelogRecord>> {
        self.reader.lock().read(from, max_records)
    }

    fn start_offset(&self) -> Result<u64> {
        Ok(self.reader.lock().watermarks()?.0)
    }

    fn end_offset(&self) -> Result<u64> {
        Ok(self.reader.lock().watermarks()?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_secret_property_is_not_echoed() {
        let mut config = KafkaConfig {
            bootstrap_servers: "127.0.0.1:1".into(),
            application_id: "app".into(),
            store_name: "store".into(),
            ..KafkaConfig::default()
        };
        config
            .properties
            .insert("my.client.secret".into(), "hunter2".into());
        let err = KafkaLog::open(config, 0).expect_err("librdkafka knows no such property");
        let shown = format!("{err} {err:?}");
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument, "{shown}");
        assert!(
            shown.contains("my.client.secret") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn open_fails_with_timeout_when_no_broker_answers() {
        let config = KafkaConfig {
            // Port 1 on loopback: nothing listens, connections are refused at once.
            bootstrap_servers: "127.0.0.1:1".into(),
            application_id: "app".into(),
            store_name: "store".into(),
            admin_timeout_ms: 1_000,
            ..KafkaConfig::default()
        };
        let started = std::time::Instant::now();
        let err = KafkaLog::open(config, 0).expect_err("no broker");
        assert_eq!(err.kind(), store_api::ErrorKind::Timeout, "{err}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
