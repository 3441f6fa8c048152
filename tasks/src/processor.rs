//! What user code sees: [`TaskContext`] (a task's stores, outputs, stream time and
//! punctuators) and [`ProcessorContext`] (one input record and its task), and the
//! [`Processor`] the application drives.

use std::cell::{Cell, RefCell};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use statestore_changelog::TaskId;
use statestore_operator_stores::{KeyCodec, TtlClock, ValueCodec};
use store_api::{Error, Result};

use crate::record::InputRecord;
use crate::runtime::outputs::{Output, OutputRecord};
use crate::state::kv::TaskStore;
use crate::state::punctuation::{Punctuation, PunctuationType, PunctuatorId};
use crate::state::stores::{StoreHandle, StoreType, StoreView};
use crate::state::task::Task;

/// The processing of a partitioned application: called on the application's thread for every
/// input record, and for the punctuators it schedules. One processor serves every task of the
/// instance; the context says which task a call is for.
///
/// A closure `FnMut(&mut ProcessorContext) -> Result<()>` is a processor without punctuation.
pub trait Processor {
    /// Called once when a task starts processing here (assigned and restored), before its
    /// first record: the place to [`schedule`](TaskContext::schedule) its punctuators.
    ///
    /// # Errors
    /// An error (or a panic) goes to the
    /// [`uncaught_error`](crate::TasksConfig::uncaught_error) policy; nothing `init` wrote
    /// is committed.
    fn init(&mut self, ctx: &mut TaskContext<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Processes one input record.
    ///
    /// # Errors
    /// An error (or a panic) fails the record: nothing this call wrote is committed and its
    /// outputs are dropped; the error handler then fails the task, skips the record or sends
    /// it to the dead-letter topic (see the [`handlers`](crate::handlers) module).
    fn process(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()>;

    /// Called for each due punctuator of the task.
    ///
    /// # Errors
    /// As [`process`](Processor::process).
    fn punctuate(
        &mut self,
        ctx: &mut TaskContext<'_>,
        punctuation: &Punctuation<'_>,
    ) -> Result<()> {
        let _ = (ctx, punctuation);
        Ok(())
    }
}

impl<F> Processor for F
where
    F: FnMut(&mut ProcessorContext<'_>) -> Result<()>,
{
    fn process(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        self(ctx)
    }
}

/// One task as its processor sees it, in a call of the processor: its stores, its outputs,
/// its stream time and its punctuators.
pub struct TaskContext<'a> {
    task: &'a Task,
    outputs: RefCell<&'a mut Vec<Output>>,
}

impl<'a> TaskContext<'a> {
    pub(crate) fn new(task: &'a Task, outputs: &'a mut Vec<Output>) -> Self {
        TaskContext {
            task,
            outputs: RefCell::new(outputs),
        }
    }

    /// The task: `<subtopology>_<partition>` (`0_<partition>` without a topology).
    pub fn task_id(&self) -> TaskId {
        self.task.id
    }

    /// The task's stream time: the largest record timestamp it processed, committed with its
    /// stores (so it survives a restart or a move); `None` before its first timestamped record.
    pub fn stream_time(&self) -> Option<i64> {
        self.task.stream_time()
    }

    /// The store `handle` refers to, as its type. A TTL store on stream time is first moved
    /// up to the task's [stream time](Self::stream_time), so its entries expire by the
    /// timestamps of the records the task processed, this one included.
    ///
    /// # Errors
    /// `InvalidArgument` for a handle made from another configuration; the store's errors
    /// when moving a TTL store's stream time writes it.
    pub fn store_of<T: StoreType + ?Sized>(&self, handle: &StoreHandle<T>) -> Result<T::View<'_>> {
        store_of(self.task, handle)
    }

    /// The task's key-value store `name`, looked up by name (a [`StoreHandle`] avoids the
    /// lookup).
    ///
    /// # Errors
    /// `InvalidArgument` for a store that is not configured or not a key-value store.
    pub fn store(&self, name: &str) -> Result<TaskStore<'_>> {
        store_named(self.task, name)
    }

