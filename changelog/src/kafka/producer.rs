//! The append path: an idempotent `acks=all` producer and the wait for its delivery reports.
//!
//! A `ThreadedProducer` serves librdkafka's events on its own thread, and each `append` waits on
//! a condition variable that the delivery callback signals. The alternative, a `BaseProducer`
//! polled by `append` itself, costs a 100 ms sleep per call: rdkafka's `BaseProducer::poll`
//! only returns once its timeout has passed, even after serving the reports.
//!
//! A producer whose `append` failed is retired, and the next `append` starts a new one (a new
//! idempotent session, with a new producer id). Records of the failed call that were purged
//! unsent leave a gap in the old session's sequence numbers, which the broker answers with
//! `OutOfOrderSequenceNumber`; librdkafka then bumps the producer epoch, and tansu 0.6 panics
//! in its storage thread on the next produce, whose epoch it has no row for (`lite.rs`,
//! `idempotent_message_check` then `query_one`: "more or less than one row"); it accepts no
//! record after that until restarted. A new session sidesteps both. Its one cost: a request of the old session that a
//! broker had read but not yet appended when the call gave up could land after the new
//! session's records, as an old session is not fenced the way an epoch bump fences it.

use std::ops::Range;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Message};

use store_api::{BatchOp, Error, Result};

use super::error::convert;
use crate::record::{Framing, RecordKind, check_append, marker_op};

/// The record header that frames a record into a commit: value [`FRAMED`] for an update
/// inside a commit, [`MARKER`] for a commit marker. Records without it are unframed (all
/// records written before framing). Three bytes of name keep the cost per record small.
pub const FRAME_HEADER: &str = "ssf";
/// [`FRAME_HEADER`]'s value on an update inside a commit.
pub const FRAMED: &[u8] = b"f";
/// [`FRAME_HEADER`]'s value on a commit marker.
pub const MARKER: &[u8] = b"c";

/// The header carrying the writer epoch of a record (8 bytes, big-endian), on records appended
/// under an epoch above 0 (see "Fencing" in [`Changelog`](crate::Changelog)).
pub const EPOCH_HEADER: &str = "sse";

/// How much longer than `append` waits librdkafka keeps a record before timing it out itself:
/// `append` gives up and purges first, so librdkafka never starts its own epoch-bump recovery
/// on a producer about to be retired.
const LIBRDKAFKA_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// librdkafka's default `message.max.bytes`.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_000_000;

/// Room left for a record's framing when checking its size against `message.max.bytes`
/// (librdkafka counts at most 36 bytes of varints and attributes per record, and the frame
/// header takes 6 more).
const RECORD_OVERHEAD: usize = 64;

/// Gives each record's delivery report to the [`Batch`] it belongs to.
pub struct DeliveryContext;

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Arc<Batch>;

    fn delivery(&self, result: &DeliveryResult<'_>, batch: Arc<Batch>) {
        let report = match result {
            Ok(message) => Ok(message.offset()),
            Err((err, _)) => Err(err.clone()),
        };
        batch.report(report);
    }
}

/// The delivery reports of one `append` call, gathered as librdkafka hands them over.
pub struct Batch {
    reports: Mutex<Reports>,
    all_reported: Condvar,
}

struct Reports {
    expected: usize,
    received: usize,
    lowest: i64,
    highest: i64,
    error: Option<KafkaError>,
}

impl Batch {
    fn new(expected: usize) -> Batch {
        Batch {
            reports: Mutex::new(Reports {
                expected,
                received: 0,
                lowest: i64::MAX,
                highest: -1,
                error: None,
            }),
            all_reported: Condvar::new(),
        }
    }

    fn report(&self, report: Result<i64, KafkaError>) {
        let mut reports = self.reports.lock();
        reports.received += 1;
        match report {
            Ok(offset) => {
                reports.lowest = reports.lowest.min(offset);
                reports.highest = reports.highest.max(offset);
            }
            Err(err) => {
                reports.error.get_or_insert(err);
            }
        }
        if reports.received >= reports.expected {
            self.all_reported.notify_all();
        }
    }

    /// Waits until every record is reported or `deadline` passes (`None`), and returns the
    /// offsets the records were given, or the first delivery error.
    fn wait(&self, deadline: Instant) -> Option<Result<Range<u64>, KafkaError>> {
        let mut reports = self.reports.lock();
        while reports.received < reports.expected {
            if self
                .all_reported
                .wait_until(&mut reports, deadline)
                .timed_out()
                && reports.received < reports.expected
            {
                return None;
            }
        }
        if let Some(err) = reports.error.take() {
            return Some(Err(err));
        }
        let (lowest, highest) = (reports.lowest, reports.highest);
        let expected = reports.expected;
        Some(Ok(offset_range(lowest, highest, expected)))
    }
}

fn offset_range(lowest: i64, highest: i64, count: usize) -> Range<u64> {
    let start = u64::try_from(lowest).unwrap_or(0);
    let end = u64::try_from(highest).map_or(start, |h| h + 1);
    if usize::try_from(end - start).ok() != Some(count) {
        // Only another producer writing to the same partition can interleave with ours.
        tracing::warn!(
            start,
            end,
            count,
            "changelog records did not get consecutive offsets"
        );
    }
    start..end
}

