//! Commits: every task's stores with its position, the tasks in parallel, then the group
//! offsets; and what a timeout of the outputs or of a commit leads to (the tasks concerned
//! go back to their last commit, the instance goes on).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rdkafka::consumer::BaseConsumer;
use statestore_changelog::TaskId;
use store_api::{Error, ErrorKind, Result};

use crate::TaskEventKind;
use crate::runtime::coordinator::commit_group;
use crate::runtime::exactly_once::{abort, commit_transaction, lose_all_and_rejoin, rejoin};
use crate::runtime::parallel::commit_in_parallel;
use crate::runtime::shared::{GroupContext, Shared};

/// Answers an error of the outputs: a timeout (brokers slower than the produce timeout, or
/// away, or a producer queue that stayed full) closes every task without committing and opens
/// it again from its last commit, so that every record whose output may be lost is processed
/// again; the instance goes on. Any other error is returned.
///
/// # Errors
/// `err`, unless it is a `Timeout`; under exactly-once, the error of a transactional
/// producer that failed for good (see [`abort`]).
pub(crate) fn revive_on_timeout(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Arc<Shared>,
    err: Error,
) -> Result<()> {
    if err.kind() != ErrorKind::Timeout {
        // A record refused because the transactional producer was fenced is a fence, which
        // the abort tells: the tasks are dropped, not failed.
        if shared.config.exactly_once()
            && let Err(abort_err) = abort(shared)
            && shared.migrated(&abort_err)
        {
            tracing::warn!(%err, "outputs fenced: every task is dropped, the group rejoined");
            lose_all_and_rejoin(consumer, shared);
            return Ok(());
        }
        return Err(err);
    }
    tracing::warn!(%err, "outputs timed out: every task goes back to its last commit");
    let ids: Vec<TaskId> = shared.tasks.lock().keys().copied().collect();
    if shared.config.exactly_once() {
        // The open transaction holds every task's work since its last commit.
        match abort(shared) {
            Ok(()) => {}
            Err(err) if shared.migrated(&err) => {
                tracing::warn!(%err, "transaction fenced: every task is dropped, the group rejoined");
                lose_all_and_rejoin(consumer, shared);
                return Ok(());
            }
            Err(err) => return Err(err),
        }
    } else {
        shared.outputs.lock().forget_failures();
    }
    shared.revive(consumer, &ids);
    Ok(())
}

/// Revives every task when a rebalance callback found outputs lost (see
/// [`revive_on_timeout`]), after dropping them all when it found a transaction fenced (see
/// [`lose_all_and_rejoin`]).
pub(crate) fn revive_if_outputs_lost(consumer: &BaseConsumer<GroupContext>, shared: &Arc<Shared>) {
    if shared.migrated.swap(false, Ordering::Relaxed) {
        lose_all_and_rejoin(consumer, shared);
    }
    if shared.outputs_lost.swap(false, Ordering::Relaxed) {
        let lost = Error::Timeout("outputs timed out during a rebalance".to_owned());
        let _ = revive_on_timeout(consumer, shared, lost);
    }
}

/// [`Application::commit`] but for the cleanup: every task and then the group offsets. A
/// task whose commit timed out is closed without committing and opened again.
pub(crate) fn commit_tasks(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Arc<Shared>,
) -> Result<()> {
    if shared.config.exactly_once() {
        return commit_tasks_in_transaction(consumer, shared);
    }
    if let Err(err) = shared.flush_outputs() {
        return revive_on_timeout(consumer, shared, err);
    }
    let mut offsets = Vec::new();
    let mut timed_out = Vec::new();
    let any_fenced;
    {
        let mut tasks = shared.tasks.lock();
        let mut fenced = Vec::new();
        let mut first_error = None;
        let due = tasks
            .iter_mut()
            .filter(|(_, task)| task.commit_due())
            .map(|(&id, task)| (id, task));
        let results = commit_in_parallel(due.collect(), |task| (task.id, task.commit()));
        for (_, (id, result)) in results {
            match result {
                Ok(committed) => offsets.extend(shared.group_offsets_of(id, &committed)),
                Err(err) if err.kind() == ErrorKind::Fenced => {
                    tracing::warn!(task = %id, %err, "task fenced by a newer owner: dropped as lost");
                    fenced.push(id);
                }
                Err(err) if err.kind() == ErrorKind::Timeout => {
                    tracing::warn!(task = %id, %err, "task commit timed out");
                    timed_out.push(id);
                }
                Err(err) => first_error = first_error.or(Some(err)),
            }
        }
        if let Some(err) = first_error {
            return Err(err);
        }
        any_fenced = !fenced.is_empty();
        for id in fenced {
            if let Some(task) = tasks.remove(&id) {
                task.abandon();
                shared.event(id, TaskEventKind::Fenced);
            }
        }
    }
    if any_fenced {
        // A newer writer of a task's changelog: the group moved the task, or this member's
        // view of its assignment is stale. Rejoining lets the group say; a fenced task left
        // assigned here without rejoining would never be processed again.
        // The tasks whose commit timed out go with the others.
        rejoin(consumer, shared);
    } else {
        shared.revive(consumer, &timed_out);
    }
    if let Err(err) = commit_group(consumer, shared, &offsets) {
        // The stores hold the positions; the group offset is a floor and for monitoring,
        // and a commit racing a rebalance is refused. It is tried again at the next
        // commit: otherwise a task with no new record would leave it behind for good.
        tracing::warn!(%err, "committing the group offsets failed");
        let mut tasks = shared.tasks.lock();
        for &(topic, partition, _) in &offsets {
            if let Some(task) = shared
                .locate_topic(topic, partition)
                .and_then(|(id, _)| tasks.get_mut(&id))
            {
                task.group_commit_failed();
            }
        }
    }
    Ok(())
}

/// [`commit_tasks`] under exactly-once: one transaction (see the `exactly_once` module). An
/// aborted or fenced transaction, or one that timed out, closes every task without committing
/// and opens it again; so does a task whose stores failed to apply a committed one.
fn commit_tasks_in_transaction(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Arc<Shared>,
) -> Result<()> {
    match commit_transaction(consumer, shared) {
        Ok(failed) => shared.revive(consumer, &failed),
        Err(err) if shared.migrated(&err) => {
            tracing::warn!(%err, "transaction fenced: every task is dropped, the group rejoined");
            lose_all_and_rejoin(consumer, shared);
        }
        Err(err) if shared.revives(&err) => {
            tracing::warn!(%err, "transaction aborted: every task goes back to its last commit");
            let ids: Vec<TaskId> = shared.tasks.lock().keys().copied().collect();
            shared.revive(consumer, &ids);
        }
        Err(err) => return Err(err),
    }
    Ok(())
}
