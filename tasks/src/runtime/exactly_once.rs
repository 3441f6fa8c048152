//! `exactly_once_v2`: every commit is one Kafka transaction of the instance's transactional
//! producer, holding the outputs sent since the last commit, the changelog records of every
//! task due, and the tasks' input positions as the group's offsets.
//!
//! # One producer per instance
//! Kafka Streams' EOS-v2 gives each stream thread one transactional producer, because each
//! thread has its own consumer and commits its own tasks. Here the instance is one consumer,
//! and its `stream_threads` threads process tasks between commits that the polling thread
//! makes for every task at once: one transaction per commit, so one producer per instance,
//! is the same guarantee. Its `transactional.id` is `<application_id>-<process id>-0`, the
//! process id being `group_instance_id` when set, else an id created once and kept in the
//! state directory (Kafka Streams' process id): a restart (after a `kill -9`) fences its
//! previous incarnation and aborts its open transaction at its first transaction.
//!
//! # A commit
//! 1. the outputs not handed over yet go to the producer, in the transaction;
//! 2. every task due prepares: its stores append their buffered writes, with the task's
//!    position, framed as a commit, in the transaction
//!    ([`LoggedStore::prepare_commit`](statestore_changelog::LoggedStore::prepare_commit)),
//!    the tasks in parallel;
//! 3. the positions are added as the group's offsets (`sendOffsetsToTransaction`, with the
//!    consumer's group metadata, so a member of an older generation is refused) and the
//!    transaction commits;
//! 4. only then does each task write its stores and checkpoint.
//!
//! A failure anywhere in a commit or of the producer aborts the transaction: every task is
//! closed without committing and opened again, from its local files (which hold its last
//! committed state: nothing of the aborted transaction reached them) and the records that
//! committed transactions added to its changelogs. Nothing is wiped.
//!
//! A failing record does not abort it: its call is rolled back alone (its store writes and its
//! outputs never reach the producer), so a skip or a dead letter goes in the same transaction
//! as the records around it. Only a failure answered by going back to the task's last commit
//! ([`abort_after_rewind`]: `replace_thread`, or a call that could not be rolled back) aborts
//! it, counted in [`FAILURE_ABORTS_TOTAL`](crate::metrics::FAILURE_ABORTS_TOTAL).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use statestore_changelog::kafka_util::unique_number;
use statestore_changelog::{StateDirectory, TaskId};
use store_api::{Error, ErrorKind, Result};

use crate::TaskEventKind;
use crate::config::TasksConfig;
use crate::group::topics::convert;
use crate::runtime::parallel::commit_in_parallel;
use crate::runtime::shared::{GroupContext, Shared, partition_id};

/// The file in the application's state directory that keeps the process id.
const PROCESS_ID_FILE: &str = "process-id";

/// The `transactional.id` of the instance: `<application_id>-<process id>-0`.
///
/// # Errors
/// `Io` reading or creating the process id file; `Corruption` for a file that does not hold
/// one.
pub(crate) fn transactional_id(config: &TasksConfig, state: &StateDirectory) -> Result<String> {
    let process = match &config.group_instance_id {
        Some(id) => id.clone(),
        None => process_id(state)?,
    };
    Ok(format!("{}-{process}-0", config.application_id))
}

/// The id kept in the state directory, created at the first call: 32 hex digits.
fn process_id(state: &StateDirectory) -> Result<String> {
    let path = state.path().join(PROCESS_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Ok(id.to_owned());
            }
            Err(Error::Corruption(format!(
                "{} does not hold a process id (32 hex digits): {id:?}",
                path.display()
            )))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let id = format!("{:016x}{:016x}", unique_number(), unique_number());
            let tmp = path.with_extension("tmp");
            let io = |err| Error::io(format!("writing {}", path.display()), err);
            std::fs::write(&tmp, &id).map_err(io)?;
            std::fs::File::open(&tmp)
                .and_then(|file| file.sync_all())
                .map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            Ok(id)
        }
        Err(err) => Err(Error::io(format!("reading {}", path.display()), err)),
    }
}

/// How long an abort waits for the reports of the outputs it purged.
const ABORT_SETTLE: Duration = Duration::from_secs(5);

/// Aborts the open transaction, if any, and forgets its outputs.
///
/// # Errors
/// `Fenced` when the producer was fenced: this member may no longer own its tasks, which
/// must be dropped, never opened again here (see [`lose_all_and_rejoin`]).
/// `InvalidArgument` when the transactional producer had failed for good (a fatal error of
/// the brokers, named with its API): for the error policy, not for a revival.
pub(crate) fn abort(shared: &Shared) -> Result<()> {
    let aborted = shared.clients.abort_transaction();
    shared.outputs.lock().forget_aborted(ABORT_SETTLE);
    aborted
}