/// An idempotent producer bound to one (topic, partition).
pub struct Appender {
    producer: ThreadedProducer<DeliveryContext>,
    topic: String,
    partition: i32,
    timeout: Duration,
    max_message_bytes: usize,
}

impl Appender {
    /// Creates the producer from `base` (bootstrap servers and passthrough properties).
    ///
    /// # Errors
    /// `InvalidArgument` for a property librdkafka refuses.
    pub fn new(
        base: &ClientConfig,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<Self> {
        let mut config = base.clone();
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set(
                "message.timeout.ms",
                (timeout + LIBRDKAFKA_TIMEOUT_MARGIN)
                    .as_millis()
                    .to_string(),
            );
        let max_message_bytes = config
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        let producer = config
            .create_with_context(DeliveryContext)
            .map_err(|err| convert("creating the kafka producer", err))?;
        Ok(Appender {
            producer,
            topic: topic.to_owned(),
            partition,
            timeout,
            max_message_bytes,
        })
    }

    /// Produces `ops` in order and waits for every acknowledgement. After an error, the
    /// records of this call still queued are purged and the producer must be retired.
    ///
    /// # Errors
    /// `Timeout` when the acknowledgements do not all arrive in time, `Backend` (or
    /// `InvalidArgument` for a record the broker finds too large) for a refused record.
    pub fn append(&self, ops: &[BatchOp], framing: Framing, epoch: u64) -> Result<Range<u64>> {
        let deadline = Instant::now() + self.timeout;
        let kind = match framing {
            Framing::Unframed => RecordKind::Unframed,
            Framing::Open | Framing::Commit => RecordKind::Framed,
        };
        let marker = (framing == Framing::Commit).then(marker_op);
        let count = ops.len() + usize::from(marker.is_some());
        let batch = Arc::new(Batch::new(count));
        let records = ops
            .iter()
            .map(|op| (op, kind))
            .chain(marker.iter().map(|op| (op, RecordKind::CommitMarker)));
        for (op, kind) in records {
            if let Err(err) = self.enqueue(op, kind, epoch, &batch, deadline) {
                self.abandon();
                return Err(err);
            }
        }
        match batch.wait(deadline) {
            Some(Ok(range)) => Ok(range),
            Some(Err(err)) => {
                self.abandon();
                Err(convert(&self.doing(count), err))
            }
            None => {
                self.abandon();
                Err(Error::Timeout(format!(
                    "kafka did not acknowledge {} records to {}/{} within {:?}",
                    count, self.topic, self.partition, self.timeout
                )))
            }
        }
    }

    /// The largest key plus value this producer sends: its `message.max.bytes` less the
    /// room for a record's framing.
    pub fn max_record_len(&self) -> usize {
        self.max_message_bytes.saturating_sub(RECORD_OVERHEAD)
    }

    /// Checks every key against the store limits and every record against
    /// `message.max.bytes`, so an oversized record fails the call before anything is sent.
    ///
    /// # Errors
    /// `InvalidArgument` naming the sizes.
    pub fn check_sizes(&self, ops: &[BatchOp]) -> Result<()> {
        check_append(ops, self.max_record_len())
    }

    /// Hands one record to librdkafka, waiting while its queue is full.
    fn enqueue(
        &self,
        op: &BatchOp,
        kind: RecordKind,
        epoch: u64,
        batch: &Arc<Batch>,
        deadline: Instant,
    ) -> Result<()> {
        let mut record = BaseRecord::with_opaque_to(&self.topic, Arc::clone(batch))
            .partition(self.partition)
            .key(op.key());
        let frame = match kind {
            RecordKind::Unframed => None,
            RecordKind::Framed => Some(FRAMED),
            RecordKind::CommitMarker => Some(MARKER),
        };
        let epoch_bytes = epoch.to_be_bytes();
        let epoch = (epoch > 0).then_some(epoch_bytes.as_slice());
        if frame.is_some() || epoch.is_some() {
            let mut headers = OwnedHeaders::new_with_capacity(2);
            if let Some(frame) = frame {
                headers = headers.insert(Header {
                    key: FRAME_HEADER,
                    value: Some(frame),
                });
            }
            if let Some(epoch) = epoch {
                headers = headers.insert(Header {
                    key: EPOCH_HEADER,
                    value: Some(epoch),
                });
            }
            record = record.headers(headers);
        }
        if let Some(value) = op.value() {
            record = record.payload(value);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if Instant::now() < deadline =>
                {
                    record = back;
                    thread::sleep(Duration::from_millis(5));
                }
                Err((err, _)) => return Err(convert("queueing a changelog record", err)),
            }
        }
    }

    /// Drops every record still queued or in flight, so none of a failed call is sent after the
    /// call returned (it would land after a later call's records and reorder the changelog).
    fn abandon(&self) {
        self.producer
            .purge(PurgeConfig::default().queue().inflight());
    }

    fn doing(&self, count: usize) -> String {
        format!(
            "producing {count} records to {}/{}",
            self.topic, self.partition
        )
    }
}
