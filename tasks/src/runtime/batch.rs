//! Processing in batches with one processor per task, the tasks spread over the instance's
//! stream threads ([`TasksConfig::stream_threads`](crate::TasksConfig::stream_threads)).
//!
//! A batch is taken from the consumer without waiting once a first record arrived, and never
//! across a rebalance. librdkafka hands a partition's fetched records over in long runs (up
//! to a whole fetch of the partition), so with several threads each task's records come from
//! a queue of their own ([`PartitionQueues`], split off before the task's partitions resume)
//! and a batch takes up to `max_poll_records` from each task, up to `max_poll_records` times
//! the threads in all: every thread finds tasks with records. A task's records are processed
//! in order, by one thread at a time, with the task's own processor, while different tasks
//! run at once. Commits, rebalances and the group's upkeep happen between the rounds of a
//! batch, on the polling thread, when no task is being processed: a commit sees every task
//! at a record boundary, with every output of what it commits handed to the producer first.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rdkafka::consumer::BaseConsumer;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::BorrowedMessage;
use statestore_changelog::TaskId;
use std::sync::Arc;
use store_api::{Error, Result};

use super::commit::{commit_tasks, revive_if_outputs_lost};
use super::processing::{locate, process_record, punctuate_task_wall_clock};
use super::{Application, WALL_CLOCK_CHECK_INTERVAL, past_whole_ms};
use crate::processor::Processor;
use crate::runtime::handlers::{Failure, FailureStage, guarded};
use crate::runtime::outputs::Output;
use crate::runtime::shared::{GroupContext, Shared};
use crate::state::punctuation::wall_clock_ms;
use crate::state::task::Task;

/// One processor per task, made by a supplier when the task starts here (Kafka Streams'
/// `ProcessorSupplier`) and dropped when the task is closed, revoked or lost. A task that
/// comes back, even to this instance, gets a new processor, whose
/// [`init`](Processor::init) runs before its first record.
pub struct ProcessorPool<'s, P> {
    supplier: Box<dyn Fn(TaskId) -> P + Sync + 's>,
    /// Each task's processor, with the generation of the task it was made for.
    processors: BTreeMap<TaskId, (u64, P)>,
    /// What processing a record has cost so far, to decide whether a round is worth more
    /// than one thread.
    cost: RecordCost,
}

impl<'s, P: Processor + Send> ProcessorPool<'s, P> {
    /// A pool whose processors `supplier` makes, one for each task.
    pub fn new(supplier: impl Fn(TaskId) -> P + Sync + 's) -> Self {
        ProcessorPool {
            supplier: Box::new(supplier),
            processors: BTreeMap::new(),
            cost: RecordCost::default(),
        }
    }

    /// Drops the processors of tasks no longer open here (or opened again since), and makes
    /// one for each task of `needed` that has none. A supplier that panics fails its task's
    /// initialization.
    fn follow(
        &mut self,
        tasks: &mut BTreeMap<TaskId, Task>,
        needed: impl Iterator<Item = TaskId>,
    ) -> Vec<Failure> {
        self.processors
            .retain(|&id, (generation, _)| still_open(tasks, id, *generation));
        let mut failures = Vec::new();
        for id in needed {
            let Some(task) = tasks.get_mut(&id) else {
                continue;
            };
            if task.is_poisoned() || self.processors.contains_key(&id) {
                continue;
            }
            match guarded(|| Ok((self.supplier)(task.id))) {
                Ok(processor) => {
                    self.processors.insert(id, (task.generation, processor));
                }
                Err((error, panicked)) => {
                    task.begin_call();
                    failures.push(Failure {
                        task: task.id,
                        stage: FailureStage::Initialization,
                        record: None,
                        error,
                        panicked,
                        topic_index: None,
                    });
                }
            }
        }
        failures
    }
}

/// The queues of the input partitions of the tasks open here, each task's with the
/// generation of the task they were split off for.
#[derive(Default)]
pub(crate) struct PartitionQueues {
    queues: BTreeMap<TaskId, (u64, Vec<PartitionQueue<GroupContext>>)>,
    /// Where the next batch starts among the tasks, one further each batch, so that no task
    /// waits behind others that always have records.
    start: std::cell::Cell<usize>,
    /// Raised by librdkafka when one of the queues, or the consumer's, gets something.
    arrived: Arc<Arrivals>,
}

