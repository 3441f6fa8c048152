//! Tasks against the real broker: instances of one application in one consumer group share the
//! partitions of a 4-partition input topic (or two co-partitioned ones), tasks move on join and
//! leave, counts stay exact,
//! every store equals a replay of its changelog, a task that comes back restores only the
//! changelog tail past its checkpoint, and bad input gives clear errors.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::Mutex;
use statestore_changelog::{
    CHECKPOINT_FILE, Changelog, KafkaConfig, KafkaLog, TaskId, TopicPartition, read_checkpoint,
};
use statestore_tasks::metrics::{
    COMMIT_SECONDS, LAG_RECORDS, RECORDS_TOTAL, RESTORED_RECORDS_TOTAL,
};
use statestore_tasks::{Application, AssignmentStrategy, TaskEvent, TaskEventKind, TasksConfig};
use store_api::ErrorKind;
use support::*;

const PARTITIONS: u32 = 4;
/// Records per produced round; `STATESTORE_TASKS_RECORDS` scales it.
fn round() -> u64 {
    std::env::var("STATESTORE_TASKS_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// An application instance running on a thread of its own.
struct Instance {
    stop: Arc<AtomicBool>,
    processed: Arc<AtomicU64>,
    tasks: Arc<Mutex<Vec<TaskId>>>,
    standbys: Arc<Mutex<Vec<TaskId>>>,
    handle: JoinHandle<store_api::Result<Vec<TaskEvent>>>,
}

impl Instance {
    fn start(config: TasksConfig) -> Instance {
        let listener = Box::new(statestore_changelog::NoopRestoreListener);
        Instance::start_with(config, listener, Arc::new(AtomicU64::new(0)))
    }

    /// [`start`](Instance::start), telling `listener` how each restore goes and counting
    /// the records it processes in `processed`.
    fn start_with(
        config: TasksConfig,
        listener: Box<dyn statestore_changelog::RestoreListener + Send>,
        processed: Arc<AtomicU64>,
    ) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let standbys = Arc::new(Mutex::new(Vec::new()));
        let (stop2, processed2, tasks2) = (stop.clone(), processed.clone(), tasks.clone());
        let standbys2 = standbys.clone();
        let handle = thread::spawn(move || {
            let threaded = config.stream_threads > 1;
            let mut app = Application::with_listener(config, listener)?;
            let mut pool = statestore_tasks::ProcessorPool::new(|_| count_word);
            let mut events = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                if threaded {
                    let records = app.poll_tasks(Duration::from_millis(50), &mut pool)?;
                    processed2.fetch_add(records as u64, Ordering::Relaxed);
                } else if app.poll(Duration::from_millis(50), &mut count_word)? {
                    processed2.fetch_add(1, Ordering::Relaxed);
                }
                *tasks2.lock() = app.active_tasks();
                *standbys2.lock() = app.standby_tasks();
                events.extend(app.take_events());
            }
            app.close()?;
            events.extend(app.take_events());
            Ok(events)
        });
        Instance {
            stop,
            processed,
            tasks,
            standbys,
            handle,
        }
    }

    /// Waits up to a minute until the instance has processed `total` records.
    fn wait_processed(&self, total: u64) {
        let processed = || self.processed.load(Ordering::Relaxed);
        assert!(
            wait_until(Duration::from_secs(60), || processed() == total),
            "processed {} of {total}",
            processed()
        );
    }

    fn owned(&self) -> usize {
        self.tasks.lock().len()
    }

    fn stop(self) -> Vec<TaskEvent> {
        self.finish().expect("instance ran")
    }

    /// Stops the instance and returns how its run ended.
    fn finish(self) -> store_api::Result<Vec<TaskEvent>> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("instance thread")
    }

    fn ended(&self) -> bool {
        self.handle.is_finished()
    }
}

/// A fresh application on a fresh 4-partition input topic holding one round of records, and
/// two state directories.
struct Setup {
    app: String,
    input: String,
    dir_a: tempfile::TempDir,
    dir_b: tempfile::TempDir,
    /// Records per round.
    n: u64,
    /// The counts of the first round.
    expected: BTreeMap<String, u64>,
}

impl Setup {
    fn new(bootstrap: &str, name: &str) -> Setup {
        let (app, input) = (unique(name), unique(&format!("{name}-input")));
        create_topic(bootstrap, &input, 4);
        let n = round();
        let expected = produce(bootstrap, &input, PARTITIONS, 0..n);
        Setup {
            app,
            input,
            dir_a: tempfile::tempdir().expect("dir"),
            dir_b: tempfile::tempdir().expect("dir"),
            n,
            expected,
        }
    }
}

fn end_offsets(bootstrap: &str, app: &str) -> Vec<u64> {
    let topic = format!("{app}-counts-changelog");
    (0..PARTITIONS)
        .map(|p| {
            let config = KafkaConfig {
                bootstrap_servers: bootstrap.to_owned(),
                ..KafkaConfig::default()
            };
            let log = KafkaLog::open_topic(config, &topic, p).expect("changelog");
            log.end_offset().expect("end offset")
        })
        .collect()
}

/// Every store of `state_dir` equals a replay of its changelog partition.
fn assert_stores_equal_changelog(bootstrap: &str, app: &str, state_dir: &Path, partitions: &[u32]) {
    for &p in partitions {
        let dir = state_dir
            .join(app)
            .join(format!("0_{p}"))
            .join("redb/counts");
        let store = statestore::open("redb", &dir, &serde_json::Value::Null).expect("store");
        let held: BTreeMap<Vec<u8>, Vec<u8>> = store
            .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
            .expect("scan")
            .map(|item| item.expect("entry"))
            .collect();
        let (model, _) = replay(bootstrap, &format!("{app}-counts-changelog"), p);
        assert_eq!(
            held, model,
            "store of task 0_{p} differs from its changelog"
        );
    }
}

