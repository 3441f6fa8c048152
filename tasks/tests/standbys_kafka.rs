//! Standby copies against the real broker: a new copy's first catch-up, a full restore of a
//! big changelog that lasts longer than `max.poll.interval.ms`, runs off the poll loop, so it
//! causes no rebalance, the instance keeps processing its own task meanwhile, and the copy
//! ends equal to its changelog.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use statestore_changelog::{
    CHECKPOINT_FILE, Changelog, KafkaConfig, KafkaLog, NoopRestoreListener, RestoreListener,
    TopicPartition, read_checkpoint,
};
use statestore_tasks::{Application, ProcessorPool, TaskEvent, TaskEventKind, TasksConfig};
use support::*;

/// Distinct keys in the big task's changelog; `STATESTORE_STANDBY_KEYS` changes it.
fn keys() -> u64 {
    std::env::var("STATESTORE_STANDBY_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// The group consumer's `max.poll.interval.ms` in the test: the new standby's first catch-up
/// must last longer.
const MAX_POLL_INTERVAL_MS: u64 = 3_000;

/// An application instance polling on a thread of its own, noting what it owns, keeps copies
/// of and processed, and when each of its task events came.
struct Instance {
    stop: Arc<AtomicBool>,
    processed: Arc<AtomicU64>,
    tasks: Arc<Mutex<Vec<u32>>>,
    standbys: Arc<Mutex<Vec<u32>>>,
    events: Arc<Mutex<Vec<(Instant, TaskEvent)>>>,
    handle: JoinHandle<store_api::Result<()>>,
}

impl Instance {
    /// Starts an instance reporting its restores and standby catch-ups to `listener` and
    /// counting the records it processes in `processed`.
    fn start(
        config: TasksConfig,
        listener: Box<dyn RestoreListener + Send>,
        processed: Arc<AtomicU64>,
    ) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let standbys = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::new(Mutex::new(Vec::new()));
        let (stop2, processed2) = (stop.clone(), processed.clone());
        let (tasks2, standbys2, events2) = (tasks.clone(), standbys.clone(), events.clone());
        let handle = thread::spawn(move || {
            let mut app = Application::with_listener(config, listener)?;
            let mut pool = ProcessorPool::new(|_| count_word);
            let note = |app: &Application| {
                let now = Instant::now();
                events2
                    .lock()
                    .extend(app.take_events().into_iter().map(|e| (now, e)));
            };
            while !stop2.load(Ordering::Relaxed) {
                let records = app.poll_tasks(Duration::from_millis(50), &mut pool)?;
                processed2.fetch_add(records as u64, Ordering::Relaxed);
                *tasks2.lock() = app.active_tasks().iter().map(|t| t.partition).collect();
                *standbys2.lock() = app.standby_tasks().iter().map(|t| t.partition).collect();
                note(&app);
            }
            app.close()?;
            note(&app);
            Ok(())
        });
        Instance {
            stop,
            processed,
            tasks,
            standbys,
            events,
            handle,
        }
    }

    fn processed(&self) -> u64 {
        self.processed.load(Ordering::Relaxed)
    }

    /// The events that took a task away from this instance after `since`.
    fn taken_away_after(&self, since: Instant) -> Vec<TaskEvent> {
        self.events
            .lock()
            .iter()
            .filter(|(at, e)| {
                *at > since
                    && matches!(
                        e.kind,
                        TaskEventKind::Revoked | TaskEventKind::Lost | TaskEventKind::Fenced
                    )
            })
            .map(|(_, e)| e.clone())
            .collect()
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .expect("instance thread")
            .expect("instance ran");
    }
}

/// When the first catch-up with records to replay of changelog partition `partition` began
/// and ended, with the instance's processed records at each.
#[derive(Default)]
struct CatchUp {
    start: Option<(Instant, u64)>,
    end: Option<(Instant, u64)>,
}

/// A restore listener noting the [`CatchUp`] of one changelog partition.
struct Watch {
    partition: u32,
    processed: Arc<AtomicU64>,
    seen: Arc<Mutex<CatchUp>>,
}

impl RestoreListener for Watch {
    fn on_start(&mut self, _topic: &str, partition: u32, start: u64, end: u64) {
        let mut seen = self.seen.lock();
        if partition == self.partition && end > start && seen.start.is_none() {
            seen.start = Some((Instant::now(), self.processed.load(Ordering::Relaxed)));
        }
    }

    fn on_end(&mut self, _topic: &str, partition: u32, _total: u64) {
        let mut seen = self.seen.lock();
        if partition == self.partition && seen.start.is_some() && seen.end.is_none() {
            seen.end = Some((Instant::now(), self.processed.load(Ordering::Relaxed)));
        }
    }
}

fn producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

/// Sends `key` (also the value) to `partition` of `topic`, waiting while the queue is full.
fn send(producer: &BaseProducer, topic: &str, partition: i32, key: &str) {
    let mut record = BaseRecord::to(topic)
        .key(key.as_bytes())
        .payload(key.as_bytes())
        .partition(partition);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, back)) => {
                producer.poll(Duration::from_millis(10));
                record = back;
            }
        }
    }
}

