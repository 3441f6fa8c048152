//! One task: the stores of one input partition, their input position, commit and close.
//!
//! # Exactly-once state, store by store
//! Every store of a task holds, under the reserved key [`POSITION_KEY`], the input offsets up to
//! which its content is complete (the next offset to process, of each input topic). The key is
//! written in the same `LoggedStore` commit as the state it vouches for, so a store's position
//! and its data always agree, whatever happens between commits.
//!
//! Each store has its own changelog, so a task with several stores commits them one after the
//! other, and a crash in between leaves them at different positions. The task then resumes at
//! the smallest position, and while it replays records below a store's own position it drops
//! that store's writes: every store applies every input record exactly once. The limit: during
//! that replay, a store that is ahead is read in its later state, so a processor that copies
//! values from one store into another can copy a value from the future; processors whose writes
//! to a store depend only on that store and the record (counts, aggregates) are exact.
//!
//! # Only the task commits
//! A task's stores are opened with [`CommitPolicy::Explicit`]: a full buffer, a close or a drop
//! never commits behind the task's back. The task commits all its stores at a record boundary
//! (the commit interval, a store's buffer reaching `commit_bytes`, a revocation), so every
//! changelog commit holds whole records and the position they bring the store to.
//!
//! # Fencing
//! Opening a task fences each of its changelogs ([`LoggedStore::fence`]): a writer epoch above
//! any in the log is stamped on every record this owner appends, and every reader (a restore,
//! a standby, the next owner) ignores what an older epoch appends afterwards. A previous owner
//! that wakes up after its session timeout (a long pause) can still append, but nothing it
//! appends counts, and its next commit fails with `Fenced`: its instance then drops the task
//! as lost, without touching its local files.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use statestore_changelog::{
    CommitPolicy, LoggedStore, LoggedStoreConfig, RestoreListener, RestoreOutcome, SnapshotStore,
    StateDirectory, TaskDirectory, TaskId,
};
use store_api::{Error, KeyValueStore, Result};

use super::changelogs::ChangelogOpener;
use super::kv::{Backing, TaskKv};
use super::metrics::TaskMetrics;
use super::position::{POSITION_KEY, decode_task_state, encode_task_state};
use super::punctuation::Punctuators;
use super::stores::{OpenStore, StoreView};
use super::upstream::{Upstream, UpstreamMarks};
use crate::config::{ProcessingGuarantee, StoreKind, StoreSpec, TasksConfig};
use crate::runtime::outputs::OutputRecord;

/// Records an error handler said to skip, by (topic index, offset), each with the dead letter
/// that goes out whenever the task passes over it (none under `Continue`).
pub(crate) type Skips = std::collections::BTreeMap<(usize, u64), Option<OutputRecord>>;

/// Decides whether a task being opened or resumed here may still fence its changelogs: one
/// revoked meanwhile must leave them to its new owner, which may already write to them.
pub(crate) trait FenceGate {
    /// Runs `fence` if task `id` is still this instance's to open, else returns `Fenced`.
    fn fence(&self, id: TaskId, fence: &mut dyn FnMut() -> Result<u64>) -> Result<u64>;
}

/// What opening a task reports to and asks of the instance that opens it.
pub(crate) struct Opening<'a> {
    /// Told how each store's restore goes.
    pub listener: &'a mut dyn RestoreListener,
    /// Asked before each changelog is fenced.
    pub gate: &'a dyn FenceGate,
}

/// A store of a task, with the position its content is complete up to.
pub(crate) struct Slot {
    pub name: String,
    /// The store and the kind it was declared as.
    pub open: OpenStore,
    /// The input offset of each input topic (in the configuration's order) this store's
    /// committed content is complete up to; its writes for records below it are dropped.
    /// Always 0 for a store that is not logged: it holds no position.
    pub position: Vec<u64>,
    /// The stream time this store's committed content holds.
    pub stream_time: Option<i64>,
    /// The last record applied from each upstream task this store's committed content holds.
    upstreams: UpstreamMarks,
    pub restored: RestoreOutcome,
    /// The kind the store was declared as: its view is opened again after a rewind.
    kind: StoreKind,
}

impl Slot {
    fn logged(&self) -> Option<&LoggedStore> {
        self.open.kv.logged()
    }
}