/// Waits up to a minute until A and B, sharing four tasks, own two each.
fn wait_split(a: &Instance, b: &Instance) {
    assert!(
        wait_until(Duration::from_secs(60), || a.owned() == 2 && b.owned() == 2),
        "after B joined: A owns {}, B owns {}",
        a.owned(),
        b.owned()
    );
}

/// Waits up to 30 s until A, left alone, owns all four tasks.
fn wait_owns_all(a: &Instance) {
    assert!(
        wait_until(Duration::from_secs(30), || a.owned() == 4),
        "after B left, A owns {}",
        a.owned()
    );
}

/// The records the instances counted in `done` processed together.
fn total(done: &[Arc<AtomicU64>]) -> u64 {
    done.iter().map(|d| d.load(Ordering::Relaxed)).sum()
}

/// Waits up to a minute until the instances counted in `done` processed `expected` together.
fn wait_total(done: &[Arc<AtomicU64>], expected: u64) {
    assert!(
        wait_until(Duration::from_secs(60), || total(done) == expected),
        "processed {} of {expected}",
        total(done)
    );
}

fn sum(map: &BTreeMap<String, u64>) -> u64 {
    map.values().sum()
}

fn merge(into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>) {
    for (word, count) in from {
        *into.entry(word).or_insert(0) += count;
    }
}

#[test]
fn two_instances_share_tasks_join_and_leave_with_exact_counts() {
    let Some(bootstrap) = bootstrap("two_instances_share_tasks_join_and_leave_with_exact_counts")
    else {
        return;
    };
    let (a_events, b_events) = join_and_leave(&bootstrap, AssignmentStrategy::Range, 1);
    // The eager rebalances of B's join and leave revoked all of A's tasks; those assigned
    // back to A in the same rebalance were resumed, their stores kept open (with the exact
    // counts and the stores equal to their changelogs above: nothing lost or counted twice),
    // and only the tasks that had been B's were opened again.
    let b_tasks: std::collections::BTreeSet<u32> = b_events
        .iter()
        .filter(|e| matches!(e.kind, TaskEventKind::Assigned { .. }))
        .map(|e| e.task.partition)
        .collect();
    let mut opened = std::collections::BTreeSet::new();
    let mut resumed = 0;
    for event in &a_events {
        let p = event.task.partition;
        if let TaskEventKind::Assigned {
            resumed: was_resumed,
            restored,
            ..
        } = &event.kind
        {
            let expected = opened.contains(&p) && !b_tasks.contains(&p);
            assert_eq!(*was_resumed, expected, "{event:?} in {a_events:?}");
            if *was_resumed {
                assert!(restored.iter().all(|(_, o)| o.records == 0), "{event:?}");
                resumed += 1;
            }
            opened.insert(p);
        }
    }
    // Two through B's join and two through its leave.
    assert!(resumed >= 4, "{a_events:?}");
}

/// As above with two processing threads per instance, each task's records in a queue of its
/// own, under incremental (cooperative) rebalances that keep the tasks that do not move.
#[test]
fn two_threaded_instances_join_and_leave_cooperatively_with_exact_counts() {
    let Some(bootstrap) =
        bootstrap("two_threaded_instances_join_and_leave_cooperatively_with_exact_counts")
    else {
        return;
    };
    join_and_leave(&bootstrap, AssignmentStrategy::CooperativeSticky, 2);
}

#[test]
fn cooperative_sticky_assignment_moves_only_the_moving_tasks() {
    let Some(bootstrap) = bootstrap("cooperative_sticky_assignment_moves_only_the_moving_tasks")
    else {
        return;
    };
    let (a_events, _) = join_and_leave(&bootstrap, AssignmentStrategy::CooperativeSticky, 1);
    // A kept two tasks open through B's join and leave: only the two that moved were revoked.
    let revoked = a_events
        .iter()
        .filter(|e| e.kind == TaskEventKind::Revoked)
        .count();
    assert_eq!(revoked, 2 + 4, "{a_events:?}");
}

/// A counts a round alone, B joins and they split the tasks, B leaves and A takes them back;
/// counts are exact and stores equal their changelogs. Returns A's and B's task events.
fn join_and_leave(
    bootstrap: &str,
    strategy: AssignmentStrategy,
    stream_threads: usize,
) -> (Vec<TaskEvent>, Vec<TaskEvent>) {
    let bootstrap = bootstrap.to_owned();
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-join");
    let topic = format!("{app}-counts-changelog");
    let config = |dir: &Path| TasksConfig {
        assignment_strategy: strategy,
        stream_threads,
        ..config(&bootstrap, &app, &input, dir)
    };

    let a = Instance::start(config(dir_a.path()));
    a.wait_processed(n);
    assert_eq!(a.owned(), 4);

    let b = Instance::start(config(dir_b.path()));
    wait_split(&a, &b);
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, n..2 * n),
    );
    let done = [a.processed.clone(), b.processed.clone()];
    wait_total(&done, 2 * n);
    let b_tasks: Vec<u32> = b.tasks.lock().iter().map(|t| t.partition).collect();
    let b_events = b.stop();
    let after_leave = end_offsets(&bootstrap, &app);
    assert!(b_events.iter().any(|e| e.kind == TaskEventKind::Revoked));

    wait_owns_all(&a);
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, 2 * n..3 * n),
    );
    wait_total(&done, 3 * n);
    let a_events = a.stop();

    assert_eq!(sum(&expected), 3 * n);
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
    assert_stores_equal_changelog(&bootstrap, &app, dir_a.path(), &[0, 1, 2, 3]);

    // A had B's tasks before B joined; taking them back, it restored only what B appended.
    for &p in &b_tasks {
        let last = a_events
            .iter()
            .rev()
            .find_map(|e| match &e.kind {
                TaskEventKind::Assigned { restored, .. } if e.task.partition == p => {
                    Some(restored.clone())
                }
                _ => None,
            })
            .expect("A took the task back");
        let (_, outcome) = &last[0];
        // Restored from A's own checkpoint (not from the start) to the end of the log.
        assert!(
            !outcome.wiped && outcome.from > 0,
            "task 0_{p}: {outcome:?}"
        );
        // Up to the commit the restore ended at: A's fence commit follows it, maybe before
        // `after_leave` was read.
        let to = outcome.checkpoint.map(|end| end + 1);
        let (_, tail) = replay_from(&bootstrap, &topic, p, Some(outcome.from), to);
        assert_eq!(outcome.records, tail, "task 0_{p}: {outcome:?}");
        assert!(outcome.from < after_leave[p as usize]);
    }
    (a_events, b_events)
}

