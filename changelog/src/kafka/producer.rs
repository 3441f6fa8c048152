//! The append path: an idempotent `acks=all` producer and the wait for its delivery reports.
//!
//! A [`PolledProducer`] serves librdkafka's events on its own thread, and each `append` waits
//! on a condition variable that the delivery callback signals. The alternative, a `BaseProducer`
//! polled by `append` itself, costs a 100 ms sleep per call: rdkafka's `BaseProducer::poll`
//! only returns once its timeout has passed, even after serving the reports.
//!
//! The producer is shared by every log of a [`KafkaClients`](super::KafkaClients). A producer
//! whose `append` failed is retired, and the next `append` starts a new one (a new
//! idempotent session, with a new producer id). Records of the failed call that were purged
//! unsent leave a gap in the old session's sequence numbers, which the broker answers with
//! `OutOfOrderSequenceNumber`, which librdkafka meets by bumping the producer epoch; a new
//! session starts clean instead, whatever the broker does with an epoch bump. Its one cost: a request of the old session that a
//! broker had read but not yet appended when the call gave up could land after the new
//! session's records, as an old session is not fenced the way an epoch bump fences it.

use std::ops::{Deref, Range};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders, ToBytes};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Message};

use store_api::{BatchOp, Error, Result};

use super::error::convert;
use super::wire::{EPOCH_HEADER, FRAME_HEADER, FRAMED, MARKER};
use crate::record::{Framing, RecordKind, check_append, marker_op};

/// How much longer than `append` waits librdkafka keeps a record before timing it out itself:
/// `append` gives up and purges first, so librdkafka never starts its own epoch-bump recovery
/// on a producer about to be retired.
pub(super) const LIBRDKAFKA_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// librdkafka's default `message.max.bytes`.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_000_000;

/// Room left for a record's framing when checking its size against `message.max.bytes`
/// (librdkafka counts at most 36 bytes of varints and attributes per record, and the frame
/// header takes 6 more).
const RECORD_OVERHEAD: usize = 64;

/// Whom a record's delivery report goes to.
pub enum Delivery {
    /// The batch of one `append` call.
    Append(Batch),
    /// A caller of [`KafkaClients::send`](super::KafkaClients::send).
    Send(Arc<Deliveries>),
}