/// A flag that librdkafka's threads raise when a queue goes from empty to non-empty (its
/// non-empty callback), and that a poll waits on while every queue is empty: one wait on
/// one of the queues would not wake for the others.
#[derive(Default)]
pub(crate) struct Arrivals {
    raised: Mutex<bool>,
    changed: Condvar,
}

impl Arrivals {
    /// Raises the flag. Runs on librdkafka's threads, under a queue's lock: it only takes
    /// the flag's own lock.
    fn raise(&self) {
        *self.raised.lock() = true;
        self.changed.notify_one();
    }

    /// Lowers the flag: what arrives from now on raises it again.
    fn lower(&self) {
        *self.raised.lock() = false;
    }

    /// Waits up to `timeout` for the flag to be raised.
    fn wait(&self, timeout: Duration) {
        let mut raised = self.raised.lock();
        if !*raised {
            self.changed.wait_for(&mut raised, timeout);
        }
    }

    /// A callback for a queue's [`set_nonempty_callback`](PartitionQueue::set_nonempty_callback).
    fn callback(self: &Arc<Self>) -> impl Fn() + Send + Sync + 'static {
        let arrivals = Arc::clone(self);
        move || arrivals.raise()
    }
}

impl PartitionQueues {
    /// Moves the records of `task`'s input partitions to queues of their own. A partition
    /// librdkafka does not know keeps going to the consumer's queue.
    pub(crate) fn split(&mut self, consumer: &Arc<BaseConsumer<GroupContext>>, task: &Task) {
        let partition = crate::runtime::shared::partition_id(task.id.partition);
        let queues = task
            .topics
            .iter()
            .filter_map(|input| consumer.split_partition_queue(input, partition))
            .map(|mut queue| {
                queue.set_nonempty_callback(self.arrived.callback());
                queue
            })
            .collect();
        self.queues.insert(task.id, (task.generation, queues));
    }

    /// Makes what arrives on the consumer's own queue (records of partitions not split,
    /// rebalances, errors) wake a poll that waits while every queue is empty.
    pub(crate) fn watch_consumer(&self, consumer: &mut BaseConsumer<GroupContext>) {
        consumer.set_nonempty_callback(self.arrived.callback());
    }

    /// Drops the queues of tasks no longer open here.
    fn follow(&mut self, tasks: &BTreeMap<TaskId, Task>) {
        self.queues
            .retain(|&id, (generation, _)| still_open(tasks, id, *generation));
    }
}

/// Whether task `id` open here is the one of `generation`.
fn still_open(tasks: &BTreeMap<TaskId, Task>, id: TaskId, generation: u64) -> bool {
    tasks
        .get(&id)
        .is_some_and(|task| task.generation == generation)
}

/// One task's share of a batch: its records (with their input topic index and offset), and
/// whether its wall-clock punctuators are looked at.
struct Work<'a, 'm, P> {
    task: &'a mut Task,
    processor: &'a mut P,
    records: Option<&'a mut VecDeque<(usize, u64, &'m BorrowedMessage<'m>)>>,
    wall_clock: Option<i64>,
}

impl<P> Work<'_, '_, P> {
    fn len(&self) -> usize {
        self.records.as_ref().map_or(0, |records| records.len())
    }
}

/// What one thread did with its share of a batch.
#[derive(Default)]
struct Done {
    processed: usize,
    /// How long the thread took for it.
    busy: Duration,
    outputs: Vec<Output>,
    /// The tasks whose processor failed: each stopped at the failure, the others went on.
    failures: Vec<Failure>,
}

/// A batch's records not processed yet, by task partition, in order.
type Pending<'a> = BTreeMap<TaskId, VecDeque<(usize, u64, &'a BorrowedMessage<'a>)>>;

impl Application {
    /// Serves rebalances and processes one batch of up to `max_poll_records` records, waiting
    /// up to `timeout` for the first, each with the processor `pool` keeps for its task, on
    /// up to `stream_threads` threads; starts the tasks restored meanwhile, calls the
    /// punctuators that came due, and commits when the commit interval has passed. A task
    /// whose store's buffer fills stops at that record: every task commits, then the batch
    /// goes on. Returns the number of records processed.
    ///
    /// # Errors
    /// As [`poll`](Application::poll); when processors fail on several threads, one of their
    /// errors. The other tasks' work in the batch is kept.
    pub fn poll_tasks<P: Processor + Send>(
        &mut self,
        timeout: Duration,
        pool: &mut ProcessorPool<'_, P>,
    ) -> Result<usize> {
        let polled = self.poll_batch_once(timeout, pool);
        self.after_poll(polled)
    }