/// The open stores of one task.
pub(crate) struct Task {
    pub id: TaskId,
    /// Declared before the directory, so the stores close before the directory is released.
    pub slots: Vec<Slot>,
    /// The input topics, in the configuration's order: the indexes of the positions below.
    pub topics: Vec<String>,
    /// The next offset to process in each input topic, once known.
    next_offset: Vec<Option<u64>>,
    /// The offsets last committed with the stores and to the group: a commit is due while
    /// they differ from `next_offset` (set back when the group's offsets lag the stores').
    committed_offset: Vec<Option<u64>>,
    /// The largest record timestamp processed (or committed before).
    stream_time: Option<i64>,
    /// Where a [`rewind`](Task::rewind) takes the task back to: the offsets, stream time and
    /// upstream marks of its last commit, or those it started processing at.
    base_offset: Vec<Option<u64>>,
    base_stream_time: Option<i64>,
    base_upstreams: UpstreamMarks,
    /// The last record applied from each upstream task, by repartition topics' headers.
    upstreams: UpstreamMarks,
    /// For each input topic, whether its records' upstream headers are checked: repartition
    /// topics under `at_least_once`.
    dedups: Vec<bool>,
    /// Whether records sent to repartition topics carry upstream headers: under
    /// `at_least_once` (under `exactly_once_v2` transactions make them exactly once).
    stamps: bool,
    /// Records an error handler said to skip: passed over without the processor when they
    /// come again, until a commit moves the position past them.
    skips: Skips,
    /// The processor's punctuators of this task.
    pub punctuators: RefCell<Punctuators>,
    /// The processor's `init` ran for this task.
    initialized: bool,
    /// A punctuator ran since the last commit: its writes need one.
    punctuated: bool,
    /// A call of the processor is under way or failed: the buffered writes may hold part of
    /// its record, so they are never committed (see [`begin_call`](Task::begin_call)).
    poisoned: bool,
    /// The failed call was rolled back ([`roll_back_call`](Task::roll_back_call)): the
    /// buffers hold nothing of it, so the task can go on past it without a rewind.
    rolled_back: bool,
    /// The stream time when the call began, which a roll-back restores.
    call_stream_time: Option<i64>,
    pub metrics: TaskMetrics,
    /// The task was [`resume`](Task::resume)d rather than opened.
    resumed: bool,
    /// Unique among the tasks this process opened: a task closed and opened again is a new
    /// generation, which gets a new processor from a [`ProcessorPool`](crate::ProcessorPool).
    pub generation: u64,
    dir: TaskDirectory,
}