/// Two co-partitioned input topics: a task owns partition `p` of both, through a join, a leave
/// and a restart; counts stay exact, each store keeps a position per topic, and the restarted
/// instance resumes each topic where it stopped.
#[test]
fn several_input_topics_are_co_partitioned_and_counted_exactly() {
    let Some(bootstrap) = bootstrap("several_input_topics_are_co_partitioned_and_counted_exactly")
    else {
        return;
    };
    let Setup {
        app,
        input: clicks,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-two-inputs");
    let views = unique("tasks-two-inputs-views");
    create_topic(&bootstrap, &views, 4);
    // The second topic's records start elsewhere in the word sequence, so the two differ.
    merge(
        &mut expected,
        produce(&bootstrap, &views, PARTITIONS, 5 * n..6 * n),
    );
    let config = |dir: &Path| TasksConfig {
        input_topics: vec![clicks.clone(), views.clone()],
        ..config(&bootstrap, &app, &clicks, dir)
    };

    let a = Instance::start(config(dir_a.path()));
    a.wait_processed(2 * n);
    assert_eq!(a.owned(), 4);
    let b = Instance::start(config(dir_b.path()));
    wait_split(&a, &b);
    merge(
        &mut expected,
        produce(&bootstrap, &clicks, PARTITIONS, n..2 * n),
    );
    merge(
        &mut expected,
        produce(&bootstrap, &views, PARTITIONS, 6 * n..7 * n),
    );
    let done = [a.processed.clone(), b.processed.clone()];
    wait_total(&done, 4 * n);
    b.stop();
    wait_owns_all(&a);
    a.stop();

    // A comes back after more records reached one topic only: it resumes each topic at its
    // own position, so it processes exactly the new records.
    merge(
        &mut expected,
        produce(&bootstrap, &views, PARTITIONS, 7 * n..8 * n),
    );
    let a = Instance::start(config(dir_a.path()));
    a.wait_processed(n);
    let events = a.stop();
    assert_eq!(total(&done), 4 * n);
    let mut resumed: BTreeMap<String, u64> = BTreeMap::new();
    let mut assigned = 0;
    for event in &events {
        if let TaskEventKind::Assigned {
            next_offset,
            next_offsets,
            ..
        } = &event.kind
        {
            assigned += 1;
            assert_eq!(next_offset.as_ref(), next_offsets.get(&clicks), "{event:?}");
            for (topic, next) in next_offsets {
                *resumed.entry(topic.clone()).or_insert(0) += next;
            }
        }
    }
    assert_eq!(assigned, 4, "{events:?}");
    // Each topic resumed past every record processed before the restart, and no further.
    assert_eq!(resumed.get(&clicks), Some(&(2 * n)), "{resumed:?}");
    assert_eq!(resumed.get(&views), Some(&(2 * n)), "{resumed:?}");

    assert_eq!(sum(&expected), 5 * n);
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
    assert_stores_equal_changelog(&bootstrap, &app, dir_a.path(), &[0, 1, 2, 3]);
}

#[test]
fn a_task_that_comes_back_restores_only_the_tail_past_its_checkpoint() {
    let Some(bootstrap) =
        bootstrap("a_task_that_comes_back_restores_only_the_tail_past_its_checkpoint")
    else {
        return;
    };
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-tail");
    let run_until = |dir: &Path, total: u64| {
        let inst = Instance::start(config(&bootstrap, &app, &input, dir));
        inst.wait_processed(total);
        inst.stop()
    };
    run_until(dir_a.path(), n);
    let after_a = end_offsets(&bootstrap, &app);
    let topic = format!("{app}-counts-changelog");
    let updates_a: Vec<u64> = (0..PARTITIONS)
        .map(|p| replay(&bootstrap, &topic, p).1)
        .collect();

    // B, on another machine, restores everything, then moves the tasks on.
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, n..2 * n),
    );
    let b_events = run_until(dir_b.path(), n);
    for event in &b_events {
        if let TaskEventKind::Assigned { restored, .. } = &event.kind {
            let p = event.task.partition as usize;
            assert_eq!(
                restored[0].1.records, updates_a[p],
                "B restores all of {event:?}"
            );
        }
    }
    let updates_b: Vec<u64> = (0..PARTITIONS)
        .map(|p| replay(&bootstrap, &topic, p).1)
        .collect();

    // A comes back: its checkpoints cover what it wrote, so it restores only B's records.
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, 2 * n..3 * n),
    );
    let a_events = run_until(dir_a.path(), n);
    let mut seen = 0;
    for event in &a_events {
        if let TaskEventKind::Assigned {
            restored,
            next_offset,
            ..
        } = &event.kind
        {
            let p = event.task.partition as usize;
            let outcome = restored[0].1;
            assert!(!outcome.wiped, "{event:?}");
            assert_eq!(outcome.from, after_a[p], "{event:?}");
            assert_eq!(outcome.records, updates_b[p] - updates_a[p], "{event:?}");
            assert!(next_offset.is_some(), "{event:?}");
            seen += 1;
        }
    }
    assert_eq!(seen, 4);
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
    assert_stores_equal_changelog(&bootstrap, &app, dir_a.path(), &[0, 1, 2, 3]);
}