    fn poll_batch_once<P: Processor + Send>(
        &mut self,
        timeout: Duration,
        pool: &mut ProcessorPool<'_, P>,
    ) -> Result<usize> {
        if self.closed {
            return Err(Error::Closed);
        }
        let threaded = self.shared.config.stream_threads > 1;
        let (consumer, queues) = (&self.consumer, &mut self.queues);
        let waiting = self.shared.finish_restores(consumer, &mut |task| {
            if threaded {
                queues.split(consumer, task);
            }
        })?;
        // A restored task whose partitions librdkafka does not fetch yet is looked at again
        // after a short wait, not a whole `timeout`.
        let timeout = if waiting {
            timeout.min(IDLE_WAIT)
        } else {
            timeout
        };
        self.queues.follow(&self.shared.tasks.lock());
        let batch = poll_batch(&self.consumer, &self.queues, &self.shared, timeout);
        if let Some(err) = self.shared.error.lock().take() {
            return Err(err);
        }
        revive_if_outputs_lost(&self.consumer, &self.shared);
        let mut pending: Pending<'_> = BTreeMap::new();
        for message in &batch {
            if let Some((id, topic, offset)) = locate(&self.shared, message) {
                pending
                    .entry(id)
                    .or_default()
                    .push_back((topic, offset, message));
            }
        }
        let mut wall_clock =
            (self.last_wall_clock.elapsed() >= WALL_CLOCK_CHECK_INTERVAL).then(wall_clock_ms);
        if wall_clock.is_some() {
            self.last_wall_clock = Instant::now();
        }
        let mut processed = 0;
        loop {
            let done = process_round(&self.shared, &mut pending, pool, wall_clock.take());
            let mut failures = Vec::new();
            {
                let mut outputs = self.shared.outputs.lock();
                for done in done {
                    processed += done.processed;
                    outputs.pending().extend(done.outputs);
                    failures.extend(done.failures);
                }
            }
            let mut first_error = None;
            for failure in failures {
                // A task that goes on past its failed record takes the rest of its records
                // in the next round; a rewound task's come again from the consumer; a failed
                // one's wait for its close.
                let id = failure.task;
                match self.handle_failure(failure) {
                    Ok(false) => {}
                    Ok(true) => {
                        pending.remove(&id);
                    }
                    Err(err) => {
                        pending.remove(&id);
                        first_error = first_error.or(Some(err));
                    }
                }
            }
            self.send_outputs()?;
            if let Some(err) = first_error {
                return Err(err);
            }
            if pending.is_empty() {
                break;
            }
            if self.shared.any_task_needs_commit() {
                // A task stopped at a full buffer, with records of the batch left.
                commit_tasks(&self.consumer, &self.shared)?;
                self.last_commit = Instant::now();
            }
        }
        drop(batch);
        self.maintain(self.shared.any_task_needs_commit())?;
        Ok(processed)
    }
}