    /// Sends a record to `topic` once the processor returns. Under `at_least_once` outputs
    /// are at least once: they are flushed before each commit, which fails if one was not
    /// acknowledged (see [`ProductionErrorPolicy`](crate::ProductionErrorPolicy)), and a
    /// record processed again after a crash sends its outputs again. Under
    /// `exactly_once_v2` they go in the commit's transaction: a `read_committed` reader sees
    /// each once (see [`ProcessingGuarantee`](crate::ProcessingGuarantee)).
    ///
    /// A keyed record goes to the partition of its key (see [`OutputRecord`]);
    /// [`send_record`](TaskContext::send_record) also sets headers, a partition or a
    /// timestamp.
    pub fn send(&self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) {
        let mut outputs = self.outputs.borrow_mut();
        let topic = match outputs.last() {
            Some(last) if last.topic() == topic => last.shared_topic(),
            _ => Arc::from(topic),
        };
        let mut record = OutputRecord::to_shared(topic);
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = value {
            record = record.value(value);
        }
        outputs.push(record);
    }

    /// Sends `record` once the processor returns, as [`send`](TaskContext::send) does.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative timestamp. A partition the topic does not have is
    /// found when the record reaches the producer and fails it as the brokers' refusal would
    /// (see [`ProductionErrorPolicy`](crate::ProductionErrorPolicy)).
    pub fn send_record(&self, record: OutputRecord) -> Result<()> {
        record.validate()?;
        self.outputs.borrow_mut().push(record);
        Ok(())
    }

    /// Schedules punctuator `name` on this task every `interval` (see the `punctuation`
    /// module's docs for when each type fires).
    ///
    /// # Errors
    /// `InvalidArgument` for an interval under one millisecond.
    pub fn schedule(
        &self,
        name: &str,
        interval: Duration,
        kind: PunctuationType,
    ) -> Result<PunctuatorId> {
        self.task
            .punctuators
            .borrow_mut()
            .schedule(name, interval, kind)
    }

    /// Cancels punctuator `id` of this task; returns whether it was scheduled.
    pub fn cancel(&self, id: PunctuatorId) -> bool {
        self.task.punctuators.borrow_mut().cancel(id)
    }
}

/// What a topology's processors reach of the task they run in: a narrow view of a
/// [`TaskContext`], whose lifetime it hides.
pub(crate) trait Host {
    /// The task.
    fn task(&self) -> &Task;

    /// Queues `record` to be sent once the call returns.
    fn send(&self, record: OutputRecord);
}

impl Host for TaskContext<'_> {
    fn task(&self) -> &Task {
        self.task
    }

    fn send(&self, record: OutputRecord) {
        self.outputs.borrow_mut().push(record);
    }
}

/// The store `handle` refers to in `task`, as its type (see [`TaskContext::store_of`]).
pub(crate) fn store_of<'t, T: StoreType + ?Sized>(
    task: &'t Task,
    handle: &StoreHandle<T>,
) -> Result<T::View<'t>> {
    let slot = task.slot_of(handle.index, handle.name());
    if let Some(slot) = slot
        && let StoreView::Ttl(ttl) = &slot.open.view
        && ttl.config().clock == TtlClock::StreamTime
        && let Some(now) = task.stream_time()
    {
        ttl.advance_stream_time(now)?;
    }
    slot.and_then(|slot| T::view(&slot.open)).ok_or_else(|| {
        Error::invalid(format!(
            "store handle {:?} was not made from this application's configuration",
            handle.name()
        ))
    })
}

