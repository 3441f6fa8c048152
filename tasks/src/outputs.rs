//! The records processors send to output topics: at least once, and never committed past.
//!
//! Outputs go through the instance's one idempotent producer (the changelogs' too), whose
//! delivery reports record every failure. A commit flushes the producer first and fails if any output was not
//! acknowledged, so state and input positions never commit past a lost output. What happens
//! then is the [`ProductionErrorPolicy`]'s choice, as with Kafka Streams' production
//! exception handler.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use statestore_changelog::{Deliveries, KafkaClients};
use store_api::{Error, ErrorKind, Result};

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
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// The outputs of the instance's tasks, sent on the instance's one producer.
pub(crate) struct Outputs {
    deliveries: Arc<Deliveries>,
    pending: Vec<Output>,
    policy: ProductionErrorPolicy,
}

impl Outputs {
    pub fn new(policy: ProductionErrorPolicy) -> Outputs {
        Outputs {
            deliveries: Arc::default(),
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
        self.deliveries.failed()
    }

    /// Hands the pending outputs to the producer.
    ///
    /// # Errors
    /// A record the producer refuses at once (too large for `message.max.bytes`), or, under
    /// [`ProductionErrorPolicy::Fail`], an earlier output that failed.
    pub fn send(&mut self, clients: &KafkaClients) -> Result<()> {
        for output in self.pending.drain(..) {
            let sent = clients.send_with_headers(
                &output.topic,
                output.key.as_deref(),
                output.value.as_deref(),
                &output.headers,
                &self.deliveries,
            );
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

    /// Sends the pending outputs and waits until every output is acknowledged or failed.
    ///
    /// # Errors
    /// As [`send`](Outputs::send); `Timeout` when the brokers do not answer within the
    /// produce timeout; under [`ProductionErrorPolicy::Fail`], any output that failed.
    pub fn flush(&mut self, clients: &KafkaClients) -> Result<()> {
        self.send(clients)?;
        clients.flush()?;
        self.deliveries.wait(clients.produce_timeout())?;
        self.check()
    }

    /// Forgets the outputs not sent yet and the failures so far: for a runtime that will
    /// process again every record whose outputs they concern.
    pub fn forget_failures(&mut self) {
        self.pending.clear();
        self.deliveries.forget_failures();
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