/// Gives each record's delivery report to the [`Delivery`] it belongs to.
pub struct DeliveryContext;

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Arc<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivery: Arc<Delivery>) {
        match (&*delivery, result) {
            (Delivery::Append(batch), Ok(message)) => batch.report(Ok(message.offset())),
            (Delivery::Append(batch), Err((err, _))) => batch.report(Err(err.clone())),
            (Delivery::Send(deliveries), Ok(_)) => deliveries.reported(None),
            (Delivery::Send(deliveries), Err((err, message))) => {
                let what = format!(
                    "record to {} (partition {}) was not delivered (Produce): {err}",
                    message.topic(),
                    message.partition()
                );
                tracing::warn!("{what}");
                // A timeout, or a purge after another call's failed append retired the
                // producer: the brokers did not refuse the record, sent again it may well
                // be delivered.
                let again = err.rdkafka_error_code().is_some_and(|code| {
                    super::error::is_timeout(code)
                        || matches!(
                            code,
                            RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight
                        )
                });
                deliveries.reported(Some((what, again)));
            }
        }
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
    pub(super) fn new(expected: usize) -> Batch {
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

/// Creates the idempotent `acks=all` producer from `base` (bootstrap servers and passthrough
/// properties); `timeout` is how long an append waits.
///
/// # Errors
/// `InvalidArgument` for a property librdkafka refuses.
pub fn new_producer(base: &ClientConfig, timeout: Duration) -> Result<PolledProducer> {
    new_producer_with(base, timeout + LIBRDKAFKA_TIMEOUT_MARGIN)
}

/// Creates an idempotent `acks=all` producer from `base` whose records time out after
/// `message_timeout` (`message.timeout.ms`).
///
/// # Errors
/// `InvalidArgument` for a property librdkafka refuses.
pub fn new_producer_with(base: &ClientConfig, message_timeout: Duration) -> Result<PolledProducer> {
    let mut config = base.clone();
    config
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set(
            "message.timeout.ms",
            message_timeout.as_millis().to_string(),
        );
    let producer: BaseProducer<DeliveryContext> = config
        .create_with_context(DeliveryContext)
        .map_err(|err| convert("creating the kafka producer", err))?;
    PolledProducer::start(producer)
}

/// How long one poll of the producer's events waits: 100 ms, as rdkafka's `ThreadedProducer`,
/// and 50 us more. rdkafka's poll waits in whole milliseconds and then polls without waiting
/// until its deadline has passed, a busy loop through the last fraction of a millisecond: a
/// deadline just past a whole millisecond is reached by the wait itself (a wake-up is late by
/// the timer slack, 50 us), which leaves that loop tens of microseconds instead of up to one
/// millisecond in every hundred.
const POLL_INTERVAL: Duration = Duration::from_micros(100_050);

/// A producer whose events (delivery reports, errors) a thread of its own serves, as rdkafka's
/// `ThreadedProducer` does, polling with [`POLL_INTERVAL`]. Dropping it stops the thread.
pub struct PolledProducer {
    producer: Arc<BaseProducer<DeliveryContext>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl PolledProducer {
    fn start(producer: BaseProducer<DeliveryContext>) -> Result<PolledProducer> {
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (producer, stop) = (Arc::clone(&producer), Arc::clone(&stop));
            thread::Builder::new()
                .name("statestore-producer".to_owned())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        producer.poll(POLL_INTERVAL);
                    }
                })
                .map_err(|err| Error::io("starting the producer's polling thread", err))?
        };
        Ok(PolledProducer {
            producer,
            stop,
            thread: Some(thread),
        })
    }
}

impl Deref for PolledProducer {
    type Target = BaseProducer<DeliveryContext>;

    fn deref(&self) -> &BaseProducer<DeliveryContext> {
        &self.producer
    }
}

impl Drop for PolledProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the producer's polling thread panicked");
        }
    }
}

/// Hands `record` to librdkafka, waiting while its queue is full until the instant
/// `deadline` gives, asked for only when the queue is full (reading the clock for every
/// record cost more than the rest of this function).
///
/// # Errors
/// The producer's refusal: the queue still full at the deadline, or a record it cannot send.
pub fn send<K, P>(
    producer: &BaseProducer<DeliveryContext>,
    mut record: BaseRecord<'_, K, P, Arc<Delivery>>,
    deadline: impl Fn() -> Instant,
) -> std::result::Result<(), KafkaError>
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    let mut until = None;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                if Instant::now() < *until.get_or_insert_with(&deadline) =>
            {
                record = back;
                thread::sleep(Duration::from_millis(5));
            }
            Err((err, _)) => return Err(err),
        }
    }
}

/// Whether `err` reports a record purged from the producer (queued or in flight).
fn is_purged(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)
    )
}

/// Drops every record still queued or in flight, so none of a failed call is sent after the
/// call returned (it would land after a later call's records and reorder the changelog).
pub fn purge(producer: &BaseProducer<DeliveryContext>) {
    producer.purge(PurgeConfig::default().queue().inflight());
}

/// The appends of one (topic, partition), on a producer the caller passes in.
pub struct Appender {
    topic: String,
    partition: i32,
    timeout: Duration,
    max_message_bytes: usize,
}

impl Appender {
    /// Appends to `topic`/`partition` with the producer settings of `base`.
    pub fn new(base: &ClientConfig, topic: &str, partition: i32, timeout: Duration) -> Self {
        let max_message_bytes = base
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        Appender {
            topic: topic.to_owned(),
            partition,
            timeout,
            max_message_bytes,
        }
    }

