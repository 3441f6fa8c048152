//! The records processors send to output topics: at least once, and never committed past.
//!
//! Outputs go through the instance's one idempotent producer (the changelogs' too), whose
//! delivery reports record every failure. A commit flushes the producer first and fails if any output was not
//! acknowledged, so state and input positions never commit past a lost output. What happens
//! then is the [`ProductionErrorPolicy`]'s choice, as with Kafka Streams' production
//! exception handler.

use std::sync::Arc;

use rdkafka::message::{Header, Headers, OwnedHeaders};
use statestore_changelog::{Deliveries, KafkaClients, ReportTo, SendRecord};
use store_api::{Error, ErrorKind, Result};

use crate::config::ProductionErrorPolicy;
use crate::group::partitioner::KeyPartitioner;

/// A record a processor sends to an output topic with
/// [`send_record`](crate::TaskContext::send_record): a topic, and optionally a key, a value,
/// a partition, a timestamp and headers. What is left unset is chosen as for
/// [`send`](crate::TaskContext::send):
/// - **partition**: a keyed record goes to the partition the configured
///   [`key_partitioner`](crate::TasksConfig::key_partitioner) computes for the key among the
///   topic's partitions (murmur2 by default, as Kafka's Java producer and Kafka Streams
///   place keys), so that [`Queries::metadata_for_key`](crate::Queries::metadata_for_key)
///   names the partition a key the application writes lands in; a record without a key, or
///   one to a topic the brokers do not know yet, goes where librdkafka's partitioner puts it;
/// - **timestamp**: the time the record is handed to the producer;
/// - **headers**: none.
///
/// ```
/// use statestore_tasks::OutputRecord;
///
/// let record = OutputRecord::new("enriched")
///     .key("user-7")
///     .value(b"{\"visits\":3}")
///     .partition(2)
///     .timestamp(1_700_000_000_000)
///     .header("source", Some(b"web"))
///     .header("trace-id", None);
/// assert_eq!(record.topic(), "enriched");
/// ```
#[derive(Debug, Clone)]
pub struct OutputRecord {
    /// Shared with the outputs before it to the same topic (see
    /// [`TaskContext::send`](crate::TaskContext::send)): one allocation per batch, not per
    /// record.
    topic: Arc<str>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    partition: Option<u32>,
    timestamp: Option<i64>,
    headers: Option<OwnedHeaders>,
}

/// The processing modules' name for a pending [`OutputRecord`].
pub(crate) type Output = OutputRecord;

impl OutputRecord {
    /// A record to `topic` with a null key and a null value.
    pub fn new(topic: impl Into<String>) -> OutputRecord {
        OutputRecord::to_shared(Arc::from(topic.into()))
    }

    /// A record to `topic`, a name shared with other records.
    pub(crate) fn to_shared(topic: Arc<str>) -> OutputRecord {
        OutputRecord {
            topic,
            key: None,
            value: None,
            partition: None,
            timestamp: None,
            headers: None,
        }
    }

    /// The record with key `key`.
    #[must_use]
    pub fn key(mut self, key: impl AsRef<[u8]>) -> OutputRecord {
        self.key = Some(key.as_ref().to_vec());
        self
    }

    /// The record with value `value`.
    #[must_use]
    pub fn value(mut self, value: impl AsRef<[u8]>) -> OutputRecord {
        self.value = Some(value.as_ref().to_vec());
        self
    }

    /// The record sent to partition `partition`, whatever its key. A partition the topic
    /// does not have fails the record as one the brokers refused (see
    /// [`ProductionErrorPolicy`]), with an `InvalidArgument` error.
    #[must_use]
    pub fn partition(mut self, partition: u32) -> OutputRecord {
        self.partition = Some(partition);
        self
    }

    /// The record with timestamp `timestamp_ms`, in milliseconds since the epoch. A negative
    /// one is refused by [`send_record`](crate::TaskContext::send_record); librdkafka reads 0
    /// as "now".
    #[must_use]
    pub fn timestamp(mut self, timestamp_ms: i64) -> OutputRecord {
        self.timestamp = Some(timestamp_ms);
        self
    }

    /// The record with header `name` appended (`None`: a header with a null value). Headers
    /// keep their order, and a name may repeat.
    #[must_use]
    pub fn header(mut self, name: &str, value: Option<&[u8]>) -> OutputRecord {
        let header = Header { key: name, value };
        self.headers = Some(self.headers.take().unwrap_or_default().insert(header));
        self
    }