/// The longest one wait lasts while every queue is empty (should an arrival not wake it),
/// or while tasks restore (a finished restore does not wake it).
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// Polls a batch: up to `max_poll_records` records from each task's own queue, then from
/// the consumer's queue (which also serves rebalances), up to `max_poll_records` times the
/// stream threads in all; waits up to `timeout` for a first record, then only takes what is
/// fetched already. Stops after a rebalance, whose callbacks ran inside the consumer's poll,
/// and once a restore finished, for its task to be taken in without waiting out `timeout`.
fn poll_batch<'c>(
    consumer: &'c BaseConsumer<GroupContext>,
    queues: &'c PartitionQueues,
    shared: &Shared,
    timeout: Duration,
) -> Vec<BorrowedMessage<'c>> {
    let rebalances = shared.rebalances.load(Ordering::Relaxed);
    let finished = shared.restores_finished.load(Ordering::Acquire);
    let interrupted = || {
        shared.rebalances.load(Ordering::Relaxed) != rebalances
            || shared.restores_finished.load(Ordering::Acquire) != finished
    };
    let each = shared.config.max_poll_records;
    let max = each.saturating_mul(shared.config.stream_threads);
    let deadline = Instant::now() + timeout;
    let mut batch = Vec::new();
    loop {
        queues.arrived.lower();
        let start = queues.start.get() % queues.queues.len().max(1);
        queues.start.set(start + 1);
        let tasks = queues.queues.values().cycle().skip(start);
        for queue in tasks
            .take(queues.queues.len())
            .flat_map(|(_, queues)| queues)
        {
            let taken = batch.len();
            while batch.len() - taken < each && batch.len() < max {
                if !take(queue.poll(Duration::ZERO), &mut batch, shared) {
                    break;
                }
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let restoring = !shared.restorer.lock().tasks.is_empty();
        let mut wait = match (batch.is_empty(), queues.queues.is_empty(), restoring) {
            (false, _, _) => Duration::ZERO,
            (true, true, false) => remaining,
            (true, true, true) => remaining.min(IDLE_WAIT),
            (true, false, _) => {
                queues.arrived.wait(remaining.min(IDLE_WAIT));
                Duration::ZERO
            }
        };
        while batch.len() < max && !interrupted() {
            if !take(consumer.poll(past_whole_ms(wait)), &mut batch, shared) {
                break;
            }
            wait = Duration::ZERO;
        }
        if !batch.is_empty() || interrupted() || Instant::now() >= deadline {
            return batch;
        }
    }
}

/// Adds what a poll returned to `batch`; false when it returned nothing (or an error, which
/// `shared` answers: see [`Shared::consumer_error`]).
fn take<'c>(
    polled: Option<KafkaResult<BorrowedMessage<'c>>>,
    batch: &mut Vec<BorrowedMessage<'c>>,
    shared: &Shared,
) -> bool {
    match polled {
        None => false,
        Some(Ok(message)) => {
            batch.push(message);
            true
        }
        Some(Err(KafkaError::PartitionEOF(_))) => true,
        Some(Err(err)) => {
            shared.consumer_error(err);
            false
        }
    }
}

/// Processes the records of `pending`, each task's up to the first that fills a store's
/// buffer (the rest stays in `pending`), and, when `wall_clock` is set, every task's
/// wall-clock punctuators due then; each task on one of up to `stream_threads` threads.
/// Records of tasks not open here (revoked meanwhile) are dropped.
fn process_round<P: Processor + Send>(
    shared: &Shared,
    pending: &mut Pending<'_>,
    pool: &mut ProcessorPool<'_, P>,
    wall_clock: Option<i64>,
) -> Vec<Done> {
    let mut tasks = shared.tasks.lock();
    pending.retain(|id, _| tasks.get(id).is_some_and(|task| !task.is_poisoned()));
    let needed: Vec<TaskId> = if wall_clock.is_some() {
        // Idle tasks start too, so that their wall-clock punctuators run without records.
        tasks.keys().copied().collect()
    } else {
        pending.keys().copied().collect()
    };
    let unsupplied = pool.follow(&mut tasks, needed.into_iter());
    let mut work = Vec::new();
    // The three maps are sorted by task; the pool's keys and the pending ones are among the
    // tasks'.
    let mut processors = pool.processors.iter_mut().peekable();
    let mut records_of = pending.iter_mut().peekable();
    for (id, task) in tasks.iter_mut() {
        let records = records_of
            .next_if(|(other, _)| *other == id)
            .map(|(_, records)| records);
        let Some((_, (_, processor))) = processors.next_if(|(other, _)| *other == id) else {
            continue;
        };
        if records.is_none() && wall_clock.is_none() {
            continue;
        }
        work.push(Work {
            task,
            processor,
            records,
            wall_clock,
        });
    }
    let records: usize = work.iter().map(Work::len).sum();
    let threads = if pool.cost.worth_spreading(records) {
        shared.config.stream_threads
    } else {
        1
    };
    let mut done = run_spread(work, threads);
    pool.cost.observe(
        done.iter().map(|done| done.busy).sum(),
        done.iter().map(|done| done.processed).sum(),
    );
    pending.retain(|_, records| !records.is_empty());
    if let Some(first) = done.first_mut() {
        first.failures.extend(unsupplied);
    }
    done
}

/// The least work, in time, that a round spreads over several threads: below it, starting
/// and joining a thread costs more than the thread brings (a thread waking on a busy machine
/// may wait for a CPU for longer).
const SPREAD_MIN_WORK: Duration = Duration::from_millis(1);

/// What processing a record costs, averaged over the last rounds.
#[derive(Default)]
struct RecordCost {
    /// Thread time per record; none before the first round with records.
    per_record: Option<Duration>,
}

