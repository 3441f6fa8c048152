//! The transactional producer of a [`KafkaClients`](super::KafkaClients): Kafka's
//! exactly-once path, for an owner that commits outputs, changelog records and consumed
//! offsets as one transaction (Kafka Streams' `exactly_once_v2`).
//!
//! One producer with a `transactional.id` stable across restarts: its first use calls
//! `init_transactions`, which fences every earlier producer of that id (a previous
//! incarnation of the process) and aborts its open transaction at once. A transaction begins
//! at the first record after a commit or an abort, so an idle owner holds none open. A
//! fatal error (a newer producer of the id fenced this one) or a failed abort drops the
//! producer; the next record starts a new one, whose `init_transactions` aborts whatever the
//! old one left open.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use store_api::{Error, Result};

use super::error::convert;
use super::producer::{self, PolledProducer};

/// The transactional producer and whether a transaction is open on it.
pub(super) struct Transactions {
    transactional_id: String,
    timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    producer: Option<Arc<PolledProducer>>,
    open: bool,
}

impl Transactions {
    /// Transactions of producers with `transactional_id`, each aborted by the brokers when
    /// not committed within `timeout` (`transaction.timeout.ms`).
    pub(super) fn new(transactional_id: String, timeout: Duration) -> Transactions {
        Transactions {
            transactional_id,
            timeout,
            state: Mutex::new(State::default()),
        }
    }

    /// The producer, with a transaction open on it: created (and its transactions
    /// initialized) at the first call, and after a fatal error dropped the previous one.
    ///
    /// # Errors
    /// `InvalidArgument` for a property librdkafka refuses; as
    /// [`commit`](Transactions::commit) for `init_transactions` or `begin_transaction`.
    pub(super) fn begun(&self, base: &ClientConfig) -> Result<Arc<PolledProducer>> {
        let mut state = self.state.lock();
        let producer = self.producer(&mut state, base)?;
        if !state.open {
            if let Err(err) = producer.begin_transaction() {
                return Err(self.failed(&mut state, "beginning a transaction", err));
            }
            state.open = true;
        }
        Ok(producer)
    }

    /// Creates the producer and initializes its transactions now, if it does not exist yet:
    /// a previous incarnation's open transaction is aborted at once, instead of holding back
    /// readers of committed records (a restore, a fence) until it times out.
    ///
    /// # Errors
    /// As [`begun`](Transactions::begun).
    pub(super) fn init(&self, base: &ClientConfig) -> Result<()> {
        self.producer(&mut self.state.lock(), base).map(drop)
    }

    fn producer(&self, state: &mut State, base: &ClientConfig) -> Result<Arc<PolledProducer>> {
        if let Some(producer) = &state.producer {
            return Ok(Arc::clone(producer));
        }
        let created = Arc::new(self.create(base)?);
        state.producer = Some(Arc::clone(&created));
        Ok(created)
    }

    fn create(&self, base: &ClientConfig) -> Result<PolledProducer> {
        let mut config = base.clone();
        // Told apart from the idempotent producer, which keeps the fences and repairs.
        if let Some(id) = base.get("client.id") {
            config.set("client.id", format!("{id}-transactional"));
        }
        // librdkafka refuses a message timeout beyond the transaction's: a record not
        // delivered by then fails the transaction anyway.
        config
            .set("transactional.id", &self.transactional_id)
            .set("transaction.timeout.ms", millis(self.timeout));
        let producer = producer::new_producer_with(&config, self.timeout)?;
        producer
            .init_transactions(self.timeout)
            .map_err(|err| classify("initializing the transactions", err))?;
        tracing::debug!(
            transactional_id = self.transactional_id,
            "transactions initialized"
        );
        Ok(producer)
    }

    /// Whether a transaction is open: records were sent since the last commit or abort.
    pub(super) fn is_open(&self) -> bool {
        self.state.lock().open
    }

    /// Adds `offsets` (the next offset of each consumed partition) to the open transaction
    /// as the consumer group of `group` commits them, then commits the transaction. With no
    /// transaction open and no offsets, does nothing; offsets alone commit a transaction of
    /// their own.
    ///
    /// # Errors
    /// The transaction is aborted (or its producer dropped, which aborts it) before the
    /// error returns, and nothing of it is visible to a reader of committed records:
    /// `Fenced` when a newer producer of the transactional id, or the group (a generation
    /// this member is no longer part of), fenced it; `Timeout` when the brokers did not
    /// answer in time; `Backend` for another abortable error (a record the brokers refused);
    /// `InvalidArgument` for a fatal one that another producer would meet as well
    /// (transactions unsupported or not authorized).
    pub(super) fn commit(
        &self,
        base: &ClientConfig,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        if offsets.count() == 0 && !self.is_open() {
            return Ok(());
        }
        let producer = self.begun(base)?;
        let mut state = self.state.lock();
        let committed = if offsets.count() > 0 {
            producer.send_offsets_to_transaction(offsets, group, self.timeout)
        } else {
            Ok(())
        }
        .and_then(|()| producer.commit_transaction(self.timeout));
        match committed {
            Ok(()) => {
                state.open = false;
                Ok(())
            }
            Err(err) => Err(self.failed(&mut state, "committing the transaction", err)),
        }
    }

