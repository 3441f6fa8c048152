//! What the processing loop does with a failure of user code: asks the error handler, sends
//! the dead letter, lets the task go on past the failed call (rolled back alone), or takes
//! the task back to its last commit, or stops (see the `handlers` module for the contract).

use rdkafka::Offset;
use rdkafka::consumer::{BaseConsumer, Consumer};
use statestore_changelog::TaskId;
use store_api::Result;

use crate::config::{ErrorAction, TasksConfig, UncaughtErrorPolicy};
use crate::group::topics::convert;
use crate::runtime::handlers::{ErrorHandler, Failure, dead_letter_headers, decide};
use crate::runtime::outputs::OutputRecord;
use crate::runtime::shared::{GroupContext, Shared, partition_id, still_assigned};
use crate::state::task::Task;

/// How a failure was answered, for the processing loop.
#[derive(Debug, Default)]
pub(crate) struct Handled {
    /// The dead letter to queue now, after the outputs of the records before the failed one.
    pub dead_letter: Option<OutputRecord>,
    /// The task went back to its last commit, and its input partitions were sought back
    /// there: the records of the batch after the failed one come again. Under exactly-once
    /// the open transaction must be aborted.
    pub rewound: bool,
}

/// Answers `failure` with `handler`'s action. A skip (`Continue`, `DeadLetter`) of a call
/// that was rolled back alone lets the task go on: it passes the failed record and the dead
/// letter is returned, to be queued at once, in the transaction (or before the commit) that
/// moves the position past the record. A skip of a call that could not be rolled back, and
/// a `replace_thread`, rewind the failed task to its last commit and seek its input
/// partitions back there; the dead letter then goes out when the task passes the record
/// again. Otherwise the failure's error is returned, and the task stays poisoned.
///
/// # Errors
/// The failure's error under `shutdown_client`; an error of the rewind or of a seek.
pub(crate) fn handle(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Shared,
    handler: &dyn ErrorHandler,
    failure: Failure,
) -> Result<Handled> {
    // The handler is user code: it runs without the tasks' lock, which a query it makes takes.
    let action = decide(handler, &failure);
    let id = failure.task;
    let answered = {
        let mut tasks = shared.tasks.lock();
        answer(&shared.config, action, failure, tasks.get_mut(&id))?
    };
    match answered {
        Answer::GoesOn(dead_letter) => Ok(Handled {
            dead_letter,
            rewound: false,
        }),
        Answer::Rewind(skip) => {
            rewind(consumer, shared, id, skip)?;
            Ok(Handled {
                dead_letter: None,
                rewound: true,
            })
        }
    }
}

/// What a failure's answer leaves to the driver of the task's inputs.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The task goes on past the failed call (or was revoked meanwhile): the dead letter to
    /// queue now, after the outputs of the records before the failed one.
    GoesOn(Option<OutputRecord>),
    /// The task must go back to its last commit, and its inputs with it, passing over the
    /// record at (topic index, offset), if any, with its dead letter.
    Rewind(Option<Skip>),
}

/// A record to pass over, by (topic index, offset), with its dead letter.
pub(crate) type Skip = ((usize, u64), Option<OutputRecord>);