/// Commits every task due in one transaction (see the module docs). Returns the tasks
/// whose stores failed to apply the committed transaction: they must be opened again.
///
/// # Errors
/// The transaction is aborted before the error returns; every task must then be closed
/// without committing and opened again (see [`Shared::revives`]).
pub(crate) fn commit_transaction(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Shared,
) -> Result<Vec<TaskId>> {
    let result = prepare_and_commit(consumer, shared);
    if let Err(err) = result {
        // A record or a request of the transaction failed: a fence or a fatal error behind
        // it (a record refused because the producer was fenced or failed for good) is the
        // cause to answer, not the record's failure: a revival would open the tasks again
        // and fence the changelogs of their new owners, or meet the same failure.
        return Err(abort(shared).err().unwrap_or(err));
    }
    result
}

fn prepare_and_commit(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Shared,
) -> Result<Vec<TaskId>> {
    shared.send_outputs()?;
    let mut tasks = shared.tasks.lock();
    if let Some(task) = tasks.values().find(|task| task.is_poisoned()) {
        // Its outputs since its last commit are in the transaction, its position is not.
        return Err(Error::backend(
            "kafka",
            format!(
                "task {} failed in the middle of a record: the transaction holding its outputs \
                 is aborted",
                task.id
            ),
        ));
    }
    let due = tasks
        .iter_mut()
        .filter(|(_, task)| task.commit_due())
        .map(|(&id, task)| (id, task))
        .collect();
    let mut offsets = TopicPartitionList::new();
    let mut prepared = Vec::new();
    for (id, result) in commit_in_parallel(due, |task| task.prepare()) {
        for (topic, partition, offset) in shared.group_offsets_of(id, &result?) {
            let offset = i64::try_from(offset)
                .map_err(|_| Error::invalid(format!("offset {offset} is beyond kafka's range")))?;
            offsets
                .add_partition_offset(topic, partition_id(partition), Offset::Offset(offset))
                .map_err(|err| convert("adding offsets to the transaction", err))?;
        }
        prepared.push(id);
    }
    // Counted among the commits that prepared a task, so a test can aim at one.
    fail::fail_point!("transaction-before-commit", !prepared.is_empty(), |_| Err(
        Error::Timeout("a transaction abort was injected before its commit".to_owned())
    ));
    let group = consumer
        .group_metadata()
        .ok_or_else(|| Error::invalid("the group consumer has no group metadata"))?;
    shared.clients.commit_transaction(&offsets, &group)?;
    let mut failed = Vec::new();
    let mut fenced = false;
    for id in prepared {
        let Some(task) = tasks.get_mut(&id) else {
            continue;
        };
        match task.apply() {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::Fenced => {
                tracing::warn!(task = %task.id, %err, "task fenced by a newer owner: dropped as lost");
                if let Some(task) = tasks.remove(&id) {
                    task.abandon();
                    shared.event(id, TaskEventKind::Fenced);
                }
                fenced = true;
            }
            Err(err) => {
                tracing::warn!(task = %task.id, %err, "applying a committed transaction failed");
                failed.push(id);
            }
        }
    }
    if fenced {
        // As under at-least-once (see `commit_tasks`): the group says who owns the task now.
        drop(tasks);
        rejoin(consumer, shared);
    }
    Ok(failed)
}

/// Answers a transaction the brokers fenced (a newer producer of the transactional id, or a
/// newer generation of the group: this member's tasks may be another's now), as Kafka
/// Streams answers `TaskMigratedException`: every task is closed without committing and
/// not opened again here (which would fence the changelogs of their new owners), and the
/// consumer rejoins the group, which assigns tasks anew.
pub(crate) fn lose_all_and_rejoin(consumer: &BaseConsumer<GroupContext>, shared: &Shared) {
    let tasks = std::mem::take(&mut *shared.tasks.lock());
    for (id, mut task) in tasks {
        // Should the group give the task back to this member, it is not asked again either.
        shared.keep_skips(&mut task);
        task.abandon();
        shared.event(id, TaskEventKind::Lost);
    }
    match abort(shared) {
        // The fence is what is being answered.
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::Fenced => {}
        Err(err) => shared.fail(err),
    }
    rejoin(consumer, shared);
}