    /// The record with `headers` in place of any set so far.
    #[must_use]
    pub fn headers(mut self, headers: OwnedHeaders) -> OutputRecord {
        self.headers = Some(headers);
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The record as it reaches its topic, for a reader of it (such as the test driver's
    /// output topics and repartition topics): the partition it names, if any, and the record
    /// (its timestamp unset if it set none).
    pub fn into_input(self) -> (Option<u32>, crate::record::MemoryRecord) {
        let headers = self.headers.as_ref().map_or_else(Vec::new, |headers| {
            headers
                .iter()
                .map(|header| (header.key.to_owned(), header.value.map(<[u8]>::to_vec)))
                .collect()
        });
        let record = crate::record::MemoryRecord {
            topic: self.topic.to_string(),
            timestamp: self.timestamp,
            key: self.key,
            value: self.value,
            headers,
        };
        (self.partition, record)
    }

    /// The topic, shared.
    pub(crate) fn shared_topic(&self) -> Arc<str> {
        Arc::clone(&self.topic)
    }

    /// Checks what can be checked before the record reaches the producer.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative timestamp.
    pub(crate) fn validate(&self) -> Result<()> {
        match self.timestamp {
            Some(timestamp) if timestamp < 0 => Err(Error::invalid(format!(
                "output record to {} has the negative timestamp {timestamp}",
                self.topic
            ))),
            _ => Ok(()),
        }
    }
}

/// The outputs of the instance's tasks, sent on the instance's one producer.
pub(crate) struct Outputs {
    deliveries: Arc<Deliveries>,
    /// Where every output's delivery report goes: one allocation, shared by all records.
    report_to: ReportTo,
    pending: Vec<Output>,
    policy: ProductionErrorPolicy,
    partitioner: KeyPartitioner,
    /// The partition counts of the output topics known to the brokers: the clients keep them
    /// too, but behind a lock and a hash of the name, which cost more than the rest of
    /// placing a record. Instances write to a few topics, so a list is searched.
    partition_counts: Vec<(String, u32)>,
}

impl Outputs {
    pub fn new(policy: ProductionErrorPolicy, partitioner: KeyPartitioner) -> Outputs {
        let deliveries = Arc::default();
        Outputs {
            report_to: ReportTo::new(&deliveries),
            deliveries,
            pending: Vec::new(),
            policy,
            partitioner,
            partition_counts: Vec::new(),
        }
    }

    /// Where the processor's outputs go until [`send`](Outputs::send).
    pub fn pending(&mut self) -> &mut Vec<Output> {
        &mut self.pending
    }

    /// Outputs not delivered and dropped under [`ProductionErrorPolicy::Continue`] (or
    /// failed under `Fail`).
    pub fn dropped(&self) -> u64 {
        self.deliveries.failed()
    }

    /// Hands the pending outputs to the producer, each keyed one without a partition of its
    /// own in its key's partition (see [`OutputRecord`]). A topic's partition count is read
    /// from the brokers at its first output and kept: partitions added to a topic later are
    /// not used until the instance restarts.
    ///
    /// # Errors
    /// A record the producer refuses at once (too large for `message.max.bytes`, a partition
    /// the topic does not have): `InvalidArgument` or `Backend`, under
    /// [`ProductionErrorPolicy::Fail`], or an earlier output that failed; `Timeout` or
    /// `Backend` when the brokers do not give a topic's partition count.
    pub fn send(&mut self, clients: &KafkaClients) -> Result<()> {
        let mut pending = std::mem::take(&mut self.pending).into_iter();
        while let Some(mut output) = pending.next() {
            let placed = match self.place(clients, &output) {
                Ok(placed) => placed,
                Err(err) => {
                    // Not refused, only not placed yet: kept for the next call.
                    self.pending = std::iter::once(output).chain(pending).collect();
                    return Err(err);
                }
            };
            let sent = placed.and_then(|partition| self.hand_over(clients, &mut output, partition));
            if let Err(err) = sent {
                if err.kind() == ErrorKind::Timeout {
                    // The queue stayed full: the brokers are slow, not refusing the record.
                    return Err(err);
                }
                let what = format!("output record to {} was refused: {err}", output.topic);
                self.deliveries.record_failure(what.clone());
                match self.policy {
                    ProductionErrorPolicy::Fail => return Err(Error::invalid(what)),
                    ProductionErrorPolicy::Continue => tracing::warn!("{what}; dropped"),
                }
            }
        }
        self.check()
    }

    /// The partition `output` goes to: its own, checked against the topic's partition count,
    /// or its key's; `None` to leave it to librdkafka. The outer error is the brokers' failure
    /// to give the partition count, the inner one a partition the topic does not have.
    fn place(&mut self, clients: &KafkaClients, output: &Output) -> Result<Result<Option<u32>>> {
        if output.partition.is_none() && output.key.is_none() {
            return Ok(Ok(None));
        }
        let Some(count) = self.partition_count(clients, &output.topic)? else {
            // Unknown to the brokers: librdkafka waits for the topic, or fails the record.
            return Ok(Ok(output.partition));
        };
        Ok(match (output.partition, &output.key) {
            (Some(partition), _) if partition >= count => Err(Error::invalid(format!(
                "partition {partition} does not exist: {} has {count} partitions",
                output.topic
            ))),
            (Some(partition), _) => Ok(Some(partition)),
            (None, Some(key)) => Ok(self.partitioner.partition(key, count)),
            (None, None) => Ok(None),
        })
    }

    /// `topic`'s partition count, from [`partition_counts`](Outputs::partition_counts) or
    /// else the clients; `None` while the brokers do not know the topic.
    fn partition_count(&mut self, clients: &KafkaClients, topic: &str) -> Result<Option<u32>> {
        if let Some((_, count)) = self.partition_counts.iter().find(|(t, _)| t == topic) {
            return Ok(Some(*count));
        }
        let count = clients.partition_count(topic)?;
        if let Some(count) = count {
            self.partition_counts.push((topic.to_owned(), count));
        }
        Ok(count)
    }

    /// Queues `output` on the producer in `partition` (its headers move to the producer).
    fn hand_over(
        &self,
        clients: &KafkaClients,
        output: &mut Output,
        partition: Option<u32>,
    ) -> Result<()> {
        let record = SendRecord {
            topic: &output.topic,
            partition,
            key: output.key.as_deref(),
            value: output.value.as_deref(),
            timestamp: output.timestamp,
            headers: output.headers.take(),
        };
        clients.send_record(record, &self.report_to)
    }

    /// Sends the pending outputs and waits until every output is acknowledged or failed.
    ///
    /// # Errors
    /// As [`send`](Outputs::send); `Timeout` when the brokers do not answer within the
    /// produce timeout; under [`ProductionErrorPolicy::Fail`], any output that failed.
    pub fn flush(&mut self, clients: &KafkaClients) -> Result<()> {
        self.send(clients)?;
        // Only the outputs' reports are waited for: the changelogs' records on the same
        // producer are not this commit's concern yet.
        clients.send_lingering();
        self.deliveries.wait(clients.produce_timeout())?;
        self.check()
    }

    /// Forgets the outputs not sent yet and the failures so far: for a runtime that will
    /// process again every record whose outputs they concern.
    pub fn forget_failures(&mut self) {
        self.pending.clear();
        self.deliveries.forget_failures();
    }

    /// After the transaction holding the outputs sent so far was aborted: waits up to
    /// `timeout` for the reports of those the abort purged (they arrive as failures), then
    /// forgets them as [`forget_failures`](Outputs::forget_failures) does, so that they do not
    /// fail the next transaction.
    pub fn forget_aborted(&mut self, timeout: std::time::Duration) {
        if let Err(err) = self.deliveries.wait(timeout) {
            tracing::debug!(%err, "outputs of an aborted transaction still unreported");
        }
        self.forget_failures();
    }

    /// The first failed output, under [`ProductionErrorPolicy::Fail`]: a `Timeout` when every
    /// failure so far timed out (the records may well be delivered when sent again), else a
    /// `Backend` error. It stays until [`forget_failures`](Outputs::forget_failures): nothing
    /// is committed past a lost output.
    fn check(&self) -> Result<()> {
        if self.policy == ProductionErrorPolicy::Continue {
            return Ok(());
        }
        match self.deliveries.first_failure() {
            Some(what) if self.deliveries.only_timeouts() => Err(Error::Timeout(what)),
            Some(what) => Err(Error::backend("kafka", what)),
            None => Ok(()),
        }
    }
}