#[test]
fn bad_input_gives_clear_errors() {
    let invalid = TasksConfig {
        application_id: "word count".into(),
        input_topics: vec!["in".into()],
        stores: vec![statestore_tasks::StoreSpec::new("counts", "memory")],
        ..TasksConfig::default()
    };
    let err = Application::new(invalid)
        .err()
        .expect("invalid application id");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("\"word count\""), "{err}");

    let dir = tempfile::tempdir().expect("dir");
    let down = TasksConfig {
        // Port 1 on loopback: nothing listens.
        request_timeout_ms: 2_000,
        ..config("127.0.0.1:1", &unique("tasks-down"), "in", dir.path())
    };
    let err = Application::new(down).err().expect("no broker");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");

    let Some(bootstrap) = bootstrap("bad_input_gives_clear_errors") else {
        return;
    };
    let app = unique("tasks-bad");
    let missing = unique("tasks-missing");
    let err = Application::new(config(&bootstrap, &app, &missing, dir.path()))
        .err()
        .expect("missing input topic");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains(&missing), "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");

    let input = unique("tasks-bad-input");
    create_topic(&bootstrap, &input, 4);
    create_changelog(&bootstrap, &app, 2);
    let err = Application::new(config(&bootstrap, &app, &input, dir.path()))
        .err()
        .expect("partition-count mismatch");
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(
        text.contains("has 2 partitions") && text.contains("has 4"),
        "{text}"
    );

    // Input topics that are not co-partitioned: both named, with their counts.
    let other = unique("tasks-bad-other");
    create_topic(&bootstrap, &other, 3);
    let two = TasksConfig {
        input_topics: vec![input.clone(), other.clone()],
        ..config(&bootstrap, &unique("tasks-bad-two"), &input, dir.path())
    };
    let err = Application::new(two).err().expect("not co-partitioned");
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(
        text.contains(&format!("{other} has 3 partitions"))
            && text.contains(&format!("{input} has 4")),
        "{text}"
    );
}

fn task_dirs(state_dir: &Path, app: &str) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = std::fs::read_dir(state_dir.join(app))
        .expect("app dir")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort();
    ids
}

/// The checkpoint of task `0_<partition>`'s `counts` store in `state_dir`.
fn checkpoint_of(state_dir: &Path, app: &str, partition: u32) -> Option<u64> {
    let file = state_dir
        .join(app)
        .join(format!("0_{partition}"))
        .join(CHECKPOINT_FILE);
    let entries = read_checkpoint(&file).expect("checkpoint")?;
    let key = TopicPartition::new(format!("{app}-counts-changelog"), partition);
    entries.get(&key).copied()
}

/// With one standby replica, each of two instances keeps a copy of the other's tasks (never of
/// its own), the copies follow the changelog while the owner processes, cleanup keeps them, and
/// when the owner leaves, the promoted copies restore nothing: they were at the changelog's end.
#[test]
fn a_promoted_standby_restores_only_the_tail_and_cleanup_keeps_assigned_tasks() {
    let Some(bootstrap) =
        bootstrap("a_promoted_standby_restores_only_the_tail_and_cleanup_keeps_assigned_tasks")
    else {
        return;
    };
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-standby");
    let with_standby = |dir: &Path| TasksConfig {
        num_standby_replicas: 1,
        state_cleanup_delay_ms: 1_000,
        ..config(&bootstrap, &app, &input, dir)
    };

    let a = Instance::start(with_standby(dir_a.path()));
    a.wait_processed(n);
    let b = Instance::start(with_standby(dir_b.path()));
    let split = || {
        let (ta, tb) = (a.tasks.lock().clone(), b.tasks.lock().clone());
        ta.len() == 2 && tb.len() == 2 && *a.standbys.lock() == tb && *b.standbys.lock() == ta
    };
    assert!(
        wait_until(Duration::from_secs(60), split),
        "A: {:?} standby {:?}; B: {:?} standby {:?}",
        a.tasks.lock(),
        a.standbys.lock(),
        b.tasks.lock(),
        b.standbys.lock()
    );
    // Cleanup: A gave two tasks to B and keeps a standby copy of them, so nothing is removed.
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(task_dirs(dir_a.path(), &app).len(), 4);

    // A second round while the copies exist: they must follow the changelog, not only restore
    // once when they open.
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, n..2 * n),
    );
    assert!(
        wait_until(Duration::from_secs(60), || changelog_counts(
            &bootstrap, &app, PARTITIONS
        ) == expected),
        "the second round was not counted"
    );
    assert!(split(), "the assignment moved during the second round");
    let a_tasks: Vec<u32> = a.tasks.lock().iter().map(|t| t.partition).collect();
    let ends = end_offsets(&bootstrap, &app);
    let current = || {
        a_tasks
            .iter()
            .all(|&p| checkpoint_of(dir_b.path(), &app, p).map(|c| c + 1) == Some(ends[p as usize]))
    };
    assert!(
        wait_until(Duration::from_secs(30), current),
        "B's copies of {a_tasks:?} are at {:?}, the changelogs end at {ends:?}",
        a_tasks
            .iter()
            .map(|&p| checkpoint_of(dir_b.path(), &app, p))
            .collect::<Vec<_>>()
    );

    // A leaves; B takes its tasks over from the copies: the tail past them is empty.
    a.stop();
    assert!(wait_until(Duration::from_secs(30), || b.owned() == 4));
    let b_events = b.stop();
    for &p in &a_tasks {
        let restored = b_events
            .iter()
            .rev()
            .find_map(|e| match &e.kind {
                TaskEventKind::Assigned { restored, .. } if e.task.partition == p => {
                    Some(restored[0].1)
                }
                _ => None,
            })
            .expect("B took A's task");
        assert!(!restored.wiped, "task 0_{p}: {restored:?}");
        assert_eq!(restored.from, ends[p as usize], "task 0_{p}: {restored:?}");
        assert_eq!(restored.records, 0, "task 0_{p}: {restored:?}");
        assert_eq!(restored.checkpoint.map(|c| c + 1), Some(ends[p as usize]));
    }
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
    assert_stores_equal_changelog(&bootstrap, &app, dir_b.path(), &[0, 1, 2, 3]);
}