/// Produces a record to each of partitions 0 and 1 of `topic` every 20 ms until `stop`;
/// returns how many it produced.
fn trickle(bootstrap: String, topic: String, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    thread::spawn(move || {
        let producer = producer(&bootstrap);
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            for partition in 0..2 {
                send(&producer, &topic, partition, &format!("live{}", sent % 50));
                sent += 1;
            }
            producer.poll(Duration::from_millis(20));
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
        sent
    })
}

fn end_offset(bootstrap: &str, app: &str, partition: u32) -> u64 {
    let config = KafkaConfig {
        bootstrap_servers: bootstrap.to_owned(),
        ..KafkaConfig::default()
    };
    let log = KafkaLog::open_topic(config, &format!("{app}-counts-changelog"), partition)
        .expect("changelog");
    log.end_offset().expect("end offset")
}

/// The checkpoint of task `0_<partition>`'s `counts` store in `state_dir`.
fn checkpoint_of(state_dir: &Path, app: &str, partition: u32) -> Option<u64> {
    let file = state_dir
        .join(app)
        .join(format!("0_{partition}"))
        .join(CHECKPOINT_FILE);
    let entries = read_checkpoint(&file).ok()??;
    let key = TopicPartition::new(format!("{app}-counts-changelog"), partition);
    entries.get(&key).copied()
}

/// The content of task `0_<partition>`'s `counts` store in `state_dir` (closed).
fn store_content(state_dir: &Path, app: &str, partition: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let dir = state_dir
        .join(app)
        .join(format!("0_{partition}"))
        .join("redb/counts");
    let store = statestore::open("redb", &dir, &serde_json::Value::Null).expect("store");
    store
        .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
        .expect("scan")
        .map(|item| item.expect("entry"))
        .collect()
}

