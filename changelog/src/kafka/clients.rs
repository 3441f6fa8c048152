//! [`KafkaClients`]: the Kafka clients that the changelogs of one process share.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::TopicPartitionList;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseRecord, Producer};
use store_api::{Error, Result};

use super::KafkaLog;
use super::admin;
use super::config::{self, KafkaConfig};
use super::error::convert;
use super::producer::{self, Deliveries, PolledProducer, ReportTo};
use super::readers::ReaderPool;
use super::transactions::Transactions;
use super::watch::WatchedConsumer;

/// The Kafka clients of one process, shared by every [`KafkaLog`] opened through them.
///
/// [`KafkaLog::open`] gives each log clients of its own. An application with many stores opens
/// them through one `KafkaClients` instead (the task runtime does), so that however many
/// changelogs it holds it runs:
/// - **one idempotent producer** for every append, and for the caller's own records
///   ([`send`](KafkaClients::send)), created at the first of them: a log that is only read
///   (a standby copy, a restore) opens none;
/// - **a few reader consumers**, lent to one read at a time and kept for the next;
/// - **one admin client**, created only to create a missing topic: a topic already seen, or
///   found in the brokers' metadata, is not created again.
///
/// One failed append stops the producer for everyone: its queued and in-flight records,
/// those of the other logs and the [`send`](KafkaClients::send)s included, are purged and fail,
/// and the next append starts a new producer (a new idempotent session), so no record of a
/// failed call lands after a later call's records.
///
/// Cloning is cheap: the clones share the clients.
#[derive(Clone)]
pub struct KafkaClients {
    inner: Arc<Inner>,
}

struct Inner {
    /// The settings every log opened through these clients must share.
    bootstrap_servers: String,
    properties: BTreeMap<String, String>,
    produce_timeout: Duration,
    admin_timeout: Duration,
    /// The producer's settings.
    base: ClientConfig,
    admin_config: ClientConfig,
    producer: Mutex<Option<Arc<PolledProducer>>>,
    readers: Arc<ReaderPool>,
    admin: Mutex<Option<AdminClient<DefaultClientContext>>>,
    /// Partition counts of the topics known to exist.
    topics: Mutex<HashMap<String, usize>>,
    /// Producers created so far.
    producers_created: AtomicU64,
    /// Set once by [`KafkaClients::set_transactional`]: the transactional producer that
    /// carries the caller's records and the transactional appends.
    transactions: std::sync::OnceLock<Transactions>,
}