/// Each task's metrics reach an installed recorder, labelled by application and task: the
/// records it processed, its commits' latency, what each store restored, and its lag once it
/// caught up (from librdkafka's statistics).
#[test]
fn task_metrics_count_records_commits_restores_and_lag() {
    let Some(bootstrap) = bootstrap("task_metrics_count_records_commits_restores_and_lag") else {
        return;
    };
    prometheus();
    let Setup {
        app,
        input,
        dir_a,
        n,
        ..
    } = Setup::new(&bootstrap, "tasks-metrics");
    let mut config = config(&bootstrap, &app, &input, dir_a.path());
    config
        .properties
        .insert("statistics.interval.ms".into(), "200".into());
    // A slow processor, so the statistics see records waiting.
    let (stop, processed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let (stop2, processed2) = (Arc::clone(&stop), Arc::clone(&processed));
    let run = thread::spawn(move || -> store_api::Result<()> {
        let mut app = Application::new(config)?;
        let mut slow = |ctx: &mut statestore_tasks::ProcessorContext<'_>| {
            thread::sleep(Duration::from_millis(5));
            count_word(ctx)
        };
        while !stop2.load(Ordering::Relaxed) {
            if app.poll(Duration::from_millis(50), &mut slow)? {
                processed2.fetch_add(1, Ordering::Relaxed);
            }
        }
        app.close()
    });
    let lag = |p| metric(&app, LAG_RECORDS, p, "");
    assert!(
        wait_until(Duration::from_secs(60), || (0..PARTITIONS)
            .any(|p| lag(p).is_some_and(|lag| lag > 0.0))),
        "no lag seen while {} of {n} records were processed",
        processed.load(Ordering::Relaxed)
    );
    assert!(wait_until(Duration::from_secs(60), || processed
        .load(Ordering::Relaxed)
        == n));
    let caught_up = || (0..PARTITIONS).all(|p| lag(p) == Some(0.0));
    assert!(
        wait_until(Duration::from_secs(30), caught_up),
        "lag: {:?}",
        (0..PARTITIONS).map(lag).collect::<Vec<_>>()
    );
    let records: f64 = (0..PARTITIONS)
        .map(|p| metric(&app, RECORDS_TOTAL, p, "").expect("records"))
        .sum();
    assert_eq!(records, n as f64);
    let commit_count = |p| metric(&app, &format!("{COMMIT_SECONDS}_count"), p, "");
    assert!(
        wait_until(Duration::from_secs(30), || (0..PARTITIONS)
            .all(|p| commit_count(p).is_some_and(|count| count >= 1.0))),
        "commits: {:?}",
        (0..PARTITIONS).map(commit_count).collect::<Vec<_>>()
    );
    for p in 0..PARTITIONS {
        let restored = metric(&app, RESTORED_RECORDS_TOTAL, p, "store=\"counts\"");
        assert_eq!(restored, Some(0.0), "task 0_{p}");
    }
    stop.store(true, Ordering::Relaxed);
    run.join().expect("instance thread").expect("instance ran");
}

#[test]
fn cleanup_after_the_delay_removes_only_unassigned_task_directories() {
    let Some(bootstrap) =
        bootstrap("cleanup_after_the_delay_removes_only_unassigned_task_directories")
    else {
        return;
    };
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        ..
    } = Setup::new(&bootstrap, "tasks-cleanup");
    let quick = |dir: &Path| TasksConfig {
        state_cleanup_delay_ms: 1_000,
        ..config(&bootstrap, &app, &input, dir)
    };
    let a = Instance::start(quick(dir_a.path()));
    a.wait_processed(n);
    assert_eq!(task_dirs(dir_a.path(), &app).len(), 4);
    let b = Instance::start(quick(dir_b.path()));
    assert!(wait_until(Duration::from_secs(60), || a.owned() == 2 && b.owned() == 2));
    let kept = a.tasks.lock().clone();
    assert!(
        wait_until(Duration::from_secs(10), || task_dirs(dir_a.path(), &app)
            == kept),
        "A keeps {:?}, its directories are {:?}",
        kept,
        task_dirs(dir_a.path(), &app)
    );
    // Still A's after the removal: the directories of assigned (open) tasks are never removed.
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(task_dirs(dir_a.path(), &app), *a.tasks.lock());
    b.stop();
    a.stop();
}