    /// Aborts the open transaction, if any: its records are never visible to a reader of
    /// committed records. A producer whose abort fails is dropped (the next one's
    /// `init_transactions` aborts the transaction).
    ///
    /// # Errors
    /// `Fenced` when the producer was fenced (a newer producer of the transactional id, or
    /// the coordinator aborting a transaction that outlived its timeout and bumping the
    /// epoch): the owner may no longer own its tasks, and must not open them again. The
    /// producer is dropped.
    /// `InvalidArgument` naming the API the brokers answered with a fatal error, when the
    /// producer had failed for good (a fatal error met on the way, by a record or by
    /// librdkafka's own requests, such as AddPartitionsToTxn); it is dropped all the same.
    pub(super) fn abort(&self) -> Result<()> {
        let mut state = self.state.lock();
        if !state.open {
            return Ok(());
        }
        state.open = false;
        let Some(producer) = state.producer.clone() else {
            return Ok(());
        };
        if let Some(fenced) = fenced_by(&producer, "aborting the transaction") {
            tracing::warn!(%fenced, "the transactional producer was fenced: dropped");
            retire(&mut state);
            return Err(fenced);
        }
        if let Some(fatal) = failed_for_good(&producer, "aborting the transaction") {
            tracing::warn!(%fatal, "the transactional producer failed for good: dropped");
            retire(&mut state);
            return Err(fatal);
        }
        if let Err(err) = producer.abort_transaction(self.timeout) {
            tracing::warn!(%err, "aborting the transaction failed: the producer is dropped");
            retire(&mut state);
            let fenced = transaction_error(&err).is_some_and(|txn| is_fence(txn.code()))
                || producer
                    .client()
                    .fatal_error()
                    .is_some_and(|(code, _)| is_fence(code));
            if fenced {
                return Err(Error::Fenced(format!(
                    "kafka, while aborting the transaction: {err}"
                )));
            }
        }
        Ok(())
    }

    /// Answers a failed transactional call: an abortable error aborts the transaction, any
    /// other drops the producer. Returns the error, classified.
    fn failed(&self, state: &mut State, doing: &str, err: KafkaError) -> Error {
        let abortable = matches!(&err, KafkaError::Transaction(e) if e.txn_requires_abort());
        let aborted = abortable
            && state
                .producer
                .as_ref()
                .is_some_and(|producer| producer.abort_transaction(self.timeout).is_ok());
        // The error librdkafka returns may be a consequence (a state error) of a fatal one
        // met earlier, which is the cause to report.
        let fatal = state
            .producer
            .as_ref()
            .and_then(|producer| failed_for_good(producer, doing));
        if !aborted {
            retire(state);
        }
        state.open = false;
        let error = fatal.unwrap_or_else(|| classify(doing, err));
        tracing::warn!(%error, aborted, "transaction failed");
        error
    }

    /// Drops the producer (on a thread of its own: its drop waits for purged records), which
    /// the brokers then treat as gone: its open transaction is aborted by the next
    /// producer's `init_transactions`, or when it times out.
    pub(super) fn close(&self) {
        retire(&mut self.state.lock());
    }
}

fn retire(state: &mut State) {
    state.open = false;
    if let Some(producer) = state.producer.take() {
        producer::purge(&producer);
        let spawned = thread::Builder::new()
            .name("kafka-txn-producer-retire".to_owned())
            .spawn(move || drop(producer));
        if let Err(err) = spawned {
            tracing::debug!(%err, "no thread to retire the producer on; it was dropped in place");
        }
    }
}

fn millis(duration: Duration) -> String {
    duration.as_millis().to_string()
}

/// The error of a failed transactional call, by what the owner does next: `Fenced` (another
/// owner took over: rejoin), `Timeout` (try again), `InvalidArgument` (fatal for any
/// producer of this configuration), `Backend` (abortable: process again).
fn classify(doing: &str, err: KafkaError) -> Error {
    let Some(txn) = transaction_error(&err) else {
        return convert(doing, err);
    };
    // librdkafka's text says what failed, not which API or error code: both are named.
    let cause = match api_of(&txn.string()) {
        Some(api) => format!("{api} answered {:?}", txn.code()),
        None => format!("{:?}", txn.code()),
    };
    let doing = &format!("{doing} ({cause})");
    if is_fence(txn.code()) {
        return Error::Fenced(format!("kafka, while {doing}: {err}"));
    }
    if txn.is_fatal() {
        return fatal(doing, &err);
    }
    if txn.is_retriable() || super::error::is_timeout(txn.code()) {
        return Error::Timeout(format!("kafka, while {doing}: {err}"));
    }
    convert(doing, err)
}

