//! What happens when user code fails: the processing and deserialization handlers (Kafka
//! Streams' KIP-1033 and KIP-161), the dead-letter topic (KIP-1034) and the uncaught-error
//! policy (KIP-671).
//!
//! A processor's `process` or `punctuate` that returns an error or panics fails its task at
//! that record: nothing the call wrote is committed, and the outputs it sent are dropped. The
//! call is rolled back alone at once: each store of the task drops the writes of that call,
//! and only those (a savepoint per call in a logged store's write buffer), and a store of
//! another kind than key-value that the call changed is opened again over what it holds then.
//! The handler then answers, for that one record:
//! - [`ErrorAction::Fail`]: the failure goes to the [`UncaughtErrorPolicy`](crate::UncaughtErrorPolicy);
//! - [`ErrorAction::Continue`]: the record is skipped: the task moves its position past it and
//!   goes on with the next record, so the record is never processed again and counts
//!   nowhere. Nothing else goes back: no other record of the task or of another task is
//!   processed again, and under `exactly_once_v2` the open transaction goes on;
//! - [`ErrorAction::DeadLetter`]: as `Continue`, and the record goes to
//!   [`dead_letter_topic`](crate::TasksConfig::dead_letter_topic), with the error in its
//!   headers ([`DEAD_LETTER_HEADERS`]), queued after the outputs of the records before it: it
//!   goes in the transaction (or, under `at_least_once`, is acknowledged before the commit)
//!   that moves the position past the record.
//!
//! The handler is asked once per failing record. A skipped record is remembered until a commit
//! moves the task's position past it: should the task go back to its last commit before that
//! (a timeout of the outputs or of a commit, an aborted transaction), even as a copy opened
//! again on this instance, the record is passed over without the processor or the handler,
//! and its dead letter is sent again with the pass (under `exactly_once_v2` the first one was
//! in the aborted transaction).
//!
//! Where a call cannot be rolled back alone (a commit came in the middle of it, which a task's
//! stores never do by themselves), and under `replace_thread`, the task goes back to its last
//! commit instead: every logged store drops what it buffered since, the records since are
//! processed again and send their outputs again (outputs are at least once), and under
//! `exactly_once_v2` the open transaction is aborted, which sends every task of the instance
//! back to its last commit. Each such failure is counted in
//! [`FAILURE_ABORTS_TOTAL`](crate::metrics::FAILURE_ABORTS_TOTAL). An error of the producer
//! or of a commit still aborts the transaction under `exactly_once_v2`, whatever the records
//! did: it is not a failure of user code, and is not counted there. A store with logging off
//! is rolled back alone too (each write of a call first reads the value it replaces, one read
//! per write of such a store), but a rewind leaves it as it is: it has no commit to go back
//! to.

use std::panic::{AssertUnwindSafe, catch_unwind};

use statestore_changelog::TaskId;
use store_api::{Error, Result};

use crate::config::ErrorAction;
use crate::record::InputRecord;

/// Which call of user code failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureStage {
    /// Decoding the record with [`ProcessorContext::key_as`](crate::ProcessorContext::key_as)
    /// or [`value_as`](crate::ProcessorContext::value_as): the deserialization handler
    /// ([`TasksConfig::deserialization_error`](crate::TasksConfig::deserialization_error))
    /// answers.
    Deserialization,
    /// [`Processor::process`](crate::Processor::process).
    Processing,
    /// [`Processor::punctuate`](crate::Processor::punctuate): there is no record to skip or
    /// send, so `Continue` and `DeadLetter` both drop the punctuation's writes and go on.
    Punctuation,
    /// [`Processor::init`](crate::Processor::init), or the supplier that makes a task's
    /// processor: no handler is asked, the [`UncaughtErrorPolicy`](crate::UncaughtErrorPolicy) decides.
    Initialization,
}