/// The broker dies (SIGKILL) while a second instance joins and the group rebalances, and
/// comes back 5 s later. Each instance either rides it out or stops with a clear error (a
/// timeout or a Kafka error naming what it was doing); one started again on the same state
/// directory resumes, and every count is exact: nothing committed is lost or applied twice.
#[test]
fn broker_down_during_a_rebalance_loses_nothing_committed() {
    if bootstrap("broker_down_during_a_rebalance_loses_nothing_committed").is_none() {
        return;
    }
    let broker = statestore_test_support::Cluster::start(1);
    let bootstrap = broker.bootstrap().to_owned();
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-down");
    let quick = |dir: &Path| TasksConfig {
        request_timeout_ms: 5_000,
        ..config(&bootstrap, &app, &input, dir)
    };
    let a = Instance::start(quick(dir_a.path()));
    a.wait_processed(n);
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, n..2 * n),
    );
    let b = Instance::start(quick(dir_b.path()));
    // B's join revokes A's tasks; the broker dies before the group settles.
    assert!(wait_until(Duration::from_secs(30), || a.owned() < 4));
    broker.kill(1);
    std::thread::sleep(Duration::from_secs(5));
    broker.restart(1);

    // Each instance rides the outage out or stops with a clear error, now or later (a request
    // the recovering broker times out); one that stops is started again on its directory.
    let mut running = vec![(Some(a), dir_a.path()), (Some(b), dir_b.path())];
    let mut restart_stopped = || {
        for (slot, dir) in &mut running {
            if slot.as_ref().is_some_and(Instance::ended) {
                let stopped = slot.take().expect("checked above");
                let err = stopped.finish().expect_err("an instance that ended failed");
                assert_clear_kafka_error(&err);
                *slot = Some(Instance::start(quick(dir)));
            }
        }
    };
    std::thread::sleep(Duration::from_secs(2));
    restart_stopped();
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, 2 * n..3 * n),
    );
    let complete = wait_until(Duration::from_secs(120), || {
        restart_stopped();
        changelog_counts(&bootstrap, &app, PARTITIONS) == expected
    });
    assert!(
        complete,
        "counts after the broker came back: {:?} of {}",
        sum(&changelog_counts(&bootstrap, &app, PARTITIONS)),
        3 * n
    );
    for instance in running.into_iter().filter_map(|(slot, _)| slot) {
        if let Err(err) = instance.finish() {
            assert_clear_kafka_error(&err);
        }
    }
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
}

/// An instance stopped by the broker's outage says so: a timeout or a Kafka error naming it.
fn assert_clear_kafka_error(err: &store_api::Error) {
    announce(&format!(
        "broker down during a rebalance: an instance stopped: {err}"
    ));
    assert!(
        matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Backend),
        "{err}"
    );
    assert!(err.to_string().contains("kafka"), "{err}");
}

/// An output the broker refuses: the commit fails, `poll` reports the error, and nothing of
/// the task is committed past the record that sent it: no changelog commit holds a position
/// beyond it, and an instance started afterwards processes it again.
#[test]
fn an_output_the_broker_refuses_stops_the_commits_before_it() {
    let Some(bootstrap) = bootstrap("an_output_the_broker_refuses_stops_the_commits_before_it")
    else {
        return;
    };
    let (app, input, output) = (
        unique("refused"),
        unique("refused-in"),
        unique("refused-out"),
    );
    create_topic(&bootstrap, &input, 1);
    create_topic(&bootstrap, &output, 1);
    produce(&bootstrap, &input, 1, 0..40);
    let dir = tempfile::tempdir().expect("dir");
    let mut config = config(&bootstrap, &app, &input, dir.path());
    config.commit_interval_ms = 100;
    let refused_at = 20;
    let mut app_instance = Application::new(config.clone()).expect("start");
    let mut process = |ctx: &mut statestore_tasks::ProcessorContext<'_>| {
        count_word(ctx)?;
        let topic = if ctx.offset() == refused_at {
            REFUSED_TOPIC
        } else {
            output.as_str()
        };
        ctx.send(topic, ctx.key().map(<[u8]>::to_vec).as_deref(), Some(b"1"));
        Ok(())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let err = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the refusal was never reported"
        );
        match app_instance.poll(Duration::from_millis(50), &mut process) {
            Ok(_) => {}
            Err(err) => break err,
        }
    };
    assert!(err.to_string().contains("output"), "{err}");
    drop(app_instance.close());
    drop(app_instance);
    let topic = format!("{app}-counts-changelog");
    let (model, _) = replay(&bootstrap, &topic, 0);
    let position = model
        .get(statestore_tasks::POSITION_KEY)
        .map_or(0, |bytes| {
            statestore_tasks::decode_task_position(bytes, std::slice::from_ref(&input))
                .expect("a task position")
                .0[0]
        });
    assert!(
        position <= refused_at,
        "the task committed position {position}, past the refused output of record {refused_at}"
    );
    // What was committed is exactly the records before the position.
    let counted: u64 = counts_of(&model).values().sum();
    assert_eq!(counted, position);
}

/// A topic name the broker refuses to create or write.
const REFUSED_TOPIC: &str = "statestore.refused.output.topic.with.a.name.too.long.for.kafka.\
    which.allows.at.most.249.characters.in.a.topic.name.so.this.one.goes.on.and.on.and.on.\
    and.on.and.on.and.on.and.on.and.on.and.on.and.on.and.on.and.on.and.on.and.on.and.on.and.\
    on.and.on.and.on.and.on.and.on";

/// A restore listener that sleeps in the first restore with records to replay, and notes how
/// many records the instance had processed when that restore began and ended.
struct SlowFirstRestore {
    slept: bool,
    pause: Duration,
    processed: Arc<AtomicU64>,
    at_start: Arc<AtomicU64>,
    at_end: Arc<AtomicU64>,
}