    /// Produces `ops` in order on `producer` and waits for every acknowledgement. After an
    /// error the producer must be retired (purged), so no record of this call lands later.
    ///
    /// # Errors
    /// `Timeout` when the acknowledgements do not all arrive in time, `Backend` (or
    /// `InvalidArgument` for a record the broker finds too large) for a refused record.
    pub fn append(
        &self,
        producer: &BaseProducer<DeliveryContext>,
        ops: &[BatchOp],
        framing: Framing,
        epoch: u64,
    ) -> Result<Range<u64>> {
        let deadline = Instant::now() + self.timeout;
        let kind = match framing {
            Framing::Unframed => RecordKind::Unframed,
            Framing::Open | Framing::Commit => RecordKind::Framed,
        };
        let marker = (framing == Framing::Commit).then(marker_op);
        let count = ops.len() + usize::from(marker.is_some());
        let delivery = Arc::new(Delivery::Append(Batch::new(count)));
        let Delivery::Append(batch) = &*delivery else {
            unreachable!("built as an append")
        };
        let records = ops
            .iter()
            .map(|op| (op, kind))
            .chain(marker.iter().map(|op| (op, RecordKind::CommitMarker)));
        for (op, kind) in records {
            self.enqueue(producer, op, kind, epoch, &delivery, deadline)?;
        }
        match batch.wait(deadline) {
            Some(Ok(range)) => Ok(range),
            // Another call's failed append retired the shared producer and purged its records:
            // no broker refused them, and whether those in flight landed is unknown, as after
            // a timeout.
            Some(Err(err)) if is_purged(&err) => Err(Error::Timeout(format!(
                "kafka, while {}: purged when the producer was retired after another append \
                 failed: {err}",
                self.doing(count)
            ))),
            Some(Err(err)) => Err(convert(&self.doing(count), err)),
            None => Err(Error::Timeout(format!(
                "kafka did not acknowledge {} records to {}/{} within {:?}",
                count, self.topic, self.partition, self.timeout
            ))),
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
        producer: &BaseProducer<DeliveryContext>,
        op: &BatchOp,
        kind: RecordKind,
        epoch: u64,
        delivery: &Arc<Delivery>,
        deadline: Instant,
    ) -> Result<()> {
        let mut record = BaseRecord::with_opaque_to(&self.topic, Arc::clone(delivery))
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
        send(producer, record, || deadline)
            .map_err(|err| convert("queueing a changelog record", err))
    }

    fn doing(&self, count: usize) -> String {
        format!(
            "producing {count} records to {}/{} (Produce)",
            self.topic, self.partition
        )
    }
}

/// What became of the records a caller queued with [`KafkaClients::send`](super::KafkaClients::send): how many are
/// still in flight, how many failed, and the first failure.
#[derive(Debug, Default)]
pub struct Deliveries {
    /// Records sent and not reported yet: counted without the lock, which only a failure
    /// and the last report take, so a record costs no lock on either side.
    in_flight: AtomicU64,
    state: Mutex<DeliveryState>,
    all_reported: Condvar,
}

#[derive(Debug, Default)]
struct DeliveryState {
    failed: u64,
    first_failure: Option<String>,
    /// Every failure since the last [`Deliveries::forget_failures`] was a timeout (or a purge
    /// of the producer after another call timed out): the same records sent again may well be
    /// delivered.
    only_timeouts: bool,
}

impl DeliveryState {
    fn fail(&mut self, what: String, timeout: bool) {
        self.failed += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(what);
            self.only_timeouts = timeout;
        } else {
            self.only_timeouts &= timeout;
        }
    }
}

impl Deliveries {
    /// The first record that was not delivered, described.
    pub fn first_failure(&self) -> Option<String> {
        self.state.lock().first_failure.clone()
    }

