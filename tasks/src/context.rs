//! [`ProcessorContext`]: one input record and its task, handed to the processor.

use rdkafka::message::{BorrowedMessage, Message};
use statestore_changelog::TaskId;
use store_api::{Error, Result};

use crate::group::Shared;
use crate::outputs::Output;
use crate::store::TaskStore;
use crate::task::Task;

/// One input record and the task it belongs to, handed to the processor.
pub struct ProcessorContext<'a> {
    task: &'a Task,
    message: &'a BorrowedMessage<'a>,
    /// The index of the record's topic among the input topics.
    topic: usize,
    offset: u64,
    partition: u32,
    outputs: &'a mut Vec<Output>,
}

impl ProcessorContext<'_> {
    /// The task: `0_<partition>`.
    pub fn task_id(&self) -> TaskId {
        TaskId::new(0, self.partition)
    }

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
        self.message.timestamp().to_millis()
    }

    /// The record's key.
    pub fn key(&self) -> Option<&[u8]> {
        self.message.key()
    }

    /// The record's value.
    pub fn value(&self) -> Option<&[u8]> {
        self.message.payload()
    }

    /// The task's store `name`.
    ///
    /// # Errors
    /// `InvalidArgument` for a store that is not configured.
    pub fn store(&self, name: &str) -> Result<TaskStore<'_>> {
        let slot = self
            .task
            .slots
            .iter()
            .find(|slot| slot.name == name)
            .ok_or_else(|| Error::invalid(format!("no store named {name:?} is configured")))?;
        Ok(TaskStore {
            store: &slot.store,
            replayed: self.offset < slot.position[self.topic],
        })
    }

    /// Sends a record to `topic` once the processor returns. Outputs are at least once: they
    /// are flushed before each commit, which fails if one was not acknowledged (see
    /// [`ProductionErrorPolicy`](crate::ProductionErrorPolicy)), and a record processed again
    /// after a crash sends its outputs again.
    pub fn send(&mut self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.outputs.push(Output {
            topic: topic.to_owned(),
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
        });
    }
}

/// Hands `message` to `process` with its task, unless the task already processed it. Returns
/// whether it was processed, and whether a store of its task needs a commit now.
pub(crate) fn process_message<F>(
    shared: &Shared,
    message: &BorrowedMessage<'_>,
    outputs: &mut Vec<Output>,
    process: &mut F,
) -> Result<(bool, bool)>
where
    F: FnMut(&mut ProcessorContext<'_>) -> Result<()>,
{
    let (Ok(partition), Ok(offset), Some(topic)) = (
        u32::try_from(message.partition()),
        u64::try_from(message.offset()),
        shared.topic_index(message.topic()),
    ) else {
        return Ok((false, false));
    };
    let mut tasks = shared.tasks.lock();
    let Some(task) = tasks.get_mut(&partition) else {
        // A record fetched before its partition was revoked.
        return Ok((false, false));
    };
    if task.next_offset[topic].is_some_and(|next| offset < next) {
        return Ok((false, false));
    }
    let mut context = ProcessorContext {
        task,
        message,
        topic,
        offset,
        partition,
        outputs,
    };
    if let Err(err) = process(&mut context) {
        task.poisoned = true;
        return Err(err);
    }
    task.next_offset[topic] = Some(offset + 1);
    task.metrics.records.increment(1);
    Ok((true, task.needs_commit()))
}