impl statestore_changelog::RestoreListener for SlowFirstRestore {
    fn on_start(&mut self, _topic: &str, _partition: u32, start: u64, end: u64) {
        if !self.slept && end > start {
            self.slept = true;
            self.at_start
                .store(self.processed.load(Ordering::Relaxed), Ordering::Relaxed);
            thread::sleep(self.pause);
            self.at_end
                .store(self.processed.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// A takes back, with cooperative rebalancing, the two tasks B had, and one of their restores
/// lasts longer than `max.poll.interval.ms`: the restore runs off the poll loop, so A keeps
/// processing its own two tasks meanwhile, and no rebalance follows (A loses no task).
#[test]
fn a_restore_longer_than_max_poll_interval_causes_no_rebalance() {
    let Some(bootstrap) = bootstrap("a_restore_longer_than_max_poll_interval_causes_no_rebalance")
    else {
        return;
    };
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-slow-restore");
    let config = |dir: &Path| TasksConfig {
        assignment_strategy: AssignmentStrategy::CooperativeSticky,
        max_poll_interval_ms: 8_000,
        ..config(&bootstrap, &app, &input, dir)
    };
    let processed = Arc::new(AtomicU64::new(0));
    let (at_start, at_end) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let listener = SlowFirstRestore {
        slept: false,
        pause: Duration::from_secs(12),
        processed: processed.clone(),
        at_start: at_start.clone(),
        at_end: at_end.clone(),
    };
    let a = Instance::start_with(config(dir_a.path()), Box::new(listener), processed.clone());
    let started = wait_until(Duration::from_secs(60), || {
        processed.load(Ordering::Relaxed) >= n || a.ended()
    });
    assert!(
        started && !a.ended(),
        "A: {:?}",
        a.ended().then(|| a.finish())
    );
    let b = Instance::start(config(dir_b.path()));
    assert!(
        wait_until(Duration::from_secs(60), || b.owned() == 2),
        "B never got two tasks"
    );
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, n..2 * n),
    );
    let done = [processed.clone(), b.processed.clone()];
    wait_total(&done, 2 * n);
    b.stop();
    // A restores B's two tasks (one of them slowly) while records arrive for all four.
    thread::sleep(Duration::from_secs(2));
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, 2 * n..3 * n),
    );
    wait_total(&done, 3 * n);
    let events = a.stop();
    assert!(
        at_end.load(Ordering::Relaxed) > at_start.load(Ordering::Relaxed),
        "A processed nothing during the slow restore ({} then {})",
        at_start.load(Ordering::Relaxed),
        at_end.load(Ordering::Relaxed)
    );
    let lost = events
        .iter()
        .filter(|e| matches!(e.kind, TaskEventKind::Lost | TaskEventKind::Fenced))
        .count();
    assert_eq!(lost, 0, "{events:?}");
    // Revoked: the two tasks B took, and the four closed at the end; nothing more.
    let revoked = events
        .iter()
        .filter(|e| e.kind == TaskEventKind::Revoked)
        .count();
    assert_eq!(revoked, 2 + 4, "{events:?}");
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
}

/// A restore listener that holds every restore with records to replay until `release` is
/// set, counting the restores it held.
struct HeldRestores {
    release: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
}

impl statestore_changelog::RestoreListener for HeldRestores {
    fn on_start(&mut self, _topic: &str, _partition: u32, start: u64, end: u64) {
        if end > start {
            self.held.fetch_add(1, Ordering::Relaxed);
            let released = wait_until(Duration::from_secs(180), || {
                self.release.load(Ordering::Relaxed)
            });
            assert!(released, "the test never released the restore");
        }
    }
}

/// A restores its four tasks, slowly; B joins meanwhile and takes two of them over, restores
/// them, fences their changelogs and processes. When A's restores end, A leaves the two it
/// lost to B: it closes them without fencing their changelogs, so B's tasks are never
/// fenced, B never drops one, and the counts are exact.
#[test]
fn a_task_revoked_while_it_restores_never_fences_its_new_owner() {
    let Some(bootstrap) = bootstrap("a_task_revoked_while_it_restores_never_fences_its_new_owner")
    else {
        return;
    };
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-revoked-restore");
    let config = |dir: &Path| TasksConfig {
        assignment_strategy: AssignmentStrategy::CooperativeSticky,
        ..config(&bootstrap, &app, &input, dir)
    };
    // Changelogs with something to restore: a first instance counts the first round.
    let first = Instance::start(config(dir_b.path()));
    first.wait_processed(n);
    first.stop();
    let (release, held) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let listener = HeldRestores {
        release: release.clone(),
        held: held.clone(),
    };
    let processed = Arc::new(AtomicU64::new(0));
    let a = Instance::start_with(config(dir_a.path()), Box::new(listener), processed);
    assert!(
        wait_until(Duration::from_secs(60), || held.load(Ordering::Relaxed) > 0),
        "A never restored"
    );
    let b = Instance::start(config(dir_b.path()));
    assert!(
        wait_until(Duration::from_secs(60), || b.owned() == 2),
        "B never got two tasks"
    );
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, n..2 * n),
    );
    // B processes its half of the second round while A's restores are held.
    assert!(
        wait_until(Duration::from_secs(60), || {
            b.processed.load(Ordering::Relaxed) > 0
        }),
        "B processed nothing"
    );
    release.store(true, Ordering::Relaxed);
    assert!(
        wait_until(Duration::from_secs(60), || a.owned() == 2),
        "A never took in its two tasks"
    );
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, 2 * n..3 * n),
    );
    wait_total(&[a.processed.clone(), b.processed.clone()], 2 * n);
    let b_events = b.stop();
    a.stop();
    let dropped: Vec<_> = b_events
        .iter()
        .filter(|e| matches!(e.kind, TaskEventKind::Lost | TaskEventKind::Fenced))
        .collect();
    assert!(dropped.is_empty(), "B lost tasks: {b_events:?}");
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
}