/// The generation of the next task opened.
static NEXT_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Task {
    /// Opens and restores every store of task `id`, logged to partition `id.partition` of
    /// their changelog topics (which have `partitions` partitions), opened through `clients`.
    pub fn open(
        state: &StateDirectory,
        config: &TasksConfig,
        clients: &dyn ChangelogOpener,
        id: TaskId,
        partitions: u32,
        mut opening: Opening<'_>,
    ) -> Result<Task> {
        let _span = tracing::info_span!("restore", task = %id).entered();
        let started = Instant::now();
        let shape = config
            .task_shapes()
            .into_iter()
            .find(|shape| shape.id == id.subtopology)
            .ok_or_else(|| Error::invalid(format!("task {id}: no such sub-topology")))?;
        let dir = state.task(id)?;
        let mut slots = Vec::with_capacity(shape.stores.len());
        for spec in &shape.stores {
            slots.push(open_slot(
                &dir,
                config,
                (spec, &shape.topics),
                clients,
                (id, partitions),
                &mut opening,
            )?);
        }
        let resume: Vec<Option<u64>> = (0..shape.topics.len())
            .map(|topic| {
                let at = slots
                    .iter()
                    .filter(|slot| slot.logged().is_some())
                    .map(|slot| slot.position[topic])
                    .min();
                at.filter(|&at| at > 0)
            })
            .collect();
        let stream_time = slots.iter().filter_map(|slot| slot.stream_time).max();
        // What every store surely applied: a store ahead drops the writes of what is replayed.
        let upstreams = slots
            .iter()
            .filter(|slot| slot.logged().is_some())
            .map(|slot| &slot.upstreams)
            .fold(None, |met: Option<UpstreamMarks>, marks| {
                Some(met.map_or_else(|| marks.clone(), |met| met.meet(marks)))
            })
            .unwrap_or_default();
        let at_least_once = config.processing_guarantee == ProcessingGuarantee::AtLeastOnce
            && config.repartition_dedup;
        let dedups = shape
            .topics
            .iter()
            .map(|topic| at_least_once && config.repartition_topics.contains(topic))
            .collect();
        let metrics = TaskMetrics::new(&config.application_id, id);
        for slot in &slots {
            metrics.restored(&slot.name, slot.restored.records);
        }
        metrics.opened_in(started.elapsed().as_secs_f64());
        Ok(Task {
            id,
            slots,
            topics: shape.topics,
            next_offset: resume.clone(),
            committed_offset: resume.clone(),
            base_offset: resume,
            base_stream_time: stream_time,
            base_upstreams: upstreams.clone(),
            upstreams,
            dedups,
            stamps: at_least_once && !config.repartition_topics.is_empty(),
            skips: Skips::new(),
            stream_time,
            punctuators: RefCell::new(Punctuators::default()),
            initialized: false,
            punctuated: false,
            poisoned: false,
            rolled_back: false,
            call_stream_time: stream_time,
            metrics,
            resumed: false,
            generation: NEXT_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            dir,
        })
    }

    /// The slot of store `name`, declared at `index` among the configuration's stores (the
    /// slot's index too when the task holds every store).
    pub fn slot_of(&self, index: usize, name: &str) -> Option<&Slot> {
        self.slots
            .get(index)
            .filter(|slot| slot.name == name)
            .or_else(|| self.slots.iter().find(|slot| slot.name == name))
    }

    /// Marks each store as replaying or not for the record at `offset` of input `topic`: a
    /// store whose committed content already covers it drops its writes.
    pub fn replay_record(&self, topic: usize, offset: u64) {
        for slot in &self.slots {
            let ahead = slot.logged().is_some() && offset < slot.position[topic];
            slot.open.kv.set_replaying(ahead);
        }
    }

    /// Marks each store as replaying or not between records (for punctuators): a store whose
    /// committed content is ahead of the task's position on some input drops its writes.
    pub fn replay_between_records(&self) {
        for slot in &self.slots {
            let ahead = slot.logged().is_some()
                && slot
                    .position
                    .iter()
                    .zip(&self.next_offset)
                    .any(|(&held, next)| next.unwrap_or(0) < held);
            slot.open.kv.set_replaying(ahead);
        }
    }

    /// Whether records of input `topic` are checked for an upstream header (see the
    /// `upstream` module).
    pub fn dedups(&self, topic: usize) -> bool {
        self.dedups.get(topic).copied().unwrap_or(false)
    }

    /// Whether the records this task sends to repartition topics carry upstream headers.
    pub fn stamps_repartition_records(&self) -> bool {
        self.stamps
    }

    /// Whether the record from `upstream` was applied already: it is to be dropped.
    pub fn applied_upstream(&self, upstream: &Upstream<'_>) -> bool {
        self.upstreams.applied(upstream)
    }

    /// Records that the record from `upstream` was applied (its call finished).
    pub fn apply_upstream(&mut self, upstream: &Upstream<'_>) {
        self.upstreams.apply(upstream);
    }

    /// The largest record timestamp the task processed (or committed before).
    pub fn stream_time(&self) -> Option<i64> {
        self.stream_time
    }

    /// The next offset to process in input `topic`, once known.
    pub fn next_offset(&self, topic: usize) -> Option<u64> {
        self.next_offset[topic]
    }

    /// The next offset to process in each input topic, once known.
    pub fn next_offsets(&self) -> &[Option<u64>] {
        &self.next_offset
    }

    /// The position in input `topic` the task's stores last committed (where a rewind or a
    /// new owner starts), once known.
    pub fn committed_position(&self, topic: usize) -> Option<u64> {
        self.base_offset[topic]
    }

    /// Whether the record at `offset` of input `topic` is behind the task's position: it was
    /// processed (or skipped) already.
    pub fn is_behind(&self, topic: usize, offset: u64) -> bool {
        self.next_offset[topic].is_some_and(|next| offset < next)
    }

    /// Moves the task's position in input `topic` past the record at `offset`, which was
    /// processed or skipped.
    pub fn pass(&mut self, topic: usize, offset: u64) {
        self.next_offset[topic] = Some(offset + 1);
    }

    /// Where the task starts in each input topic it holds no position for: `floors` (the
    /// group's committed offsets), which are also taken as committed to the group, so the
    /// next commit brings the group's offsets up to the stores' positions.
    pub fn start_from(&mut self, floors: &[Option<u64>]) {
        for (next, floor) in self.next_offset.iter_mut().zip(floors) {
            if next.is_none() {
                *next = *floor;
            }
        }
        self.committed_offset = floors.to_vec();
        self.base_offset.clone_from(&self.next_offset);
    }

    /// Whether a call of user code failed in this task (or is under way): it is never
    /// committed until [`rewind`](Task::rewind).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Whether the processor's `init` ran for this task.
    pub fn is_initialized(&self) -> bool {
        self.initialized
    }

    /// Records that the processor's `init` ran for this task.
    pub fn mark_initialized(&mut self) {
        self.initialized = true;
    }

    /// Records that a punctuator ran: its writes need a commit.
    pub fn mark_punctuated(&mut self) {
        self.punctuated = true;
    }

    /// Whether the task should commit at its next boundary: it is not poisoned, and it
    /// processed records since its last commit, a punctuator wrote, or a store's buffer is
    /// full.
    pub fn commit_due(&self) -> bool {
        !self.poisoned && (self.committed_offset != self.next_offset || self.needs_commit())
    }

    /// Records that the group refused the offsets of the last commit: the next commit sends
    /// them again, even with nothing new processed.
    pub fn group_commit_failed(&mut self) {
        self.committed_offset.fill(None);
    }

    /// Starts a call of user code: until [`finish_call`](Task::finish_call), the task is
    /// poisoned, so a call that fails or panics leaves it uncommittable whatever its caller
    /// does next. Sets a savepoint in every store, which
    /// [`roll_back_call`](Task::roll_back_call) goes back to.
    pub fn begin_call(&mut self) {
        self.poisoned = true;
        self.rolled_back = false;
        self.call_stream_time = self.stream_time;
        for slot in &self.slots {
            slot.open.kv.savepoint();
        }
    }

    /// Undoes a call of user code that failed, leaving the task poisoned until
    /// [`go_on_after_failure`](Task::go_on_after_failure) or a [`rewind`](Task::rewind):
    /// every store drops the writes the call made, and only those (a logged one from its
    /// write buffer; one with logging off writes back the values the call replaced), and a
    /// store opened as another kind than key-value whose content the call changed is opened
    /// again over what it holds now; the stream time goes back to where the call found it.
    ///
    /// # Errors
    /// A store that cannot roll back (no savepoint: a commit came after the call began) or
    /// reopen its view: only a rewind takes the task back to a state it may commit.
    pub fn roll_back_call(&mut self) -> Result<()> {
        for slot in &mut self.slots {
            let undone = slot.open.kv.roll_back()?;
            if undone && slot.kind != StoreKind::KeyValue {
                slot.open.view = StoreView::open(&slot.open.kv, &slot.kind)?;
            }
        }
        self.stream_time = self.call_stream_time;
        self.rolled_back = true;
        Ok(())
    }

    /// After a failed call that was [rolled back](Task::roll_back_call), which the error
    /// handler answered by going on: the task is no longer poisoned, and with `skip` (the
    /// failed record's topic index and offset, with its dead letter) it moves past that
    /// record, remembering the skip until a commit moves the position past it. Returns
    /// `false`, changing nothing, when the call was not rolled back: only a rewind helps then.
    pub fn go_on_after_failure(
        &mut self,
        skip: Option<((usize, u64), Option<OutputRecord>)>,
    ) -> bool {
        if !(self.poisoned && self.rolled_back) {
            return false;
        }
        self.poisoned = false;
        self.rolled_back = false;
        if let Some(((topic, offset), letter)) = skip {
            self.pass(topic, offset);
            self.skips.insert((topic, offset), letter);
        }
        true
    }

    /// Ends a call of user code that returned normally.
    pub fn finish_call(&mut self) {
        self.poisoned = false;
    }

    /// Takes the task back to its last commit: every logged store drops the writes it buffered
    /// since (a store with logging off keeps them) and its view is opened again over what is
    /// committed; the offsets and the stream time go back too, and the task is no longer
    /// poisoned. The records since that commit must then be fed to it again.
    ///
    /// # Errors
    /// A store that cannot drop its writes (its last commit failed: only a restore brings it
    /// back) or reopen its view; the task stays poisoned.
    pub fn rewind(&mut self) -> Result<()> {
        for slot in &mut self.slots {
            if let Some(store) = slot.logged() {
                store.discard_uncommitted()?;
            }
            slot.open.kv.set_replaying(false);
            slot.open.view = StoreView::open(&slot.open.kv, &slot.kind)?;
        }
        self.next_offset.clone_from(&self.base_offset);
        self.stream_time = self.base_stream_time;
        self.upstreams.clone_from(&self.base_upstreams);
        self.punctuated = false;
        self.poisoned = false;
        self.rolled_back = false;
        Ok(())
    }

    /// Marks the record at `offset` of input `topic` to be passed over when it comes again,
    /// sending `letter` then.
    pub fn skip(&mut self, topic: usize, offset: u64, letter: Option<OutputRecord>) {
        self.skips.insert((topic, offset), letter);
    }

    /// Whether the record at `offset` of input `topic` is one to pass over, and the dead
    /// letter to send as it is.
    pub fn skips(&self, topic: usize, offset: u64) -> Option<&Option<OutputRecord>> {
        if self.skips.is_empty() {
            return None;
        }
        self.skips.get(&(topic, offset))
    }

    /// The skips not committed past, for the task opened again after this one is abandoned:
    /// its handler is not asked again about records it answered.
    pub fn take_skips(&mut self) -> Skips {
        std::mem::take(&mut self.skips)
    }

    /// Takes in the skips a previous copy of this task decided ([`take_skips`](Task::take_skips)),
    /// but those behind its position, which it will not see again.
    pub fn remember_skips(&mut self, skips: Skips) {
        for ((topic, offset), letter) in skips {
            if topic < self.next_offset.len() && !self.is_behind(topic, offset) {
                self.skips.insert((topic, offset), letter);
            }
        }
    }

    /// Moves the stream time up to `timestamp`, if that is later.
    pub fn advance_stream_time(&mut self, timestamp: i64) {
        if self.stream_time.is_none_or(|time| time < timestamp) {
            self.stream_time = Some(timestamp);
        }
    }

    /// True when a store's buffer reached its `commit_bytes` or a punctuator wrote since the
    /// last commit: the task should commit now, at this record boundary.
    pub fn needs_commit(&self) -> bool {
        self.punctuated
            || self
                .slots
                .iter()
                .filter_map(Slot::logged)
                .any(LoggedStore::needs_commit)
    }

    /// The outcome of each store's restore.
    pub fn restored(&self) -> Vec<(String, RestoreOutcome)> {
        self.slots
            .iter()
            .map(|slot| (slot.name.clone(), slot.restored))
            .collect()
    }

    /// Commits every store with the positions `next_offset` (where they advanced) and the
    /// stream time, one store after the other, then writes the task's checkpoint file once
    /// for the stores whose commit checkpointed (see
    /// [`CheckpointPolicy`](statestore_changelog::CheckpointPolicy)). Returns the offset now committed in every
    /// store, by topic index, for the topics that have one.
    pub fn commit(&mut self) -> Result<Vec<(usize, u64)>> {
        let started = Instant::now();
        self.commit_stores(LoggedStore::commit_staged)?;
        self.dir.checkpoint().write_staged()?;
        Ok(self.committed(started))
    }

    /// The first half of a commit under exactly-once: as [`commit`](Task::commit), except
    /// that each store's records are appended inside the open Kafka transaction
    /// ([`LoggedStore::prepare_commit`]) and nothing reaches a store or the checkpoint file
    /// until [`apply`](Task::apply), once the transaction committed. Returns the offsets the
    /// transaction is to commit to the group. After an error, or when the transaction
    /// aborts, the task is closed without committing ([`abandon`](Task::abandon)) and
    /// opened again.
    pub fn prepare(&mut self) -> Result<Vec<(usize, u64)>> {
        self.commit_stores(|store| store.prepare_commit().map(drop))?;
        Ok(self.committable())
    }

    /// The second half of a commit [`prepare`](Task::prepare) began, once its transaction
    /// committed: every store applies its prepared writes, then the checkpoint file is
    /// written once.
    ///
    /// # Errors
    /// A store or checkpoint error: the task is then closed without committing and opened
    /// again, which restores what the transaction committed.
    pub fn apply(&mut self) -> Result<()> {
        let started = Instant::now();
        for slot in &self.slots {
            if let Some(store) = slot.logged() {
                store.apply_prepared()?;
            }
        }
        self.dir.checkpoint().write_staged()?;
        self.committed(started);
        Ok(())
    }

    /// Puts each logged store's position where it advanced and commits it with `commit`,
    /// one store after the other; flushes the stores that are not logged.
    fn commit_stores(&mut self, commit: impl Fn(&LoggedStore) -> Result<()>) -> Result<()> {
        if self.poisoned {
            return Err(Error::invalid(format!(
                "task {} is not committed: its processor failed in the middle of a record",
                self.id
            )));
        }
        let _span = tracing::info_span!("commit", task = %self.id).entered();
        let stores = self.slots.len();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Backing::Logged(store) = &slot.open.kv.backing else {
                if let Backing::Local(store) = &slot.open.kv.backing {
                    store.flush()?;
                }
                continue;
            };
            let position: Vec<u64> = slot
                .position
                .iter()
                .zip(&self.next_offset)
                .map(|(&held, next)| held.max(next.unwrap_or(0)))
                .collect();
            let stream_time = slot.stream_time.max(self.stream_time);
            // A store ahead (after a crash between two stores' commits) may hold later marks:
            // the task's are what every store surely applied, which is what matters.
            let upstreams = &self.upstreams;
            if position != slot.position
                || stream_time != slot.stream_time
                || *upstreams != slot.upstreams
            {
                let bytes = encode_task_state(&self.topics, &position, stream_time, upstreams);
                store.put(POSITION_KEY, &bytes)?;
            }
            // The task's checkpoint file is written once, after every store committed.
            commit(store)?;
            slot.position = position;
            slot.stream_time = stream_time;
            slot.upstreams.clone_from(upstreams);
            if index + 1 < stores {
                fail::fail_point!("task-between-store-commits");
            }
        }
        Ok(())
    }

    /// Records that every store committed the task's position, `started` ago, and returns
    /// that position.
    fn committed(&mut self, started: Instant) -> Vec<(usize, u64)> {
        self.punctuated = false;
        self.committed_offset.clone_from(&self.next_offset);
        self.base_offset.clone_from(&self.next_offset);
        self.base_stream_time = self.stream_time;
        self.base_upstreams.clone_from(&self.upstreams);
        let next = &self.next_offset;
        let mut letters = 0;
        self.skips.retain(|&(topic, offset), letter| {
            let ahead = next[topic].is_none_or(|next| offset >= next);
            if !ahead && letter.is_some() {
                letters += 1;
            }
            ahead
        });
        // A dead letter counts once the commit that moves past its record is done: under
        // exactly-once, once it is visible to a `read_committed` reader.
        if letters > 0 {
            self.metrics.dead_letters.increment(letters);
        }
        self.metrics
            .commit_seconds
            .record(started.elapsed().as_secs_f64());
        self.committable()
    }

    /// The task's position, by topic index, for the topics that have one.
    fn committable(&self) -> Vec<(usize, u64)> {
        self.next_offset
            .iter()
            .enumerate()
            .filter_map(|(topic, next)| Some((topic, (*next)?)))
            .collect()
    }

    /// Commits, flushes and checkpoints every store (one checkpoint file write), keeping them
    /// open: a task revoked by an eager rebalance, which the same rebalance may assign here
    /// again ([`resume`](Task::resume)), else [`close`](Task::close)s. Returns what
    /// [`commit`](Task::commit) does.
    pub fn suspend(&mut self) -> Result<Vec<(usize, u64)>> {
        let committed = self.commit()?;
        for slot in &self.slots {
            if let Some(store) = slot.logged() {
                store.stage_checkpoint()?;
            }
        }
        self.dir.checkpoint().write_staged()?;
        Ok(committed)
    }

    /// Takes a [`suspend`](Task::suspend)ed task back for a new assignment here: fences each
    /// logged store's changelog again, which replays into the store whatever another owner
    /// committed since the suspension and makes later appends of any other owner count for
    /// nothing, and makes the task a new generation (a new processor, whose `init` runs
    /// before its first record, as for a task opened anew). Returns `false` when another
    /// owner committed to a store meanwhile (its position moved): the task is then to be
    /// closed without committing and opened again, which restores it.
    ///
    /// # Errors
    /// As [`LoggedStore::fence`], or a store position that cannot be read.
    pub fn resume(&mut self, gate: &dyn FenceGate) -> Result<bool> {
        for slot in &mut self.slots {
            let Some(store) = slot.open.kv.logged() else {
                continue;
            };
            gate.fence(self.id, &mut || store.fence())?;
            let (position, stream_time, upstreams) = read_position(store, &self.topics)?;
            if position != slot.position
                || stream_time != slot.stream_time
                || upstreams != slot.upstreams
            {
                return Ok(false);
            }
            slot.restored = RestoreOutcome::default();
        }
        self.generation = NEXT_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.initialized = false;
        self.punctuated = false;
        self.punctuators = RefCell::new(Punctuators::default());
        self.resumed = true;
        Ok(true)
    }

    /// Whether the task was [`resume`](Task::resume)d after a suspension rather than opened.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// Commits, flushes and checkpoints every store (one checkpoint file write), then closes
    /// them, keeping their files: the next owner on this machine replays nothing.
    pub fn close(mut self) -> Result<Vec<(usize, u64)>> {
        let committed = self.suspend();
        if committed.is_err() {
            self.abandon();
            return committed;
        }
        self.close_stores()?;
        committed
    }

    /// Closes the stores of a [`suspend`](Task::suspend)ed task, which committed them then:
    /// nothing reaches the changelogs, which another instance may own by now.
    pub fn close_suspended(self) -> Result<()> {
        self.close_stores()
    }

    fn close_stores(&self) -> Result<()> {
        for slot in &self.slots {
            match &slot.open.kv.backing {
                Backing::Logged(store) => store.close()?,
                Backing::Local(store) => store.close()?,
            }
        }
        Ok(())
    }

    /// Closes every store without committing: a logged store's buffered writes are dropped.
    /// For a task lost to another instance, which may already be writing to the changelog.
    pub fn abandon(&self) {
        for slot in &self.slots {
            let closed = match &slot.open.kv.backing {
                Backing::Logged(store) => store.abandon(),
                Backing::Local(store) => store.close(),
            };
            if let Err(err) = closed {
                tracing::warn!(task = %self.id, store = slot.name, %err, "abandoning a store");
            }
        }
    }
}