/// The input record a failed call was processing, copied out of the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRecord {
    /// Its input topic.
    pub topic: String,
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: u64,
    /// Its timestamp in milliseconds since the epoch, when it has one.
    pub timestamp: Option<i64>,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl FailedRecord {
    pub(crate) fn of(message: &dyn InputRecord, partition: u32, offset: u64) -> FailedRecord {
        // rdkafka panics on a header name that is not UTF-8: such a record keeps no headers.
        let headers = catch_unwind(AssertUnwindSafe(|| {
            (0..message.header_count())
                .filter_map(|index| message.header(index))
                .map(|(name, value)| (name.to_owned(), value.map(<[u8]>::to_vec)))
                .collect()
        }))
        .unwrap_or_default();
        FailedRecord {
            topic: message.topic().to_owned(),
            partition,
            offset,
            timestamp: message.timestamp(),
            key: message.key().map(<[u8]>::to_vec),
            value: message.value().map(<[u8]>::to_vec),
            headers,
        }
    }
}

/// A failure of user code, as an [`ErrorHandler`] sees it.
#[derive(Debug)]
pub struct Failure {
    /// The task whose processor failed.
    pub task: TaskId,
    /// Which call failed.
    pub stage: FailureStage,
    /// The record being processed, for [`Deserialization`](FailureStage::Deserialization) and
    /// [`Processing`](FailureStage::Processing).
    pub record: Option<FailedRecord>,
    /// The error the call returned, or, for a panic, an error carrying the panic's message.
    pub error: Error,
    /// The call panicked rather than returning an error.
    pub panicked: bool,
    /// The index of the record's input topic in the configuration.
    pub(crate) topic_index: Option<usize>,
}

impl Failure {
    /// What failed, for an error: the task, the stage and, when there is one, the record's
    /// topic, partition and offset.
    pub fn describe(&self) -> String {
        let stage = match self.stage {
            FailureStage::Deserialization => "deserialization",
            FailureStage::Processing => "processing",
            FailureStage::Punctuation => "punctuation",
            FailureStage::Initialization => "initialization",
        };
        let failed = if self.panicked { "panicked" } else { "failed" };
        match &self.record {
            Some(record) => format!(
                "task {} {failed} in {stage} of the record at {}/{} offset {}",
                self.task, record.topic, record.partition, record.offset
            ),
            None => format!("task {} {failed} in {stage}", self.task),
        }
    }

    /// The failure's error, of the same kind, its text led by [`describe`](Failure::describe):
    /// the error a policy returns names the record it failed on.
    pub fn into_error(self) -> Error {
        let what = self.describe();
        match self.error {
            Error::InvalidArgument(message) => Error::InvalidArgument(format!("{what}: {message}")),
            Error::Corruption(message) => Error::Corruption(format!("{what}: {message}")),
            Error::Unsupported(message) => Error::Unsupported(format!("{what}: {message}")),
            Error::Timeout(message) => Error::Timeout(format!("{what}: {message}")),
            Error::Fenced(message) => Error::Fenced(format!("{what}: {message}")),
            Error::Io { context, source } => Error::io(format!("{context} ({what})"), source),
            Error::Locked { path, detail } => Error::locked(path, format!("{what}: {detail}")),
            Error::Backend { backend, source } => {
                Error::backend(backend, format!("{what}: {source}"))
            }
            // `Closed` and `SchemaVersion` carry no text: the log line names the record.
            other => other,
        }
    }
}

/// Decides what happens to a record whose processing failed (see the module docs). The
/// configuration's [`processing_error`](crate::TasksConfig::processing_error) and
/// [`deserialization_error`](crate::TasksConfig::deserialization_error) are the default
/// handler; [`Application::set_error_handler`](crate::Application::set_error_handler)
/// replaces it. A closure `Fn(&Failure) -> ErrorAction` is a handler.
///
/// A handler runs on a processing thread, and a handler that panics is answered `Fail`.
pub trait ErrorHandler: Send + Sync {
    /// The answer for `failure`.
    fn handle(&self, failure: &Failure) -> ErrorAction;
}

impl<F> ErrorHandler for F
where
    F: Fn(&Failure) -> ErrorAction + Send + Sync,
{
    fn handle(&self, failure: &Failure) -> ErrorAction {
        self(failure)
    }
}

/// The handler the configuration describes: one action for deserialization failures, one for
/// the others.
pub(crate) struct ConfiguredHandler {
    pub processing: ErrorAction,
    pub deserialization: ErrorAction,
}