/// Two processing threads in one instance: tasks are processed at the same time on both, a
/// task's records reach only its own processor (made once per task) and in offset order, a
/// store that fills its buffer commits at that record although the batch goes on, and the
/// counts are exact with every store equal to its changelog.
#[test]
fn stream_threads_process_tasks_at_once_each_in_order_with_its_own_processor() {
    let Some(bootstrap) =
        bootstrap("stream_threads_process_tasks_at_once_each_in_order_with_its_own_processor")
    else {
        return;
    };
    prometheus();
    let Setup {
        app,
        input,
        dir_a,
        n,
        expected,
        ..
    } = Setup::new(&bootstrap, "tasks-threads");
    let mut config = TasksConfig {
        stream_threads: 2,
        ..config(&bootstrap, &app, &input, dir_a.path())
    };
    // Every record fills the buffer: its task commits before its next record.
    config.stores[0].logged.commit_bytes = 1;

    /// Two processors inside `process` at once, seen in the first records (each waits up to
    /// 20 ms for another, until one did or 500 waits passed).
    #[derive(Default)]
    struct Meeting {
        inside: std::sync::Mutex<usize>,
        changed: std::sync::Condvar,
        met: AtomicBool,
        waits: AtomicU64,
    }
    impl Meeting {
        fn attend(&self) {
            if self.met.load(Ordering::SeqCst) || self.waits.fetch_add(1, Ordering::SeqCst) >= 500 {
                return;
            }
            let mut inside = self.inside.lock().expect("lock");
            *inside += 1;
            self.changed.notify_all();
            let (mut inside, _) = self
                .changed
                .wait_timeout_while(inside, Duration::from_millis(20), |inside| *inside < 2)
                .expect("lock");
            if *inside >= 2 {
                self.met.store(true, Ordering::SeqCst);
            }
            *inside -= 1;
        }
    }
    let meeting = Arc::new(Meeting::default());
    let made = Arc::new(Mutex::new(Vec::new()));
    let (meeting2, made2) = (Arc::clone(&meeting), Arc::clone(&made));
    let run = thread::spawn(move || -> store_api::Result<u64> {
        let mut instance = Application::new(config)?;
        let mut pool = statestore_tasks::ProcessorPool::new(|task: TaskId| {
            made2.lock().push(task);
            let meeting = Arc::clone(&meeting2);
            let mut last: Option<u64> = None;
            move |ctx: &mut statestore_tasks::ProcessorContext<'_>| {
                if ctx.task_id() != task || last.is_some_and(|last| ctx.offset() <= last) {
                    return Err(store_api::Error::invalid(format!(
                        "the processor of {task} got offset {} of {} after {last:?}",
                        ctx.offset(),
                        ctx.task_id()
                    )));
                }
                last = Some(ctx.offset());
                meeting.attend();
                count_word(ctx)
            }
        });
        let mut processed = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while processed < n && std::time::Instant::now() < deadline {
            processed += instance.poll_tasks(Duration::from_millis(50), &mut pool)? as u64;
        }
        instance.close()?;
        Ok(processed)
    });
    let processed = run.join().expect("instance thread").expect("instance ran");
    assert_eq!(processed, n);
    assert!(
        meeting.met.load(Ordering::SeqCst),
        "no two tasks were processed at the same time"
    );
    let mut made = made.lock().clone();
    made.sort();
    assert_eq!(
        made,
        (0..PARTITIONS)
            .map(|p| TaskId::new(0, p))
            .collect::<Vec<_>>(),
        "one processor per task"
    );
    for p in 0..PARTITIONS {
        let records = metric(&app, RECORDS_TOTAL, p, "").expect("records");
        let commits = metric(&app, &format!("{COMMIT_SECONDS}_count"), p, "").expect("commits");
        assert!(
            commits >= records,
            "task 0_{p} committed {commits} times for {records} records, each filling its buffer"
        );
    }
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
    assert_stores_equal_changelog(&bootstrap, &app, dir_a.path(), &[0, 1, 2, 3]);
}

#[test]
fn a_task_on_a_new_machine_starts_from_its_snapshot() {
    let Some(bootstrap) = bootstrap("a_task_on_a_new_machine_starts_from_its_snapshot") else {
        return;
    };
    let Setup {
        app,
        input,
        dir_a,
        dir_b,
        n,
        mut expected,
    } = Setup::new(&bootstrap, "tasks-snap");
    let objects = tempfile::tempdir().expect("dir");
    let snapshotted = |dir: &Path| TasksConfig {
        snapshots: Some(statestore_changelog::SnapshotConfig {
            url: format!("file://{}", objects.path().display()),
            every_commits: 1,
            ..statestore_changelog::SnapshotConfig::default()
        }),
        ..config(&bootstrap, &app, &input, dir)
    };
    let run_until = |dir: &Path, total: u64| {
        let inst = Instance::start(snapshotted(dir));
        inst.wait_processed(total);
        inst.stop()
    };
    // A snapshots every store at every commit, its last one at its close.
    run_until(dir_a.path(), n);
    let after_a = end_offsets(&bootstrap, &app);

    // B, on another machine, loads the snapshots and replays nothing.
    merge(
        &mut expected,
        produce(&bootstrap, &input, PARTITIONS, n..2 * n),
    );
    let b_events = run_until(dir_b.path(), n);
    let mut seen = 0;
    for event in &b_events {
        if let TaskEventKind::Assigned { restored, .. } = &event.kind {
            let p = event.task.partition as usize;
            let outcome = restored[0].1;
            assert!(!outcome.wiped, "{event:?}");
            assert_eq!(outcome.from, after_a[p], "{event:?}");
            assert_eq!(outcome.records, 0, "{event:?}");
            seen += 1;
        }
    }
    assert_eq!(seen, 4);
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
    assert_stores_equal_changelog(&bootstrap, &app, dir_b.path(), &[0, 1, 2, 3]);
}
