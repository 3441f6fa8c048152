//! The read path: a consumer assigned to the (topic, partition) while a read runs.
//!
//! Restore reads the log in batches, each starting where the previous one stopped. The log
//! keeps its consumer, with its fetch position and prefetched records, between such batches,
//! so a batch costs no round trip to reposition; at the end of the log the consumer goes back
//! to the [`ReaderPool`] for the next read of any log. A read at any other offset assigns the
//! partition at that offset. No consumer group is joined and no offset is committed: the checkpoint file, not
//! Kafka, records how far a store got.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Headers;
use rdkafka::{Message, Offset, TopicPartitionList};
use store_api::{BatchOp, Error, Result};

use super::error::{convert, convert_because};
use super::readers::ReaderPool;
use super::retry::Retry;
use super::retry::is_fatal_for_consumer;
use super::watch::WatchedConsumer;
use super::wire::{EPOCH_HEADER, FRAME_HEADER, FRAMED, MARKER};
use crate::ChangelogRecord;
use crate::record::RecordKind;

/// The reads of one (topic, partition), on consumers lent by the clients' [`ReaderPool`].
pub struct Reader {
    readers: Arc<ReaderPool>,
    /// After a read that stopped before the end of the log: the consumer still assigned to
    /// the partition, the offset it returns next, and the high watermark that read saw.
    /// Given back at the end of the log.
    held: Option<Held>,
    topic: String,
    partition: i32,
    timeout: Duration,
}

/// A consumer kept assigned between reads of one partition.
struct Held {
    consumer: WatchedConsumer,
    /// The offset the consumer returns next.
    next: u64,
    /// The high watermark when the consumer was assigned or last refreshed: every offset
    /// below it was written, so a read from `next` up to it needs no new ListOffsets.
    high: u64,
}

impl Reader {
    /// Reads `topic`/`partition` with consumers from `readers`, each request waiting up to
    /// `timeout`.
    pub fn new(readers: Arc<ReaderPool>, timeout: Duration, topic: &str, partition: i32) -> Self {
        Reader {
            timeout,
            readers,
            held: None,
            topic: topic.to_owned(),
            partition,
        }
    }

    /// The lowest offset held and one past the highest written. Retriable errors (a leader
    /// that moved, a broker that is down) are retried until the admin timeout, each new
    /// attempt on a consumer other than the one that failed: a consumer that learned a leader
    /// as unavailable (a broker fenced for a moment) keeps failing until its next periodic
    /// metadata refresh, minutes later, while a new one asks the brokers.
    ///
    /// # Errors
    /// `Timeout` when no broker answers in time, `Backend` otherwise.
    pub fn watermarks(&self) -> Result<(u64, u64)> {
        let doing = format!(
            "fetching watermarks of {}/{} (ListOffsets)",
            self.topic, self.partition
        );
        let mut retry = Retry::new(&doing, self.timeout);
        let (low, high) = loop {
            let timeout = retry.attempt_timeout();
            let fetched = match &self.held {
                Some(held) if retry.failures() == 0 => {
                    held.consumer
                        .fetch_watermarks(&self.topic, self.partition, timeout)
                }
                _ => {
                    let consumer = self.readers.take()?;
                    let fetched = consumer.fetch_watermarks(&self.topic, self.partition, timeout);
                    if fetched.is_ok() {
                        self.readers.give_back(consumer);
                    }
                    fetched
                }
            };
            match fetched {
                Ok(watermarks) => break watermarks,
                Err(err) => retry.failed(err)?,
            }
        };
        let as_offset = |o: i64| u64::try_from(o).unwrap_or(0);
        Ok((as_offset(low), as_offset(high)))
    }