impl KafkaClients {
    /// Clients for the bootstrap servers, passthrough properties and timeouts of `config`
    /// (its topic settings are not used). No client is created yet.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad option or property.
    pub fn new(config: &KafkaConfig) -> Result<KafkaClients> {
        config.validate_settings()?;
        Ok(KafkaClients {
            inner: Arc::new(Inner {
                bootstrap_servers: config.bootstrap_servers.clone(),
                properties: config.properties.clone(),
                produce_timeout: config.produce_timeout(),
                admin_timeout: config.admin_timeout(),
                base: config.role_config("producer"),
                admin_config: config.role_config("admin"),
                producer: Mutex::new(None),
                readers: Arc::new(ReaderPool::new(
                    config.role_config("restore-consumer"),
                    &config.application_id,
                )),
                admin: Mutex::new(None),
                topics: Mutex::new(HashMap::new()),
                producers_created: AtomicU64::new(0),
                transactions: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Opens partition `partition` of topic `<application_id>-<store_name>-changelog`, as
    /// [`KafkaLog::open`] does, on these clients.
    ///
    /// # Errors
    /// As [`KafkaLog::open`], and `InvalidArgument` when `config` names other bootstrap
    /// servers, properties or timeouts than these clients were made with.
    pub fn open(&self, config: KafkaConfig, partition: u32) -> Result<KafkaLog> {
        config.validate()?;
        let topic = config.topic();
        self.open_topic(config, &topic, partition)
    }

    /// Opens partition `partition` of `topic`, as [`KafkaLog::open_topic`] does, on these
    /// clients.
    ///
    /// # Errors
    /// As [`open`](KafkaClients::open).
    pub fn open_topic(&self, config: KafkaConfig, topic: &str, partition: u32) -> Result<KafkaLog> {
        config::validate_topic(topic)?;
        config.validate_settings()?;
        let inner = &self.inner;
        if config.bootstrap_servers != inner.bootstrap_servers
            || config.properties != inner.properties
            || config.produce_timeout() != inner.produce_timeout
            || config.admin_timeout() != inner.admin_timeout
        {
            return Err(Error::invalid(format!(
                "the changelog {topic} has other bootstrap servers, properties or timeouts than \
                 the kafka clients it is opened through"
            )));
        }
        tracing::debug!(?config, topic, partition, "opening kafka changelog");
        self.ensure_topic(&config, topic, partition)?;
        KafkaLog::new(self.clone(), config, topic, partition)
    }

    /// The partition count of `topic`, or `None` when the brokers do not know it.
    ///
    /// # Errors
    /// `Timeout` when no broker answers within the admin timeout, `Backend` otherwise.
    pub fn partition_count(&self, topic: &str) -> Result<Option<u32>> {
        if let Some(&count) = self.inner.topics.lock().get(topic) {
            return Ok(u32::try_from(count).ok());
        }
        let timeout = self.inner.admin_timeout;
        let found =
            self.with_reader(|consumer| admin::partition_count(consumer, topic, timeout))?;
        if let Some(count) = found {
            self.inner.topics.lock().insert(topic.to_owned(), count);
        }
        Ok(found.and_then(|count| u32::try_from(count).ok()))
    }

    /// Makes sure `topic` exists with partition `partition`: known already, found in the
    /// brokers' metadata, or created (compacted, with `config`'s partitions, replication
    /// factor and topic properties).
    fn ensure_topic(&self, config: &KafkaConfig, topic: &str, partition: u32) -> Result<()> {
        let count = match self.partition_count(topic)? {
            Some(count) => count,
            None => {
                self.create_topic(config, topic)?;
                let timeout = self.inner.admin_timeout;
                let count = self.with_reader(|consumer| {
                    admin::await_partition(consumer, topic, partition, timeout)
                })?;
                self.inner.topics.lock().insert(topic.to_owned(), count);
                u32::try_from(count).unwrap_or(u32::MAX)
            }
        };
        if partition >= count {
            return Err(Error::invalid(format!(
                "kafka topic {topic} has {count} partitions, so partition {partition} does not \
                 exist (an existing topic keeps its partition count)"
            )));
        }
        Ok(())
    }

    fn create_topic(&self, config: &KafkaConfig, topic: &str) -> Result<()> {
        let mut admin = self.inner.admin.lock();
        let client = match &mut *admin {
            Some(client) => client,
            empty => empty.insert(
                self.inner
                    .admin_config
                    .create()
                    .map_err(|err| convert("creating the kafka admin client", err))?,
            ),
        };
        admin::create_topic(client, config, topic)
    }

    /// Runs `read` with a reader consumer of the pool (see [`ReaderPool::with_reader`]).
    pub(super) fn with_reader<T>(
        &self,
        read: impl FnOnce(&WatchedConsumer) -> Result<T>,
    ) -> Result<T> {
        self.inner.readers.with_reader(read)
    }

    /// The reader consumers these clients lend to reads.
    pub(super) fn readers(&self) -> Arc<ReaderPool> {
        Arc::clone(&self.inner.readers)
    }

    /// The producer, created at the first call (and after a failure retired the previous one).
    pub(super) fn producer(&self) -> Result<Arc<PolledProducer>> {
        let mut slot = self.inner.producer.lock();
        if let Some(producer) = &*slot {
            return Ok(Arc::clone(producer));
        }
        let producer = Arc::new(producer::new_producer(
            &self.inner.base,
            self.inner.produce_timeout,
        )?);
        self.inner.producers_created.fetch_add(1, Ordering::Relaxed);
        *slot = Some(Arc::clone(&producer));
        Ok(producer)
    }

    /// Purges `failed` and, if it is still the current producer, retires it: the next
    /// append starts a new one.
    pub(super) fn retire(&self, failed: Arc<PolledProducer>) {
        producer::purge(&failed);
        {
            let mut slot = self.inner.producer.lock();
            if slot
                .as_ref()
                .is_some_and(|current| Arc::ptr_eq(current, &failed))
            {
                *slot = None;
            }
        }
        // librdkafka's shutdown waits for the purged records' reports, which the caller of
        // the failed call need not wait for.
        let spawned = thread::Builder::new()
            .name("kafka-producer-retire".to_owned())
            .spawn(move || drop(failed));
        if let Err(err) = spawned {
            tracing::debug!(%err, "no thread to retire the producer on; it was dropped in place");
        }
    }

    /// The produce timeout these clients were made with.
    pub fn produce_timeout(&self) -> Duration {
        self.inner.produce_timeout
    }

    /// The read, metadata and admin timeout these clients were made with.
    pub(super) fn admin_timeout(&self) -> Duration {
        self.inner.admin_timeout
    }

    /// The producer's librdkafka configuration.
    pub(super) fn base(&self) -> &ClientConfig {
        &self.inner.base
    }

    /// Makes these clients transactional: from now on the caller's records
    /// ([`send`](KafkaClients::send), [`send_record`](KafkaClients::send_record)) and every
    /// [`append_transactional`](crate::Changelog::append_transactional) of their logs go
    /// through one transactional producer with `transactional_id`, in a transaction begun at
    /// the first of them after a [`commit_transaction`](KafkaClients::commit_transaction) or
    /// [`abort_transaction`](KafkaClients::abort_transaction); `timeout` is its
    /// `transaction.timeout.ms` (the brokers abort a transaction left open longer). Other
    /// appends stay on the idempotent producer. The id must be stable across restarts of
    /// the owner, so a restart fences its previous incarnation at once, and unique among
    /// the live owners.
    ///
    /// The transactional producer is created, and its transactions initialized, before this
    /// returns: that aborts a previous incarnation's open transaction at once, which would
    /// otherwise hold back every read of committed records of its partitions (a restore, a
    /// fence) until the brokers time it out.
    ///
    /// # Errors
    /// `InvalidArgument` when these clients are transactional already, or for a property
    /// librdkafka refuses; `Timeout` when no transaction coordinator answers in time; as
    /// [`commit_transaction`](KafkaClients::commit_transaction) when the brokers refuse.
    pub fn set_transactional(&self, transactional_id: &str, timeout: Duration) -> Result<()> {
        self.inner
            .transactions
            .set(Transactions::new(transactional_id.to_owned(), timeout))
            .map_err(|_| Error::invalid("the kafka clients are transactional already"))?;
        self.inner
            .transactions
            .get()
            .map_or(Ok(()), |transactions| transactions.init(&self.inner.base))
    }

    /// Whether [`set_transactional`](KafkaClients::set_transactional) made these clients
    /// transactional.
    pub fn is_transactional(&self) -> bool {
        self.inner.transactions.get().is_some()
    }

    /// The transactional producer with a transaction open on it.
    pub(super) fn transaction_producer(&self) -> Result<Arc<PolledProducer>> {
        let Some(transactions) = self.inner.transactions.get() else {
            return Err(Error::Unsupported(
                "the kafka clients are not transactional".to_owned(),
            ));
        };
        transactions.begun(&self.inner.base)
    }

    /// Commits the open transaction with `offsets` (the next offset to consume of each
    /// input partition) committed to the consumer group of `group` in it: Kafka's
    /// `sendOffsetsToTransaction` then `commitTransaction`. Once it returns, every record
    /// of the transaction is visible to readers of committed records. Does nothing on
    /// clients that are not transactional, or with no transaction open and no offsets.
    ///
    /// # Errors
    /// The transaction is aborted before the error returns: `Fenced` when a newer producer
    /// of the transactional id or a newer generation of the group fenced this one (the
    /// caller's tasks may belong to another member now); `Timeout` when the brokers did not
    /// answer in time; `Backend` when a record of the transaction failed; `InvalidArgument`
    /// when transactions fail for good (unsupported, not authorized).
    pub fn commit_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        match self.inner.transactions.get() {
            Some(transactions) => transactions.commit(&self.inner.base, offsets, group),
            None => Ok(()),
        }
    }

    /// Aborts the open transaction, if any: none of its records or offsets will ever be
    /// visible to readers of committed records.
    ///
    /// # Errors
    /// `Fenced` when the transactional producer was fenced (a newer epoch of its
    /// transactional id: another incarnation, or the coordinator aborting a transaction that
    /// outlived its timeout): the owner may no longer own its tasks.
    /// `InvalidArgument`, naming the API and the error, when the transactional producer had
    /// failed for good before (its records and those of its transaction are dropped all the
    /// same): the owner's work cannot go on on these clients, which the error says.
    pub fn abort_transaction(&self) -> Result<()> {
        match self.inner.transactions.get() {
            Some(transactions) => transactions.abort(),
            None => Ok(()),
        }
    }

    /// Drops the transactional producer, aborting its open transaction, if any; the next
    /// transactional record starts a new one. For an owner that stops.
    pub fn close_transactions(&self) {
        if let Some(transactions) = self.inner.transactions.get() {
            transactions.close();
        }
    }

    /// Queues a record to `topic` on the shared producer, in the partition librdkafka's
    /// partitioner picks, and returns at once; `deliveries` learns whether it was delivered.
    /// [`send_record`](KafkaClients::send_record) with only a topic, a key and a value.
    ///
    /// # Errors
    /// As [`send_record`](KafkaClients::send_record).
    pub fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        deliveries: &Arc<Deliveries>,
    ) -> Result<()> {
        let record = SendRecord {
            topic,
            partition: None,
            key,
            value,
            timestamp: None,
            headers: None,
        };
        self.send_record(record, &ReportTo::new(deliveries))
    }

    /// Queues `record` on the shared producer (the transactional one, in its open
    /// transaction, on transactional clients) and returns at once; the [`Deliveries`] of
    /// `report_to` learn whether it was delivered. Waits while librdkafka's queue is full, up
    /// to the produce timeout.
    ///
    /// # Errors
    /// A record refused at once (larger than `message.max.bytes`, a bad topic name, a
    /// partition the topic is known not to have): `InvalidArgument` or `Backend`; `Timeout`
    /// when the queue stays full.
    pub fn send_record(&self, record: SendRecord<'_>, report_to: &ReportTo) -> Result<()> {
        let SendRecord {
            topic,
            partition,
            key,
            value,
            timestamp,
            headers,
        } = record;
        let producer = match self.inner.transactions.get() {
            Some(transactions) => transactions.begun(&self.inner.base)?,
            None => self.producer()?,
        };
        let timeout = self.inner.produce_timeout;
        let deliveries = report_to.deliveries();
        let mut record: BaseRecord<'_, [u8], [u8], Arc<producer::Delivery>> =
            BaseRecord::with_opaque_to(topic, Arc::clone(&report_to.delivery));
        if let Some(partition) = partition {
            let partition = i32::try_from(partition).map_err(|_| {
                Error::invalid(format!(
                    "partition {partition} of {topic} is beyond kafka's range"
                ))
            })?;
            record = record.partition(partition);
        }
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = value {
            record = record.payload(value);
        }
        if let Some(timestamp) = timestamp {
            record = record.timestamp(timestamp);
        }
        if let Some(headers) = headers {
            record = record.headers(headers);
        }
        deliveries.sending();
        producer::send(&producer, record, || Instant::now() + timeout).map_err(|err| {
            deliveries.reported(None);
            // The API is named as a delivery report names it: the error reads the same whether
            // it surfaced here or in a report.
            let doing = format!("queueing a record to {topic} (Produce)");
            // A transactional producer that failed for good refuses every record with a
            // bare `Fatal`: its fatal error, with the API that met it, is the cause.
            let fatal = self
                .inner
                .transactions
                .get()
                .and_then(|_| super::transactions::failed_for_good(&producer, &doing));
            fatal.unwrap_or_else(|| convert(&doing, err))
        })
    }

    /// Waits until every record queued on the producer (sent or appended, by any caller) is
    /// delivered or failed. Returns at once when no producer was created.
    ///
    /// rdkafka's own `flush` waits in steps of 100 ms while any record is outstanding (it
    /// polls the producer's events for 100 ms at a time, and its poll returns only once its
    /// timeout passed), so a flush of a busy producer took 100 ms or more; the producer's
    /// events are served by its own thread here, so this waits for its count of outstanding
    /// records to reach zero, looking every millisecond, and asks the brokers' threads to
    /// send what lingers at each look.
    ///
    /// # Errors
    /// `Timeout` when the records are not all reported within the produce timeout (and the
    /// margin librdkafka is given to time them out itself).
    pub fn flush(&self) -> Result<()> {
        let producer = self.inner.producer.lock().clone();
        let Some(producer) = producer else {
            return Ok(());
        };
        let timeout = self.inner.produce_timeout + producer::LIBRDKAFKA_TIMEOUT_MARGIN;
        let deadline = Instant::now() + timeout;
        while producer.in_flight_count() > 0 {
            send_now(&producer);
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "kafka did not report the delivery of {} records within {timeout:?} \
                     (flushing the producer)",
                    producer.in_flight_count()
                )));
            }
            thread::sleep(FLUSH_STEP);
        }
        Ok(())
    }

    /// Asks the producer's broker threads to send the records that linger (`linger.ms`) now,
    /// without waiting for them: for a caller about to wait for their delivery.
    pub fn send_lingering(&self) {
        let producer = self.inner.producer.lock().clone();
        if let Some(producer) = producer {
            send_now(&producer);
        }
    }

    /// Whether a transaction is open on the transactional producer (false on clients that
    /// are not transactional).
    pub fn transaction_open(&self) -> bool {
        self.inner
            .transactions
            .get()
            .is_some_and(Transactions::is_open)
    }

    /// How many producers these clients created: 1 while no append failed, 0 while nothing
    /// was written.
    pub fn producers_created(&self) -> u64 {
        self.inner.producers_created.load(Ordering::Relaxed)
    }
}

