//! Calls of user code on a task's behalf: a record, `init`, the punctuators. Each call runs
//! behind `catch_unwind` (see the `handlers` module): a call that fails or panics leaves its
//! task poisoned (never committed until the failure is answered) and drops the outputs it
//! sent. A failed `process` or `punctuate` is rolled back at once: every logged store of
//! the task drops the writes of that call alone ([`Task::roll_back_call`]), so that the
//! handler's `Continue` or `DeadLetter` lets the task go on from there, without going back to
//! its last commit.

use rdkafka::message::{BorrowedMessage, Message};
use statestore_changelog::TaskId;
use store_api::Error;

use crate::processor::{Processor, ProcessorContext, TaskContext};
use crate::record::InputRecord;
use crate::runtime::handlers::{FailedRecord, Failure, FailureStage, guarded};
use crate::runtime::outputs::Output;
use crate::runtime::shared::Shared;
use crate::state::punctuation::{Punctuation, PunctuationType, wall_clock_ms};
use crate::state::task::Task;
use crate::state::upstream::{UPSTREAM_HEADER, Upstream, decode_upstream};

/// The task, its input topic index and the offset of `message`, when it is a record of an
/// input topic.
pub(crate) fn locate(
    shared: &Shared,
    message: &BorrowedMessage<'_>,
) -> Option<(TaskId, usize, u64)> {
    let partition = u32::try_from(message.partition()).ok()?;
    let (id, topic) = shared.locate_topic(Message::topic(message), partition)?;
    Some((id, topic, u64::try_from(message.offset()).ok()?))
}

/// What a call of user code ends with: `Err` is a failure, for the error handler.
pub(crate) type Called<T> = std::result::Result<T, Box<Failure>>;

/// A failure of `task`'s processor at `stage`.
fn failure(
    task: &Task,
    stage: FailureStage,
    record: Option<(FailedRecord, usize)>,
    (error, panicked): (Error, bool),
) -> Box<Failure> {
    let (record, topic_index) = match record {
        Some((record, topic)) => (Some(record), Some(topic)),
        None => (None, None),
    };
    Box::new(Failure {
        task: task.id,
        stage,
        record,
        error,
        panicked,
        topic_index,
    })
}

/// Hands `message` to `processor` with its task, unless the task already processed it, then
/// calls the task's stream-time punctuators that came due. Returns whether it was processed,
/// and whether a store of its task needs a commit now.
pub(crate) fn process_message<P: Processor + ?Sized>(
    shared: &Shared,
    message: &BorrowedMessage<'_>,
    outputs: &mut Vec<Output>,
    processor: &mut P,
) -> Called<(bool, bool)> {
    let Some((id, topic, offset)) = locate(shared, message) else {
        return Ok((false, false));
    };
    let partition = id.partition;
    let mut tasks = shared.tasks.lock();
    let Some(task) = tasks.get_mut(&id) else {
        // A record fetched before its partition was revoked.
        return Ok((false, false));
    };
    process_record(
        task,
        (partition, topic, offset),
        message,
        outputs,
        processor,
    )
}

/// [`process_message`] for a record of `task` found at `(partition, topic, offset)`. A call
/// of the processor that fails or panics leaves the task poisoned and rolled back to where
/// the call began, and drops the outputs it sent; a poisoned task processes nothing until the
/// failure is answered. A record the error handler said to skip is passed over, its dead
/// letter (if any) sent as it is.
pub(crate) fn process_record<P: Processor + ?Sized>(
    task: &mut Task,
    (partition, topic, offset): (u32, usize, u64),
    message: &dyn InputRecord,
    outputs: &mut Vec<Output>,
    processor: &mut P,
) -> Called<(bool, bool)> {
    if task.is_poisoned() || task.is_behind(topic, offset) {
        return Ok((false, false));
    }
    init_task(task, outputs, processor)?;
    if let Some(letter) = task.skips(topic, offset).cloned() {
        // The letter goes with the pass: in the transaction (or before the commit) that moves
        // the position past the record.
        outputs.extend(letter.clone());
        task.pass(topic, offset);
        return Ok((false, task.needs_commit()));
    }
    let upstream = upstream_of(task, topic, message);
    if let Some(upstream) = &upstream
        && task.applied_upstream(upstream)
    {
        // Sent again by an upstream task replaying its input: applied already.
        task.metrics.duplicates_dropped.increment(1);
        task.pass(topic, offset);
        return Ok((false, task.needs_commit()));
    }
    task.replay_record(topic, offset);
    let sent = outputs.len();
    task.begin_call();
    if let Some(timestamp) = message.timestamp() {
        task.advance_stream_time(timestamp);
    }
    let mut context =
        ProcessorContext::new(TaskContext::new(task, outputs), message, offset, partition);
    let called = guarded(|| processor.process(&mut context));
    let undecodable = context.undecodable();
    if let Err(failed) = called {
        outputs.truncate(sent);
        roll_back(task);
        let stage = if undecodable {
            FailureStage::Deserialization
        } else {
            FailureStage::Processing
        };
        let record = FailedRecord::of(message, partition, offset);
        return Err(failure(task, stage, Some((record, topic)), failed));
    }
    task.finish_call();
    if let Some(upstream) = &upstream {
        task.apply_upstream(upstream);
    }
    task.pass(topic, offset);
    task.metrics.records.increment(1);
    if let Some(now) = task.stream_time() {
        punctuate(task, outputs, processor, PunctuationType::StreamTime, now)?;
    }
    Ok((true, task.needs_commit()))
}