/// The key-value store `name` of `task` (see [`TaskContext::store`]).
pub(crate) fn store_named<'t>(task: &'t Task, name: &str) -> Result<TaskStore<'t>> {
    let slot = task
        .slots
        .iter()
        .find(|slot| slot.name == name)
        .ok_or_else(|| Error::invalid(format!("no store named {name:?} is configured")))?;
    match slot.open.view {
        StoreView::KeyValue => Ok(TaskStore { kv: &slot.open.kv }),
        _ => Err(Error::invalid(format!(
            "store {name:?} is not a key-value store: reach it through a StoreHandle"
        ))),
    }
}

/// One input record and the task it belongs to, handed to the processor. It dereferences to
/// the task's [`TaskContext`].
pub struct ProcessorContext<'a> {
    task: TaskContext<'a>,
    message: &'a dyn InputRecord,
    offset: u64,
    partition: u32,
    /// [`key_as`](ProcessorContext::key_as) or [`value_as`](ProcessorContext::value_as)
    /// failed: an error the call returns is a deserialization failure.
    undecodable: Cell<bool>,
}

impl<'a> ProcessorContext<'a> {
    /// The context of `message`, a record at `offset` of `partition`, for `task`'s processor.
    pub(crate) fn new(
        task: TaskContext<'a>,
        message: &'a dyn InputRecord,
        offset: u64,
        partition: u32,
    ) -> Self {
        ProcessorContext {
            task,
            message,
            offset,
            partition,
            undecodable: Cell::new(false),
        }
    }

    /// Whether [`key_as`](ProcessorContext::key_as) or
    /// [`value_as`](ProcessorContext::value_as) failed in this call.
    pub(crate) fn undecodable(&self) -> bool {
        self.undecodable.get()
    }
}

impl<'a> Deref for ProcessorContext<'a> {
    type Target = TaskContext<'a>;

    fn deref(&self) -> &TaskContext<'a> {
        &self.task
    }
}

impl ProcessorContext<'_> {
    /// The input topic the record comes from.
    pub fn topic(&self) -> &str {
        self.message.topic()
    }

    /// The input partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The record's offset in its topic's partition.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The record's timestamp in milliseconds since the epoch, when it has one.
    pub fn timestamp(&self) -> Option<i64> {
        self.message.timestamp()
    }

    /// The record's key.
    pub fn key(&self) -> Option<&[u8]> {
        self.message.key()
    }

    /// The record's value.
    pub fn value(&self) -> Option<&[u8]> {
        self.message.value()
    }

    /// The record's key decoded with codec `C` (`None` for a record without a key). An error
    /// from it that the processor returns is a deserialization failure, which
    /// [`deserialization_error`](crate::TasksConfig::deserialization_error) handles.
    ///
    /// # Errors
    /// The codec's error for a key it cannot decode.
    pub fn key_as<K, C: KeyCodec<K>>(&self) -> Result<Option<K>> {
        self.decoded(self.key().map(C::decode_key).transpose())
    }

    /// The record's value decoded with codec `C` (such as
    /// [`Json`](statestore_operator_stores::Json)), as [`key_as`](ProcessorContext::key_as).
    ///
    /// # Errors
    /// The codec's error for a value it cannot decode.
    pub fn value_as<V, C: ValueCodec<V>>(&self) -> Result<Option<V>> {
        self.decoded(self.value().map(C::decode_value).transpose())
    }

    fn decoded<T>(&self, decoded: Result<T>) -> Result<T> {
        if decoded.is_err() {
            self.undecodable.set(true);
        }
        decoded
    }

    /// The record's headers, in order: each one's name and value (`None` for a null value).
    /// A name may repeat.
    ///
    /// rdkafka panics on a header name that is not UTF-8 (which Kafka's Java clients never
    /// write).
    pub fn headers(&self) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
        (0..self.message.header_count()).filter_map(|index| self.message.header(index))
    }

    /// The value of the record's last header named `name`, as Kafka's `lastHeader`; `None`
    /// when it has none or its value is null ([`headers`](ProcessorContext::headers) tells
    /// the two apart).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .filter(|(key, _)| *key == name)
            .last()
            .and_then(|(_, value)| value)
    }
}