impl RecordCost {
    /// Whether `records` take long enough on one thread to be worth spreading; until a
    /// round was measured, they are.
    fn worth_spreading(&self, records: usize) -> bool {
        self.per_record.is_none_or(|per_record| {
            per_record.saturating_mul(u32::try_from(records).unwrap_or(u32::MAX)) >= SPREAD_MIN_WORK
        })
    }

    /// Takes in a round whose threads processed `records` in `busy` together.
    fn observe(&mut self, busy: Duration, records: usize) {
        let Ok(records) = u32::try_from(records) else {
            return;
        };
        if records == 0 {
            return;
        }
        let sample = busy / records;
        self.per_record = Some(match self.per_record {
            None => sample,
            Some(before) => (before * 3 + sample) / 4,
        });
    }
}

/// Spreads `work` over up to `threads` threads, the largest shares first, each to the
/// thread with the fewest records so far; the first thread is the caller's, which also takes
/// the tasks without records (their wall-clock punctuators).
fn run_spread<P: Processor + Send>(work: Vec<Work<'_, '_, P>>, threads: usize) -> Vec<Done> {
    let (mut busy, idle): (Vec<_>, Vec<_>) = work.into_iter().partition(|work| work.len() > 0);
    let threads = threads.clamp(1, busy.len().max(1));
    if threads == 1 {
        busy.extend(idle);
        return vec![run_work(busy)];
    }
    busy.sort_by_key(|work| std::cmp::Reverse(work.len()));
    let mut shares: Vec<(usize, Vec<Work<'_, '_, P>>)> =
        (0..threads).map(|_| (0, Vec::new())).collect();
    for item in busy {
        if let Some(lightest) = shares.iter_mut().min_by_key(|(records, _)| *records) {
            lightest.0 += item.len();
            lightest.1.push(item);
        }
    }
    if let Some((_, first)) = shares.first_mut() {
        first.extend(idle);
    }
    std::thread::scope(|scope| {
        let mut shares = shares.into_iter().map(|(_, share)| share);
        let first = shares.next().unwrap_or_default();
        let others: Vec<_> = shares
            .filter(|share| !share.is_empty())
            .map(|share| scope.spawn(move || run_work(share)))
            .collect();
        let mut done = vec![run_work(first)];
        for handle in others {
            match handle.join() {
                Ok(result) => done.push(result),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    })
}

/// Processes each task's records in order with its processor, up to the first record after
/// which a store of the task needs a commit, then (when due) its wall-clock punctuators. A
/// task whose processor fails stops there, its records after the failed one left for the
/// next round; the others go on.
fn run_work<P: Processor>(work: Vec<Work<'_, '_, P>>) -> Done {
    let started = Instant::now();
    let mut done = Done::default();
    for Work {
        task,
        processor,
        records,
        wall_clock,
    } in work
    {
        let partition = task.id.partition;
        if let Some(records) = records {
            while let Some((topic, offset, message)) = records.pop_front() {
                match process_record(
                    task,
                    (partition, topic, offset),
                    message,
                    &mut done.outputs,
                    processor,
                ) {
                    Ok((processed, full)) => {
                        done.processed += usize::from(processed);
                        if full {
                            break;
                        }
                    }
                    Err(failure) => {
                        done.failures.push(*failure);
                        break;
                    }
                }
            }
        }
        if let Some(now) = wall_clock
            && let Err(failure) = punctuate_task_wall_clock(task, &mut done.outputs, processor, now)
        {
            done.failures.push(*failure);
        }
    }
    done.busy = started.elapsed();
    done
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::RecordCost;

    #[test]
    fn a_round_spreads_only_when_its_records_take_a_millisecond_or_more() {
        let mut cost = RecordCost::default();
        assert!(cost.worth_spreading(1), "unmeasured records are spread");
        // 0.5 us a record: 2 000 records are a millisecond.
        cost.observe(Duration::from_micros(500), 1000);
        assert!(!cost.worth_spreading(1999));
        assert!(cost.worth_spreading(2000));
        // Records that become heavier move the average up: spread sooner.
        for _ in 0..20 {
            cost.observe(Duration::from_millis(40), 1000);
        }
        assert!(cost.worth_spreading(26), "{:?}", cost.per_record);
        assert!(!cost.worth_spreading(24), "{:?}", cost.per_record);
        // A round without records changes nothing.
        let before = cost.per_record;
        cost.observe(Duration::from_secs(1), 0);
        assert_eq!(cost.per_record, before);
    }
}
