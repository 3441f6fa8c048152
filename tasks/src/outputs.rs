//! The records processors send to output topics: at least once, and never committed past.
//!
//! Outputs go through one idempotent producer per instance whose delivery callback records
//! every failure. A commit flushes the producer first and fails if any output was not
//! acknowledged, so state and input positions never commit past a lost output. What happens
//! then is the [`ProductionErrorPolicy`]'s choice, as with Kafka Streams' production
//! exception handler.

use std::time::Duration;

use parking_lot::Mutex;
use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use serde::{Deserialize, Serialize};
use store_api::{Error, Result};

use crate::config::TasksConfig;
use crate::topics::convert;

/// What a task does with an output record the brokers did not acknowledge (refused as too
/// large, no such topic, not authorised, timed out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProductionErrorPolicy {
    /// Stop: the commit fails, nothing of the tasks is committed past the record, and
    /// [`poll`](crate::Application::poll) returns the error; closing the application then
    /// closes its tasks without committing, so whoever runs them next processes the record
    /// again. Kafka Streams' default (`DefaultProductionExceptionHandler`: FAIL).
    #[default]
    Fail,
    /// Log the failure, count it
    /// ([`Application::dropped_outputs`](crate::Application::dropped_outputs)) and commit as if the record had been delivered:
    /// the output is lost (Kafka Streams' CONTINUE).
    Continue,
}

/// A record the processor sends to an output topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Output {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// The output producer's context: keeps the first delivery failure.
#[derive(Default)]
pub(crate) struct OutputContext {
    failure: Mutex<Option<String>>,
    dropped: Mutex<u64>,
}

impl ClientContext for OutputContext {}

impl ProducerContext for OutputContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((err, message)) = result {
            let what = format!(
                "output record to {} (partition {}) was not delivered: {err}",
                message.topic(),
                message.partition()
            );
            tracing::warn!("{what}");
            *self.dropped.lock() += 1;
            self.failure.lock().get_or_insert(what);
        }
    }
}

/// The instance's output producer, created at the first output.
pub(crate) struct Outputs {
    producer: Option<BaseProducer<OutputContext>>,
    pending: Vec<Output>,
    policy: ProductionErrorPolicy,
}

impl Outputs {
    pub fn new(policy: ProductionErrorPolicy) -> Outputs {
        Outputs {
            producer: None,
            pending: Vec::new(),
            policy,
        }
    }

    /// Where the processor's outputs go until [`send`](Outputs::send).
    pub fn pending(&mut self) -> &mut Vec<Output> {
        &mut self.pending
    }

    /// Outputs not delivered and dropped under [`ProductionErrorPolicy::Continue`] (or
    /// failed under `Fail`).
    pub fn dropped(&self) -> u64 {
        self.producer
            .as_ref()
            .map_or(0, |producer| *producer.context().dropped.lock())
    }

    /// Hands the pending outputs to the producer.
    ///
    /// # Errors
    /// A record the producer refuses at once (too large for `message.max.bytes`), or, under
    /// [`ProductionErrorPolicy::Fail`], an earlier output that failed.
    pub fn send(
        &mut self,
        config: &TasksConfig,
        base: impl FnOnce() -> rdkafka::ClientConfig,
    ) -> Result<()> {
        if !self.pending.is_empty() && self.producer.is_none() {
            let mut client = base();
            client
                .set("enable.idempotence", "true")
                .set("acks", "all")
                .set("message.timeout.ms", config.request_timeout_ms.to_string());
            let producer = client
                .create_with_context(OutputContext::default())
                .map_err(|err| convert("creating the output producer", err))?;
            self.producer = Some(producer);
        }
        let Some(producer) = &self.producer else {
            return Ok(());
        };
        for output in self.pending.drain(..) {
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&output.topic);
            if let Some(key) = &output.key {
                record = record.key(key.as_slice());
            }
            if let Some(value) = &output.value {
                record = record.payload(value.as_slice());
            }
            let mut pending = record;
            loop {
                match producer.send(pending) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        producer.poll(Duration::from_millis(10));
                        pending = back;
                    }
                    Err((err, _)) => {
                        let what = format!("output record to {} was refused: {err}", output.topic);
                        match self.policy {
                            ProductionErrorPolicy::Fail => {
                                let mut failure = producer.context().failure.lock();
                                failure.get_or_insert(what.clone());
                                return Err(Error::invalid(what));
                            }
                            ProductionErrorPolicy::Continue => {
                                tracing::warn!("{what}; dropped");
                                *producer.context().dropped.lock() += 1;
                                break;
                            }
                        }
                    }
                }
            }
        }
        producer.poll(Duration::ZERO);
        self.check()
    }

    /// Sends the pending outputs and waits until every output is acknowledged or failed.
    ///
    /// # Errors
    /// As [`send`](Outputs::send); `Timeout` when the brokers do not answer within the
    /// request timeout; under [`ProductionErrorPolicy::Fail`], any output that failed.
    pub fn flush(
        &mut self,
        config: &TasksConfig,
        base: impl FnOnce() -> rdkafka::ClientConfig,
    ) -> Result<()> {
        self.send(config, base)?;
        if let Some(producer) = &self.producer {
            producer
                .flush(config.request_timeout())
                .map_err(|err| convert("flushing the output records", err))?;
        }
        self.check()
    }

    /// The first failed output, under [`ProductionErrorPolicy::Fail`]. It stays: once an
    /// output is lost, nothing is committed again by this instance.
    fn check(&self) -> Result<()> {
        if self.policy == ProductionErrorPolicy::Continue {
            return Ok(());
        }
        let failure = self
            .producer
            .as_ref()
            .and_then(|producer| producer.context().failure.lock().clone());
        match failure {
            Some(what) => Err(Error::backend("kafka", what)),
            None => Ok(()),
        }
    }
}