/// Opens store `spec` of task `id`: a logged one restored from its changelog and fenced, then
/// opened as its declared kind.
fn open_slot(
    dir: &TaskDirectory,
    config: &TasksConfig,
    (spec, topics): (&StoreSpec, &[String]),
    clients: &dyn ChangelogOpener,
    (id, partitions): (TaskId, u32),
    opening: &mut Opening<'_>,
) -> Result<Slot> {
    let factory = statestore::resolve(&spec.backend)?;
    let (inner, _) = dir.open_logged_store(factory, &spec.name, &spec.options)?;
    let (backing, (position, stream_time, upstreams), restored) = if spec.logging {
        let log =
            clients.open_changelog(config.changelog_config(spec, partitions), id.partition)?;
        let checkpoint = Arc::clone(dir.checkpoint());
        // The task alone decides when its stores commit: at a record boundary, with its
        // position in every commit.
        let logged = LoggedStoreConfig {
            commit_policy: CommitPolicy::Explicit,
            ..spec.logged.clone()
        };
        let store = match &config.snapshots {
            Some(snapshots) => LoggedStore::open_with_snapshots(
                inner,
                log,
                checkpoint,
                logged,
                Arc::new(SnapshotStore::open(snapshots)?),
                opening.listener,
            )?,
            None => {
                LoggedStore::open_with_listener(inner, log, checkpoint, logged, opening.listener)?
            }
        };
        // From here on nothing a previous owner of the task appends counts.
        opening.gate.fence(id, &mut || store.fence())?;
        let held = read_position(&store, topics)?;
        let restored = store.restored();
        (Backing::Logged(Box::new(store)), held, restored)
    } else {
        // Nothing to restore from: the store is whatever this machine kept.
        let restored = RestoreOutcome::default();
        let held = (vec![0; topics.len()], None, UpstreamMarks::default());
        (Backing::Local(inner), held, restored)
    };
    let kv = Arc::new(TaskKv::new(spec.name.clone(), backing));
    let view = StoreView::open(&kv, &spec.kind)?;
    Ok(Slot {
        name: spec.name.clone(),
        open: OpenStore { kv, view },
        position,
        stream_time,
        upstreams,
        restored,
        kind: spec.kind,
    })
}