/// The error of transactions that failed for good while `doing` something: fatal for any
/// producer of this configuration.
fn fatal(doing: &str, err: &dyn std::fmt::Display) -> Error {
    Error::invalid(format!(
        "kafka's transactions failed for good while {doing}: {err} (do the brokers support \
         transactions, and is the transactional id authorized?)"
    ))
}

/// Whether `code` says another owner took over (a newer producer of the transactional id,
/// or a newer generation of the group): the owner rejoins, nothing failed for good.
fn is_fence(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::InvalidProducerIdMapping
            | RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::FencedInstanceId
            | RDKafkaErrorCode::IllegalGeneration
            | RDKafkaErrorCode::UnknownMemberId
            | RDKafkaErrorCode::RebalanceInProgress
    )
}

/// `Fenced` when `producer` met a fence that librdkafka made fatal (a newer epoch of its
/// transactional id), naming the code and librdkafka's reason.
fn fenced_by(producer: &PolledProducer, doing: &str) -> Option<Error> {
    let (code, reason) = producer.client().fatal_error()?;
    is_fence(code).then(|| Error::Fenced(format!("kafka, while {doing}: {code:?}: {reason}")))
}

/// The fatal error `producer` met, if it did (librdkafka keeps the first), with the API and
/// the error code named: the cause of every later failure of the producer (a record
/// refused with librdkafka's bare `Fatal`), to report in their place. `None` for a fence,
/// which librdkafka makes fatal too but which only means another owner took over: the
/// failures it causes are answered as a fence where it is reported (a commit).
pub(super) fn failed_for_good(producer: &PolledProducer, doing: &str) -> Option<Error> {
    let (code, reason) = producer.client().fatal_error()?;
    if is_fence(code) {
        return None;
    }
    let cause = match api_of(&reason) {
        Some(api) => format!("{api} answered {code:?}"),
        None => format!("{code:?}"),
    };
    Some(fatal(&format!("{doing} ({cause})"), &reason))
}

/// The transactional API a librdkafka error text is about, by the words librdkafka uses for
/// each (`rdkafka_txnmgr.c`, `rdkafka_idempotence.c`); `None` for another text.
fn api_of(text: &str) -> Option<&'static str> {
    const APIS: &[(&str, &str)] = &[
        ("transactional PID", "InitProducerId"),
        ("add partition", "AddPartitionsToTxn"),
        ("add offsets to transaction", "AddOffsetsToTxn"),
        ("commit offsets to transaction", "TxnOffsetCommit"),
        ("end transaction", "EndTxn"),
        ("EndTxn", "EndTxn"),
        ("transaction coordinator", "FindCoordinator"),
    ];
    let lower = text.to_ascii_lowercase();
    APIS.iter()
        .find(|(words, _)| lower.contains(&words.to_ascii_lowercase()))
        .map(|&(_, api)| api)
}

fn transaction_error(err: &KafkaError) -> Option<&RDKafkaError> {
    match err {
        KafkaError::Transaction(txn) => Some(txn),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts librdkafka 2.12 gives its transactional errors name their API.
    #[test]
    fn librdkafka_texts_name_their_api() {
        let cases = [
            (
                "Failed to acquire transactional PID from broker TxnCoordinator/1: Broker: \
                 Transactional Id authorization failed",
                Some("InitProducerId"),
            ),
            (
                "Failed to add partitions to transaction: Broker: Transactional Id authorization \
                 failed",
                Some("AddPartitionsToTxn"),
            ),
            (
                "Failed to add partition(s) to transaction on broker b: Broker: Topic \
                 authorization failed (after 3 ms)",
                Some("AddPartitionsToTxn"),
            ),
            (
                "Failed to add offsets to transaction: Broker: Invalid transaction state",
                Some("AddOffsetsToTxn"),
            ),
            (
                "Failed to commit offsets to transaction on broker b: t [0]: Broker: Group \
                 authorization failed (after 2ms)",
                Some("TxnOffsetCommit"),
            ),
            (
                "Failed to end transaction: Broker: Cluster authorization failed",
                Some("EndTxn"),
            ),
            (
                "EndTxn commit failed: Broker: Invalid txn state",
                Some("EndTxn"),
            ),
            ("Local: Operation timed out", None),
        ];
        for (text, api) in cases {
            assert_eq!(api_of(text), api, "{text}");
        }
    }
}