    /// How many records were not delivered (or were recorded with
    /// [`record_failure`](Deliveries::record_failure)).
    pub fn failed(&self) -> u64 {
        self.state.lock().failed
    }

    /// Counts a record that failed, keeping `what` if it is the first.
    pub fn record_failure(&self, what: String) {
        self.state.lock().fail(what, false);
    }

    /// Whether every failure since the last [`forget_failures`](Deliveries::forget_failures)
    /// was a timeout, or a purge of the producer after another call timed out (false when
    /// none failed).
    pub fn only_timeouts(&self) -> bool {
        let state = self.state.lock();
        state.first_failure.is_some() && state.only_timeouts
    }

    /// Forgets the failures so far (the count [`failed`](Deliveries::failed) stays): for a
    /// caller that will send every record they concern again.
    pub fn forget_failures(&self) {
        let mut state = self.state.lock();
        state.first_failure = None;
        state.only_timeouts = false;
    }

    /// Waits until every record sent is reported, delivered or failed.
    ///
    /// # Errors
    /// `Timeout` when some are not reported within `timeout`.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        // A report that brings the count to zero notifies under the lock, so it cannot fall
        // between this look and the wait.
        while self.in_flight.load(Ordering::Acquire) > 0 {
            if self
                .all_reported
                .wait_until(&mut state, deadline)
                .timed_out()
                && self.in_flight.load(Ordering::Acquire) > 0
            {
                return Err(Error::Timeout(format!(
                    "kafka did not report the delivery of {} records within {timeout:?}",
                    self.in_flight.load(Ordering::Acquire)
                )));
            }
        }
        Ok(())
    }

    pub(super) fn sending(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A record's report: `failure` describes it, and says whether it timed out, when it was
    /// not delivered.
    pub(super) fn reported(&self, failure: Option<(String, bool)>) {
        if let Some((what, timeout)) = failure {
            self.state.lock().fail(what, timeout);
        }
        let before = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before <= 1 {
            let _state = self.state.lock();
            self.all_reported.notify_all();
        }
    }
}

/// Where the delivery reports of records sent with
/// [`KafkaClients::send_record`](super::KafkaClients::send_record) go: made once for a
/// [`Deliveries`] and shared by its records, each of which holds a reference, not an
/// allocation of its own.
#[derive(Clone)]
pub struct ReportTo {
    pub(super) delivery: Arc<Delivery>,
    deliveries: Arc<Deliveries>,
}

impl ReportTo {
    /// Reports to `deliveries`.
    pub fn new(deliveries: &Arc<Deliveries>) -> ReportTo {
        ReportTo {
            delivery: Arc::new(Delivery::Send(Arc::clone(deliveries))),
            deliveries: Arc::clone(deliveries),
        }
    }

    /// The deliveries the reports go to.
    pub fn deliveries(&self) -> &Arc<Deliveries> {
        &self.deliveries
    }
}

impl std::fmt::Debug for ReportTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportTo").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_wait_for_every_report_and_keep_the_first_failure() {
        let deliveries = Arc::new(Deliveries::default());
        deliveries.sending();
        deliveries.sending();
        deliveries.reported(None);
        let waited = deliveries.wait(Duration::from_millis(20));
        assert!(
            matches!(waited, Err(Error::Timeout(_))),
            "one record unreported: {waited:?}"
        );
        // The last report comes from another thread while `wait` sleeps, as librdkafka's do.
        let reporter = {
            let deliveries = Arc::clone(&deliveries);
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                deliveries.reported(Some(("lost".to_owned(), false)));
            })
        };
        deliveries
            .wait(Duration::from_secs(10))
            .expect("every record reported");
        reporter.join().expect("reporter");
        assert_eq!(deliveries.failed(), 1);
        assert_eq!(deliveries.first_failure().as_deref(), Some("lost"));
        assert!(!deliveries.only_timeouts());
        deliveries.wait(Duration::ZERO).expect("nothing in flight");
    }
}