    /// Up to `max` records at or after `from`, stopping at the end of the log.
    ///
    /// # Errors
    /// `Timeout` when records below the high watermark do not arrive in time, `Corruption`
    /// for a record without a key, `Backend` for a consumer error.
    ///
    /// A read that continues where the previous one stopped, below the high watermark that
    /// read saw, goes on polling the consumer that read kept, up to that watermark, without
    /// asking the broker for the watermarks again (a ListOffsets round trip per read was most
    /// of a restore's time): it may stop short of records written since, which the next read
    /// after it, at that watermark, asks for.
    pub fn read(&mut self, from: u64, max: usize) -> Result<Vec<ChangelogRecord>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let (consumer, high) = match self.held.take() {
            Some(held) if held.next == from && from < held.high => (held.consumer, held.high),
            held => {
                self.held = held;
                let (low, high) = match self.watermarks() {
                    Ok(watermarks) => watermarks,
                    Err(err) => {
                        // A consumer kept from the last read may be the one that failed.
                        self.held = None;
                        return Err(err);
                    }
                };
                match self.positioned(from.max(low), high)? {
                    Some(consumer) => (consumer, high),
                    None => return Ok(Vec::new()),
                }
            }
        };
        let records = self.poll_until(&consumer, from, high, max);
        let next = match &records {
            Ok(records) if records.len() == max => records
                .last()
                .map(|record| record.offset + 1)
                .filter(|&next| next < high),
            _ => None,
        };
        match next {
            Some(next) => {
                self.held = Some(Held {
                    consumer,
                    next,
                    high,
                });
            }
            // After an error the consumer is dropped (see `ReaderPool::with_reader`).
            None if records.is_err() => {}
            // At the end nothing more is wanted for now: the consumer goes back to the
            // clients. The next read assigns the partition again.
            None => self.give_back(consumer),
        }
        records
    }

    /// A consumer that returns `from` next, below the high watermark `high`: the held one
    /// when it does, else one assigned at `from`. `None` when `from` is at or past `high`.
    fn positioned(&mut self, from: u64, high: u64) -> Result<Option<WatchedConsumer>> {
        if from >= high {
            return Ok(None);
        }
        let consumer = match self.held.take() {
            Some(held) if held.next == from => held.consumer,
            held => {
                let consumer = match held {
                    Some(held) => held.consumer,
                    None => self.readers.take()?,
                };
                if let Err(err) = self.assign(&consumer, from) {
                    self.give_back(consumer);
                    return Err(err);
                }
                consumer
            }
        };
        Ok(Some(consumer))
    }

    /// Stops the consumer's fetches and gives it back to the clients.
    fn give_back(&self, consumer: WatchedConsumer) {
        match consumer.unassign() {
            Ok(()) => self.readers.give_back(consumer),
            Err(err) => tracing::debug!(%err, "kafka consumer unassign failed; dropped"),
        }
    }

    fn assign(&self, consumer: &WatchedConsumer, from: u64) -> Result<()> {
        let offset = i64::try_from(from)
            .map_err(|_| Error::invalid(format!("offset {from} is beyond kafka's range")))?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, self.partition, Offset::Offset(offset))
            .and_then(|()| consumer.assign(&assignment))
            .map_err(|err| convert(&format!("assigning {}/{}", self.topic, self.partition), err))
    }

    /// Polls records in `[from, high)` until `max` arrived, the last one below `high` arrived,
    /// or librdkafka reports the end of the partition (compaction may have removed the
    /// records just below `high`).
    fn poll_until(
        &self,
        consumer: &WatchedConsumer,
        from: u64,
        high: u64,
        max: usize,
    ) -> Result<Vec<ChangelogRecord>> {
        let deadline = Instant::now() + self.timeout;
        let mut records = Vec::with_capacity(max.min(4096));
        // After a record, the next is most likely queued already: a poll that does not wait
        // takes it without reading the clock (librdkafka reads it several times in a poll
        // that may wait, which cost a tenth of a restore's reading thread). Only a poll that
        // found nothing queued is followed by one that waits for the next fetch.
        let mut queued = false;
        while records.len() < max {
            let waited = !queued;
            let wait = if queued {
                Duration::ZERO
            } else {
                deadline.saturating_duration_since(Instant::now())
            };
            let polled = consumer.poll(wait);
            queued = matches!(polled, Some(Ok(_)));
            match polled {
                // A consumer lent to another log before may still hold its records.
                Some(Ok(message))
                    if message.topic() != self.topic || message.partition() != self.partition => {}
                Some(Ok(message)) => {
                    consumer.context().answered();
                    let Some(record) = decode(&message, from)? else {
                        continue;
                    };
                    let done = record.offset + 1 >= high;
                    records.push(record);
                    if done {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(partition))) if partition == self.partition => {
                    break;
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(err))
                    if (is_fatal_for_consumer(&err)
                        && !consumer.context().only_token_refresh(&err))
                        || consumer.context().certificate_refused().is_some() =>
                {
                    let reason = consumer.context().explain(&err);
                    return Err(convert_because(
                        &format!(
                            "reading changelog {}/{} (Fetch)",
                            self.topic, self.partition
                        ),
                        err,
                        reason,
                    ));
                }
                // Transient errors (a broker reconnecting) are retried by librdkafka itself.
                Some(Err(err)) => tracing::debug!(%err, "kafka consumer error while reading"),
                None if waited && Instant::now() >= deadline => {
                    return Err(Error::Timeout(format!(
                        "kafka returned {} of the records between offsets {from} and {high} of \
                         {}/{} within {:?}",
                        records.len(),
                        self.topic,
                        self.partition,
                        self.timeout
                    )));
                }
                None => {}
            }
        }
        Ok(records)
    }
}