/// Applies `action`, the error handler's answer to `failure`, to `task` (`None`: revoked
/// meanwhile), as [`handle`] says, and counts it in the task's metrics.
///
/// # Errors
/// The failure's error for `Fail` under `shutdown_client`.
pub(crate) fn answer(
    config: &TasksConfig,
    action: ErrorAction,
    failure: Failure,
    task: Option<&mut Task>,
) -> Result<Answer> {
    let id = failure.task;
    let offset = failure.record.as_ref().map(|record| record.offset);
    tracing::error!(
        task = %failure.task,
        stage = ?failure.stage,
        offset,
        panicked = failure.panicked,
        error = %failure.error,
        ?action,
        "the processor failed"
    );
    let (skip, dead_letter) = match action {
        ErrorAction::Fail => match config.uncaught_error {
            UncaughtErrorPolicy::ShutdownClient => {
                if let Some(task) = &task {
                    task.metrics.failures.increment(1);
                }
                return Err(failure.into_error());
            }
            UncaughtErrorPolicy::ReplaceThread => (None, None),
        },
        ErrorAction::Continue => (skipped(&failure), None),
        ErrorAction::DeadLetter => (skipped(&failure), dead_letter_of(config, &failure)),
    };
    let Some(task) = task else {
        // A task revoked meanwhile needs nothing (a `replace_thread` still goes back, so that
        // an open transaction is aborted).
        return Ok(if action == ErrorAction::Fail {
            Answer::Rewind(None)
        } else {
            Answer::GoesOn(dead_letter)
        });
    };
    debug_assert_eq!(task.id, id);
    task.metrics.failures.increment(1);
    if skip.is_some() {
        task.metrics.skipped.increment(1);
    }
    if action != ErrorAction::Fail
        && task.go_on_after_failure(skip.map(|skip| (skip, dead_letter.clone())))
    {
        return Ok(Answer::GoesOn(dead_letter));
    }
    task.metrics.failure_aborts.increment(1);
    Ok(Answer::Rewind(skip.map(|skip| (skip, dead_letter))))
}

/// The (topic index, offset) of the record `failure` skips, if it failed on one.
fn skipped(failure: &Failure) -> Option<(usize, u64)> {
    let record = failure.record.as_ref()?;
    Some((failure.topic_index?, record.offset))
}

/// The dead letter of the record `failure` failed on: its key, value and headers, with the
/// error's headers, to `dead_letter_topic`; none without a record or a topic.
fn dead_letter_of(config: &TasksConfig, failure: &Failure) -> Option<OutputRecord> {
    let Some(topic) = &config.dead_letter_topic else {
        tracing::warn!(
            task = %failure.task,
            "no dead_letter_topic is configured: the record is skipped without a dead letter"
        );
        return None;
    };
    let record = failure.record.as_ref()?;
    let mut letter = OutputRecord::new(topic.clone());
    if let Some(key) = &record.key {
        letter = letter.key(key);
    }
    if let Some(value) = &record.value {
        letter = letter.value(value);
    }
    for (name, value) in dead_letter_headers(record, failure) {
        letter = letter.header(&name, value.as_deref());
    }
    Some(letter)
}

/// Takes task `id` back to its last commit, marks `skip` (topic index, offset) to be
/// passed over (sending its dead letter then), and seeks its input partitions to the commit's
/// offsets, so that the records since come again. A task revoked meanwhile needs nothing.
fn rewind(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Shared,
    id: TaskId,
    skip: Option<Skip>,
) -> Result<()> {
    let partition = id.partition;
    let mut tasks = shared.tasks.lock();
    let Some(task) = tasks.get_mut(&id) else {
        return Ok(());
    };
    task.rewind()?;
    let skip = skip.map(|((topic, offset), letter)| {
        task.skip(topic, offset, letter);
        (topic, offset)
    });
    for (topic, input) in shared.topics_of(id).iter().enumerate() {
        let offset = match task.next_offset(topic) {
            Some(next) => Offset::Offset(i64::try_from(next).map_err(|_| {
                store_api::Error::invalid(format!("offset {next} is beyond Kafka's range"))
            })?),
            None => Offset::Beginning,
        };
        let sought = consumer.seek(
            input,
            partition_id(partition),
            offset,
            shared.config.request_timeout(),
        );
        if let Err(err) = sought
            && still_assigned(consumer, input, partition)
        {
            task.begin_call();
            return Err(convert("seeking back to a rewound task's last commit", err));
        }
    }
    tracing::info!(task = %task.id, next = ?task.next_offsets(), ?skip, "task rewound to its last commit");
    Ok(())
}