/// The position `store` holds for each of `topics` (0 for a topic it holds none for).
///
/// # Errors
/// `Corruption` for a position that cannot be decoded; `InvalidArgument` for a one-topic
/// position under several input topics: which topic it belongs to is not recorded.
fn read_position(
    store: &LoggedStore,
    topics: &[String],
) -> Result<(Vec<u64>, Option<i64>, UpstreamMarks)> {
    match store.get(POSITION_KEY)? {
        None => Ok((vec![0; topics.len()], None, UpstreamMarks::default())),
        Some(bytes) => decode_task_state(&bytes, topics).map_err(|err| match err {
            Error::Corruption(why) => Error::Corruption(format!("store {store:?}: {why}")),
            Error::InvalidArgument(why) => {
                Error::InvalidArgument(format!("store {store:?}: {why}"))
            }
            other => other,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use statestore::memory::{Config, MemoryStore};
    use statestore_changelog::{Changelog, Checkpoint, LoggedStore, LoggedStoreConfig, MemoryLog};
    use store_api::{ErrorKind, KeyValueStore};

    use super::FenceGate;

    /// Fences every changelog: the task is the test's for as long as it is open.
    struct Owned;

    impl FenceGate for Owned {
        fn fence(
            &self,
            _id: statestore_changelog::TaskId,
            fence: &mut dyn FnMut() -> store_api::Result<u64>,
        ) -> store_api::Result<u64> {
            fence()
        }
    }

    /// A lost task's buffered writes must never reach the changelog: another instance may
    /// already be writing to it.
    #[test]
    fn abandoning_a_store_drops_its_buffered_writes() {
        let dir = tempfile::tempdir().expect("dir");
        let log = MemoryLog::new("app-counts-changelog", 0);
        let checkpoint = Arc::new(Checkpoint::open(dir.path().join(".checkpoint")).expect("cp"));
        let store = LoggedStore::open(
            Arc::new(MemoryStore::new(Config::default())),
            Arc::new(log.clone()),
            checkpoint,
            LoggedStoreConfig::default(),
        )
        .expect("open");
        store.put(b"kept", b"1").expect("put");
        store.commit().expect("commit");
        store.put(b"dropped", b"2").expect("put");
        store.abandon().expect("abandon");
        assert_eq!(
            store.get(b"kept").expect_err("closed").kind(),
            ErrorKind::Closed
        );
        store.abandon().expect("abandoning twice");
        drop(store);
        let logged: Vec<Vec<u8>> = log
            .read(0, 100)
            .expect("read")
            .into_iter()
            .map(|record| record.op.key().to_vec())
            .collect();
        assert!(logged.contains(&b"kept".to_vec()), "{logged:?}");
        assert!(!logged.contains(&b"dropped".to_vec()), "{logged:?}");
    }

    /// A suspended task is resumed only while no other owner committed to its changelog
    /// since: one that did moved the store's position, so the task is opened anew (restored)
    /// rather than resumed on a state that misses those commits.
    #[test]
    fn a_suspended_task_resumes_only_while_no_other_owner_committed_to_it() {
        use statestore_changelog::{KafkaClients, NoopRestoreListener, StateDirectory, TaskId};

        use super::{Opening, Task};
        use crate::{StoreSpec, TasksConfig};

        let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
            "a_suspended_task_resumes_only_while_no_other_owner_committed_to_it",
        ) else {
            return;
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let app = format!("task-suspend-{}-{nanos}", std::process::id());
        let input = format!("{app}-input");
        crate::create_topic(&bootstrap, &input, 1).expect("input topic");
        let (dir_a, dir_b) = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        let config = |dir: &std::path::Path| TasksConfig {
            application_id: app.clone(),
            state_dir: dir.to_owned(),
            bootstrap_servers: bootstrap.clone(),
            input_topics: vec![input.clone()],
            stores: vec![StoreSpec::new("counts", "redb")],
            ..TasksConfig::default()
        };
        let (config_a, config_b) = (config(dir_a.path()), config(dir_b.path()));
        let clients_a =
            KafkaClients::new(&config_a.changelog_config(&config_a.stores[0], 1)).expect("clients");
        let clients_b =
            KafkaClients::new(&config_b.changelog_config(&config_b.stores[0], 1)).expect("clients");
        crate::group::topics::prepare(&clients_a, &config_a).expect("changelog topic");
        let state_a = StateDirectory::open(dir_a.path(), &app).expect("state dir");
        let state_b = StateDirectory::open(dir_b.path(), &app).expect("state dir");
        let id = TaskId::new(0, 0);
        let open = |state: &StateDirectory, config: &TasksConfig, clients: &KafkaClients| {
            let opening = Opening {
                listener: &mut NoopRestoreListener,
                gate: &Owned,
            };
            Task::open(state, config, clients, id, 1, opening).expect("open")
        };

        let mut a = open(&state_a, &config_a, &clients_a);
        a.slots[0].open.kv.put(b"word", b"1").expect("put");
        a.pass(0, 0);
        a.suspend().expect("suspend");
        assert!(a.resume(&Owned).expect("resume"), "no other owner: resumed");
        assert!(a.resumed());
        a.suspend().expect("suspend again");

        let mut b = open(&state_b, &config_b, &clients_b);
        assert_eq!(b.next_offset(0), Some(1));
        b.slots[0].open.kv.put(b"word", b"2").expect("put");
        b.pass(0, 1);
        b.close().expect("close");

        // Another owner committed: A's fence replays B's commit (or finds A fenced), and A
        // is not resumed.
        assert!(
            !matches!(a.resume(&Owned), Ok(true)),
            "resumed over B's commit"
        );
        a.abandon();
    }
}