impl ErrorHandler for ConfiguredHandler {
    fn handle(&self, failure: &Failure) -> ErrorAction {
        match failure.stage {
            FailureStage::Deserialization => self.deserialization,
            FailureStage::Processing | FailureStage::Punctuation => self.processing,
            FailureStage::Initialization => ErrorAction::Fail,
        }
    }
}

/// Asks `handler` about `failure`: `Fail` for an initialization failure, and when the handler
/// itself panics.
pub(crate) fn decide(handler: &dyn ErrorHandler, failure: &Failure) -> ErrorAction {
    if failure.stage == FailureStage::Initialization {
        return ErrorAction::Fail;
    }
    catch_unwind(AssertUnwindSafe(|| handler.handle(failure))).unwrap_or_else(|_| {
        tracing::error!(task = %failure.task, "the error handler panicked: failing the task");
        ErrorAction::Fail
    })
}

/// The headers a dead letter carries besides the failed record's own, as Kafka Streams names
/// them (KIP-1034), each a UTF-8 string: the error's kind (`panic` for a panic), its message,
/// and the record's input topic, partition and offset.
pub const DEAD_LETTER_HEADERS: [&str; 5] = [
    "__streams.errors.exception",
    "__streams.errors.message",
    "__streams.errors.topic",
    "__streams.errors.partition",
    "__streams.errors.offset",
];

/// The headers of the dead letter of `record`, which failed with `failure`: the record's own,
/// then [`DEAD_LETTER_HEADERS`].
pub(crate) fn dead_letter_headers(
    record: &FailedRecord,
    failure: &Failure,
) -> Vec<(String, Option<Vec<u8>>)> {
    let exception = if failure.panicked {
        "panic".to_owned()
    } else {
        format!("{:?}", failure.error.kind())
    };
    let values = [
        exception,
        failure.error.to_string(),
        record.topic.clone(),
        record.partition.to_string(),
        record.offset.to_string(),
    ];
    let mut headers = record.headers.clone();
    headers.extend(
        DEAD_LETTER_HEADERS
            .iter()
            .zip(values)
            .map(|(name, value)| ((*name).to_owned(), Some(value.into_bytes()))),
    );
    headers
}

/// Runs user code `call`, turning a panic into an error: `Err(panicked)` is the panic's
/// message as a `Backend` error of backend `processor`.
pub(crate) fn guarded<T>(
    call: impl FnOnce() -> Result<T>,
) -> std::result::Result<T, (Error, bool)> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err((err, false)),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err((
                Error::backend("processor", format!("the processor panicked: {message}")),
                true,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FailedRecord, Failure, FailureStage, guarded};
    use crate::config::ErrorAction;
    use statestore_changelog::TaskId;
    use store_api::{Error, ErrorKind};

    #[test]
    fn the_error_a_policy_returns_names_the_record() {
        let failure = Failure {
            task: TaskId {
                subtopology: 0,
                partition: 3,
            },
            stage: FailureStage::Processing,
            record: Some(FailedRecord {
                topic: "words".to_owned(),
                partition: 3,
                offset: 17,
                timestamp: None,
                key: None,
                value: None,
                headers: Vec::new(),
            }),
            error: Error::invalid("no"),
            panicked: false,
            topic_index: Some(0),
        };
        let err = failure.into_error();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        let message = err.to_string();
        for part in ["task 0_3", "processing", "words/3 offset 17", ": no"] {
            assert!(message.contains(part), "{part:?} not in: {message}");
        }
    }

    #[test]
    fn a_panic_becomes_an_error_with_its_message() {
        let (err, panicked) =
            guarded(|| -> store_api::Result<()> { panic!("bad {}", 42) }).expect_err("panicked");
        assert!(panicked);
        assert_eq!(err.kind(), ErrorKind::Backend);
        assert!(err.to_string().contains("bad 42"), "{err}");
        let (err, panicked) =
            guarded(|| -> store_api::Result<()> { Err(Error::invalid("no")) }).expect_err("err");
        assert!(!panicked);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert_eq!(guarded(|| Ok(7)).expect("ok"), 7);
    }

    #[test]
    fn actions_read_as_snake_case() {
        let action: ErrorAction = serde_json::from_str("\"dead_letter\"").expect("parse");
        assert_eq!(action, ErrorAction::DeadLetter);
    }
}