/// A owns both tasks of a 2-partition input, task 0 with a big changelog. B joins with one
/// standby replica and takes task 1; its copy of task 0 restores the whole changelog in a
/// catch-up longer than `max.poll.interval.ms`. Neither instance loses or gives up a task
/// meanwhile (no rebalance), B keeps processing task 1 during the catch-up, and the copy ends
/// equal to the changelog.
#[test]
fn a_standby_catch_up_longer_than_max_poll_interval_causes_no_rebalance() {
    let Some(bootstrap) =
        bootstrap("a_standby_catch_up_longer_than_max_poll_interval_causes_no_rebalance")
    else {
        return;
    };
    let (app, input) = (unique("standby-slow"), unique("standby-slow-input"));
    create_topic(&bootstrap, &input, 2);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let config = |dir: &Path, replicas: u32| TasksConfig {
        num_standby_replicas: replicas,
        max_poll_interval_ms: MAX_POLL_INTERVAL_MS,
        session_timeout_ms: 2_000,
        heartbeat_interval_ms: 500,
        ..support::config(&bootstrap, &app, &input, dir)
    };

    // Task 0's changelog: one update per distinct key.
    let started = Instant::now();
    let keys = keys();
    let big = producer(&bootstrap);
    for i in 0..keys {
        send(&big, &input, 0, &format!("key{i:08}"));
    }
    big.flush(Duration::from_secs(60)).expect("flush");
    let a = Instance::start(
        config(dir_a.path(), 0),
        Box::new(NoopRestoreListener),
        Arc::default(),
    );
    assert!(
        wait_until(Duration::from_secs(300), || a.processed() >= keys),
        "A processed {} of {keys}",
        a.processed()
    );
    let counted = started.elapsed();

    // B sorts after A by member id (its client id holds a later time), so the range assignor
    // gives it task 1 and leaves task 0 with A.
    let stop_trickle = Arc::new(AtomicBool::new(false));
    let trickling = trickle(bootstrap.clone(), input.clone(), stop_trickle.clone());
    let seen = Arc::new(Mutex::new(CatchUp::default()));
    let processed_b = Arc::new(AtomicU64::new(0));
    let watch = Watch {
        partition: 0,
        processed: processed_b.clone(),
        seen: seen.clone(),
    };
    let b = Instance::start(config(dir_b.path(), 1), Box::new(watch), processed_b);
    let split = || *a.tasks.lock() == [0] && *b.tasks.lock() == [1];
    assert!(
        wait_until(Duration::from_secs(60), split),
        "A owns {:?}, B owns {:?}",
        a.tasks.lock(),
        b.tasks.lock()
    );
    let caught_up = || seen.lock().end.is_some();
    assert!(
        wait_until(Duration::from_secs(600), caught_up),
        "B's standby of task 0 never caught up (standbys {:?})",
        b.standbys.lock()
    );
    // A little longer: a member past max.poll.interval.ms is noticed at its next poll.
    thread::sleep(Duration::from_millis(2 * MAX_POLL_INTERVAL_MS));
    stop_trickle.store(true, Ordering::Relaxed);
    let trickled = trickling.join().expect("producer thread");

    let (start, end) = {
        let seen = seen.lock();
        (seen.start.expect("start"), seen.end.expect("end"))
    };
    let catch_up = end.0 - start.0;
    println!(
        "{keys} keys: produced and counted by A in {counted:?}; B's standby catch-up took \
         {catch_up:?}, during which B processed {} records ({trickled} produced in all)",
        end.1 - start.1
    );
    assert!(
        catch_up > Duration::from_millis(MAX_POLL_INTERVAL_MS),
        "the catch-up took only {catch_up:?}: raise STATESTORE_STANDBY_KEYS"
    );
    // From the catch-up's start: the initial assignment's revocations (A gave task 1 up)
    // came before the group was stable, which the standby's placement waits for; a loss
    // the catch-up causes is noted after it.
    let (a_lost, b_lost) = (a.taken_away_after(start.0), b.taken_away_after(start.0));
    assert!(
        a_lost.is_empty() && b_lost.is_empty(),
        "tasks taken away during the catch-up: A {a_lost:?}, B {b_lost:?}"
    );
    assert!(
        end.1 > start.1,
        "B processed nothing during its standby's catch-up"
    );
    assert!(
        split(),
        "A owns {:?}, B owns {:?}",
        a.tasks.lock(),
        b.tasks.lock()
    );
    assert_eq!(*b.standbys.lock(), [0]);

    // The copy follows the changelog to its end once the input stops.
    let current = || {
        checkpoint_of(dir_b.path(), &app, 0).map(|c| c + 1) == Some(end_offset(&bootstrap, &app, 0))
    };
    assert!(
        wait_until(Duration::from_secs(60), current),
        "B's copy of task 0 is at {:?}, its changelog ends at {}",
        checkpoint_of(dir_b.path(), &app, 0),
        end_offset(&bootstrap, &app, 0)
    );
    b.stop();
    a.stop();
    // Up to the copy's checkpoint: A may have committed the last trickled records since.
    let checkpoint = checkpoint_of(dir_b.path(), &app, 0).expect("B's checkpoint of task 0");
    let topic = format!("{app}-counts-changelog");
    let (model, _) = replay_from(&bootstrap, &topic, 0, None, Some(checkpoint + 1));
    assert!(
        model.len() as u64 > keys,
        "{} keys in the changelog",
        model.len()
    );
    let copy = store_content(dir_b.path(), &app, 0);
    // The first differences only: a diff of every key says nothing more.
    let differing: Vec<_> = copy
        .iter()
        .filter(|&(key, value)| model.get(key) != Some(value))
        .map(|(key, value)| (String::from_utf8_lossy(key), value, model.get(key)))
        .take(5)
        .collect();
    assert!(
        copy == model,
        "B's standby copy of task 0 differs from its changelog: {} keys, {} in the changelog; \
         first differences (key, copy, changelog): {differing:?}",
        copy.len(),
        model.len()
    );
}