/// The upstream a record of `task`'s input `topic` names in its header, when the task checks
/// them (repartition topics under `at_least_once`, see the `upstream` module).
fn upstream_of<'m>(
    task: &Task,
    topic: usize,
    message: &'m (dyn InputRecord + '_),
) -> Option<Upstream<'m>> {
    if !task.dedups(topic) {
        return None;
    }
    let (_, value) = (0..message.header_count())
        .filter_map(|index| message.header(index))
        .find(|(name, _)| *name == UPSTREAM_HEADER)?;
    decode_upstream(value?)
}

/// Rolls back the failed call of `task`'s processor ([`Task::roll_back_call`]). A task that
/// cannot roll back stays poisoned: the failure's answer then rewinds it.
fn roll_back(task: &mut Task) {
    if let Err(err) = task.roll_back_call() {
        tracing::warn!(task = %task.id, %err, "a failed call cannot be rolled back alone");
    }
}

/// Calls `processor.init` for a task that has not started processing here yet (or whose
/// `init` failed).
pub(crate) fn init_task<P: Processor + ?Sized>(
    task: &mut Task,
    outputs: &mut Vec<Output>,
    processor: &mut P,
) -> Called<()> {
    if task.is_initialized() {
        return Ok(());
    }
    task.replay_between_records();
    let sent = outputs.len();
    task.begin_call();
    let called = guarded(|| processor.init(&mut TaskContext::new(task, outputs)));
    if let Err(failed) = called {
        outputs.truncate(sent);
        return Err(failure(task, FailureStage::Initialization, None, failed));
    }
    task.finish_call();
    task.mark_initialized();
    Ok(())
}

/// Calls every punctuator of `kind` of `task` due at `time`.
pub(crate) fn punctuate<P: Processor + ?Sized>(
    task: &mut Task,
    outputs: &mut Vec<Output>,
    processor: &mut P,
    kind: PunctuationType,
    time: i64,
) -> Called<()> {
    if !task.punctuators.borrow().any(kind) {
        return Ok(());
    }
    task.replay_between_records();
    loop {
        let due = task.punctuators.borrow_mut().take_due(kind, time);
        let Some((id, name)) = due else {
            return Ok(());
        };
        let punctuation = Punctuation {
            id,
            name: &name,
            kind,
            time,
        };
        let started = std::time::Instant::now();
        let sent = outputs.len();
        task.begin_call();
        let called =
            guarded(|| processor.punctuate(&mut TaskContext::new(task, outputs), &punctuation));
        task.metrics
            .punctuate_seconds
            .record(started.elapsed().as_secs_f64());
        task.mark_punctuated();
        if let Err(failed) = called {
            outputs.truncate(sent);
            roll_back(task);
            return Err(failure(task, FailureStage::Punctuation, None, failed));
        }
        task.finish_call();
    }
}

/// Initialises the tasks that have not started and calls the wall-clock punctuators that came
/// due, for every task of the instance.
pub(crate) fn punctuate_wall_clock<P: Processor + ?Sized>(
    shared: &Shared,
    outputs: &mut Vec<Output>,
    processor: &mut P,
) -> Called<()> {
    let now = wall_clock_ms();
    let mut tasks = shared.tasks.lock();
    for task in tasks.values_mut() {
        punctuate_task_wall_clock(task, outputs, processor, now)?;
    }
    Ok(())
}

/// Initialises `task` if it has not started and calls its wall-clock punctuators due at `now`;
/// nothing for a task whose processor failed.
pub(crate) fn punctuate_task_wall_clock<P: Processor + ?Sized>(
    task: &mut Task,
    outputs: &mut Vec<Output>,
    processor: &mut P,
    now: i64,
) -> Called<()> {
    if task.is_poisoned() {
        return Ok(());
    }
    init_task(task, outputs, processor)?;
    punctuate(
        task,
        outputs,
        processor,
        PunctuationType::WallClockTime,
        now,
    )
}
