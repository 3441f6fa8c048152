//! The policies of an application: how partitions are assigned, and what happens when user
//! code or an output fails.

use serde::{Deserialize, Serialize};

/// What the runtime does with a record whose processing failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorAction {
    /// The task stops at the record, uncommitted, and the
    /// [`UncaughtErrorPolicy`] decides what comes next. Kafka Streams' `FAIL`
    /// (`LogAndFailExceptionHandler`, the default).
    #[default]
    Fail,
    /// Skip the record: none of its writes or outputs remain, and the task goes on after it
    /// (see the module docs). Kafka Streams' `CONTINUE` (`LogAndContinueExceptionHandler`).
    Continue,
    /// Send the record to the dead-letter topic with the error in its headers, then skip it
    /// as [`Continue`](ErrorAction::Continue) does (KIP-1034).
    DeadLetter,
}

/// What happens after a failure its handler answered [`ErrorAction::Fail`] (and after a
/// failed or panicking [`Processor::init`](crate::Processor::init)): Kafka Streams'
/// `StreamsUncaughtExceptionHandler` responses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UncaughtErrorPolicy {
    /// The application stops: `poll` returns the error and `run` closes the instance. The
    /// failed task is closed without committing; every other task commits what it finished,
    /// its outputs delivered first. Kafka Streams' `SHUTDOWN_CLIENT`, its default.
    #[default]
    ShutdownClient,
    /// The failed task goes back to its last commit and starts again from there (its
    /// processor's `init` runs again), and the instance keeps running; its other tasks are not
    /// touched. A record that fails every time is tried again and again: Kafka Streams'
    /// `REPLACE_THREAD`, with the thread's work reduced to the one task that failed.
    ReplaceThread,
}

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

/// How partitions are spread over the instances of a group (librdkafka's
/// `partition.assignment.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AssignmentStrategy {
    /// Eager `range`: every rebalance revokes every partition of every member, then assigns
    /// the new split. Simple; every task closes and reopens (restoring only its tail).
    #[default]
    Range,
    /// Eager `roundrobin`.
    Roundrobin,
    /// Incremental `cooperative-sticky`: only the partitions that move are revoked.
    CooperativeSticky,
}

impl AssignmentStrategy {
    /// librdkafka's name of the strategy.
    pub fn librdkafka_name(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => "range",
            AssignmentStrategy::Roundrobin => "roundrobin",
            AssignmentStrategy::CooperativeSticky => "cooperative-sticky",
        }
    }
}

/// What an application's outputs and state survive, as Kafka Streams' `processing.guarantee`.
/// Either way a task's state is exactly once: its input position commits with its stores
/// and a new owner fences the old one's changelogs. See "Guarantees" in the README.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessingGuarantee {
    /// Outputs at least once: a crash between an output and the commit after it sends the
    /// output again when the record is processed again. No transaction: works with any
    /// broker, and costs nothing beyond the commit. Kafka Streams' `at_least_once`.
    #[default]
    AtLeastOnce,
    /// Outputs, changelog records and input offsets of one commit in one Kafka transaction:
    /// a reader with `isolation.level=read_committed` sees each output exactly once, and a
    /// crash, an abort or a fenced owner leaves every local store at its last committed
    /// state (nothing is wiped). Costs a transaction per commit (a few round trips to the
    /// transaction coordinator), and readers downstream see outputs only once their commit
    /// ends. Needs brokers with transactions. Kafka Streams' `exactly_once_v2`.
    ExactlyOnceV2,
}
