//! Restores of newly assigned tasks, on restore threads, off the consumer's poll loop (as Kafka
//! Streams' state updater does): the instance keeps polling, heartbeating and processing its
//! other tasks while a task restores, so a long restore neither stalls them nor counts against
//! `max.poll.interval.ms`.
//!
//! On assignment the restoring tasks' partitions are paused. Once a task's stores are restored
//! and fenced, the poll loop takes the task in, seeks its partitions to the task's own
//! position and resumes them. A task revoked while it restores is closed when its restore
//! ends, unless it is assigned here again meanwhile; it never fences its changelogs after
//! the revocation, which its new owner may have fenced already.
//!
//! Under the eager protocol a rebalance revokes every task before it assigns any: a revoked
//! task is committed and suspended rather than closed, and if the rebalance assigns it here
//! again its restore thread resumes it (a fence of its changelogs, no replay) instead of
//! opening its stores anew; the assignment closes the suspended tasks it does not hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Instant;

use statestore_changelog::TaskId;
use store_api::Result;

use crate::state::task::Task;

/// A task whose stores are being restored.
pub(crate) struct Restoring {
    /// The task was revoked meanwhile: its stores are closed when the restore ends.
    pub revoked: bool,
    /// Its restore gave up fencing the changelogs because the task was revoked then: a task
    /// assigned here again meanwhile is restored again.
    pub fence_refused: bool,
    /// The group's committed offset of each input topic (by index): where a task that never
    /// committed state starts.
    pub floors: Vec<Option<u64>>,
    pub started: Instant,
    /// Since when the task, restored, waits for librdkafka to start fetching its partitions.
    pub not_fetching_since: Option<Instant>,
}

/// A finished restore: the task's id and its opened task.
pub(crate) type Restored = (TaskId, Result<Task>);

/// The tasks being restored, and the channel their restore threads report on.
pub(crate) struct Restorer {
    pub tasks: BTreeMap<TaskId, Restoring>,
    /// Tasks revoked by an eager rebalance, committed, their stores open: resumed if the
    /// rebalance assigns them here again, closed otherwise.
    pub suspended: BTreeMap<TaskId, Task>,
    /// Tasks whose changelogs a restore thread fences right now: a revocation of one waits
    /// until its fence ended, so that no fence of this instance follows the revocation (and
    /// with it, the new owner's fence).
    pub fencing: BTreeSet<TaskId>,
    done_tx: Sender<Restored>,
    done_rx: Receiver<Restored>,
}

impl Restorer {
    pub fn new() -> Restorer {
        let (done_tx, done_rx) = mpsc::channel();
        Restorer {
            tasks: BTreeMap::new(),
            suspended: BTreeMap::new(),
            fencing: BTreeSet::new(),
            done_tx,
            done_rx,
        }
    }

    /// Where a restore thread reports.
    pub fn reporter(&self) -> Sender<Restored> {
        self.done_tx.clone()
    }

    /// The next finished restore, if any, with its bookkeeping; `None` in the first slot for
    /// a restore nobody waits for any more.
    pub fn next_done(&mut self) -> Option<(Option<Restoring>, Restored)> {
        let (id, task) = self.done_rx.try_recv().ok()?;
        Some((self.tasks.remove(&id), (id, task)))
    }

    /// Puts a restored task that could not be taken in yet back among the finished restores,
    /// for the next [`next_done`](Restorer::next_done).
    pub fn put_back(&mut self, id: TaskId, restoring: Restoring, task: Task) {
        self.tasks.insert(id, restoring);
        if let Err(mpsc::SendError((_, Ok(task)))) = self.done_tx.send((id, Ok(task))) {
            // The receiver is this restorer's own, so this never happens.
            task.abandon();
        }
    }

    /// The tasks being restored and not revoked.
    pub fn wanted(&self) -> Vec<TaskId> {
        self.tasks
            .iter()
            .filter(|(_, restoring)| !restoring.revoked)
            .map(|(&id, _)| id)
            .collect()
    }
}