/// How often [`KafkaClients::flush`] looks whether every record was reported.
const FLUSH_STEP: Duration = Duration::from_millis(1);

/// librdkafka's flush without a wait: it wakes the broker threads, which send what lingers
/// if they serve the wake-up while the flush is under way. Its `TimedOut` answer only says
/// that records are outstanding.
fn send_now(producer: &PolledProducer) {
    let _ = producer.flush(Duration::ZERO);
}

impl fmt::Debug for KafkaClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaClients")
            .field("bootstrap_servers", &self.inner.bootstrap_servers)
            .field("producers_created", &self.producers_created())
            .finish_non_exhaustive()
    }
}

/// A record for [`KafkaClients::send_record`]: what `None` leaves to librdkafka or the broker.
#[derive(Debug, Clone)]
pub struct SendRecord<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition; `None`: librdkafka's configured partitioner picks one from the key.
    pub partition: Option<u32>,
    /// The key; `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// The value; `None` for a null value (a tombstone on a compacted topic).
    pub value: Option<&'a [u8]>,
    /// The timestamp in milliseconds since the epoch; `None` (or 0, as librdkafka reads it):
    /// the time the record is queued.
    pub timestamp: Option<i64>,
    /// The headers, in order; `None` for none.
    pub headers: Option<OwnedHeaders>,
}