/// The changelog record of `message`, or `None` for one below `from` (a leftover of an
/// earlier position).
fn decode<M: Message>(message: &M, from: u64) -> Result<Option<ChangelogRecord>> {
    let offset = u64::try_from(message.offset())
        .map_err(|_| Error::Corruption(format!("kafka offset {}", message.offset())))?;
    if offset < from {
        return Ok(None);
    }
    let key = message
        .key()
        .ok_or_else(|| {
            Error::Corruption(format!("changelog record at offset {offset} has no key"))
        })?
        .to_vec();
    let op = match message.payload() {
        Some(value) => BatchOp::Put {
            key,
            value: value.to_vec(),
        },
        None => BatchOp::Delete { key },
    };
    let (kind, epoch) = framing(message, offset)?;
    Ok(Some(ChangelogRecord {
        offset,
        op,
        kind,
        epoch,
    }))
}

/// The framing and the writer epoch of `message`, from its frame and epoch headers (the first
/// of each name): unframed and 0 without them. The headers are parsed and walked once per
/// record, as librdkafka copies each header out of the fetched bytes on the first look.
fn framing<M: Message>(message: &M, offset: u64) -> Result<(RecordKind, u64)> {
    let Some(headers) = message.headers() else {
        return Ok((RecordKind::Unframed, 0));
    };
    let (mut frame, mut epoch) = (None, None);
    for header in headers.iter() {
        if frame.is_none() && header.key == FRAME_HEADER {
            frame = Some(header.value);
        } else if epoch.is_none() && header.key == EPOCH_HEADER {
            epoch = Some(header.value);
        }
        if frame.is_some() && epoch.is_some() {
            break;
        }
    }
    Ok((kind(frame, offset)?, epoch_value(epoch, offset)?))
}

/// The writer epoch of an epoch header's value (`None`: no such header, epoch 0).
fn epoch_value(value: Option<Option<&[u8]>>, offset: u64) -> Result<u64> {
    match value {
        None => Ok(0),
        Some(Some(bytes)) => <[u8; 8]>::try_from(bytes)
            .map(u64::from_be_bytes)
            .map_err(|_| {
                Error::Corruption(format!(
                    "changelog record at offset {offset} has an epoch header of {} bytes",
                    bytes.len()
                ))
            }),
        Some(None) => Err(Error::Corruption(format!(
            "changelog record at offset {offset} has an empty epoch header"
        ))),
    }
}

/// The framing a frame header's value says (`None`: no such header, unframed).
fn kind(frame: Option<Option<&[u8]>>, offset: u64) -> Result<RecordKind> {
    match frame {
        None => Ok(RecordKind::Unframed),
        Some(Some(FRAMED)) => Ok(RecordKind::Framed),
        Some(Some(MARKER)) => Ok(RecordKind::CommitMarker),
        Some(other) => Err(Error::Corruption(format!(
            "changelog record at offset {offset} has an unknown frame header {other:?}"
        ))),
    }
}