/// Leaves the group and joins it again, so that the group decides afresh which tasks this
/// member owns: what a member does once it learns it may no longer own a task (Kafka Streams'
/// answer to a `TaskMigratedException`). A task the group still gives it opens again.
pub(crate) fn rejoin(consumer: &BaseConsumer<GroupContext>, shared: &Shared) {
    consumer.unsubscribe();
    let topics: Vec<&str> = shared.inputs.iter().map(String::as_str).collect();
    if let Err(err) = consumer.subscribe(&topics) {
        shared.fail(convert("subscribing again after a fence", err));
    }
}

impl Shared {
    /// Whether `err`, from a commit or the outputs, is answered by closing every task without
    /// committing and opening it again, the instance going on: a timeout; and under
    /// exactly-once, an aborted transaction too.
    pub(crate) fn revives(&self, err: &Error) -> bool {
        match err.kind() {
            ErrorKind::Timeout => true,
            ErrorKind::Backend => self.config.exactly_once(),
            _ => false,
        }
    }

    /// Whether `err`, from a commit under exactly-once, means that this member may no longer
    /// own its tasks (see [`lose_all_and_rejoin`]).
    pub(crate) fn migrated(&self, err: &Error) -> bool {
        self.config.exactly_once() && err.kind() == ErrorKind::Fenced
    }

    /// What a revocation or a close does before it closes tasks: waits for the outputs
    /// under at-least-once; commits every task's transaction under exactly-once (so the
    /// tasks closed after have nothing left to commit).
    ///
    /// # Errors
    /// As [`flush_outputs`](Shared::flush_outputs), or [`commit_transaction`]; a task
    /// whose stores failed to apply the transaction is reported as a `Timeout`: it must be
    /// opened again, not closed as committed.
    pub(crate) fn commit_before_close(&self, consumer: &BaseConsumer<GroupContext>) -> Result<()> {
        if !self.config.exactly_once() {
            return self.flush_outputs();
        }
        let failed = commit_transaction(consumer, self)?;
        if failed.is_empty() {
            return Ok(());
        }
        Err(Error::Timeout(format!(
            "tasks {failed:?} failed to apply a committed transaction"
        )))
    }
}

/// Under exactly-once, after the processor of task `id` failed and the task was
/// taken back to its last commit: the open transaction holds what the task sent since, so
/// it is aborted, and every other task, whose work since its last commit it held too, is
/// closed without committing and opened again. Does nothing under at-least-once.
pub(crate) fn abort_after_rewind(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Arc<Shared>,
    id: TaskId,
) {
    if !shared.config.exactly_once() {
        return;
    }
    match abort(shared) {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::Fenced => {
            tracing::warn!(%err, "transaction fenced: every task is dropped, the group rejoined");
            lose_all_and_rejoin(consumer, shared);
            return;
        }
        Err(err) => shared.fail(err),
    }
    let others: Vec<TaskId> = shared
        .tasks
        .lock()
        .keys()
        .copied()
        .filter(|&other| other != id)
        .collect();
    shared.revive(consumer, &others);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restart finds the same transactional id, so its first transaction fences the previous
    /// incarnation's; a static member's comes from its instance id.
    #[test]
    fn the_transactional_id_is_stable_across_restarts() {
        let dir = tempfile::tempdir().expect("dir");
        let config = TasksConfig {
            application_id: "app".into(),
            state_dir: dir.path().to_owned(),
            ..TasksConfig::default()
        };
        let first = {
            let state = StateDirectory::open(dir.path(), "app").expect("state");
            transactional_id(&config, &state).expect("id")
        };
        let state = StateDirectory::open(dir.path(), "app").expect("state again");
        assert_eq!(transactional_id(&config, &state).expect("id"), first);
        assert!(
            first.starts_with("app-") && first.ends_with("-0"),
            "{first}"
        );
        assert_eq!(first.len(), "app-".len() + 32 + "-0".len(), "{first}");
        let other = tempfile::tempdir().expect("dir");
        let elsewhere = StateDirectory::open(other.path(), "app").expect("state");
        assert_ne!(transactional_id(&config, &elsewhere).expect("id"), first);
        let fixed = TasksConfig {
            group_instance_id: Some("host-1".into()),
            ..config
        };
        assert_eq!(
            transactional_id(&fixed, &state).expect("id"),
            "app-host-1-0"
        );
        std::fs::write(dir.path().join("app").join(PROCESS_ID_FILE), "not hex").expect("write");
        let err = transactional_id(&TasksConfig::default(), &state).expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    }
}
