//! Operator stores inside tasks, against the real broker: a processor holding a typed, a window,
//! a session, a versioned, an LRU and an unlogged store through typed handles; every logged
//! kind follows its task through standby promotion and a full restore on a new machine with
//! exact content, and the task's stream time comes back with it. Punctuation: stream-time
//! punctuators emit each closed window once, wall-clock ones run and cancel, and both resume
//! from the committed stream time after a restart.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use statestore_operator_stores::session::{SessionStore, SessionStoreConfig, SessionWindows};
use statestore_operator_stores::versioned::VersionedStore;
use statestore_operator_stores::window::{TimeWindows, WindowStore, WindowStoreConfig};
use statestore_operator_stores::{LruStore, TtlClock, TtlConfig, TtlStore, TypedStore};
use statestore_tasks::metrics::PUNCTUATE_SECONDS;
use statestore_tasks::{
    Application, Processor, ProcessorContext, Punctuation, PunctuationType, PunctuatorId, Queries,
    ReadFrom, ReadSource, StoreHandle, StoreKind, StoreSpec, TaskContext, TaskKv, TasksConfig,
};
use store_api::{KeyValueStore, Result};
use support::*;

const PARTITIONS: u32 = 4;
/// The first record's timestamp: a minute boundary two days ago (brokers refuse timestamps
/// far in the future, and delete old ones).
fn base() -> i64 {
    static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis();
        let ago = i64::try_from(now).expect("millis") - 2 * 86_400_000;
        ago - ago % MINUTE
    })
}
const MINUTE: i64 = 60_000;
const SESSION_GAP: i64 = 120_000;
const LRU_CAPACITY: usize = 10;
/// The TTL of store `last-seen`: a word's entry lives a minute of stream time after its last
/// record; each word comes back every 97 s, so about a third of them are expired at any time.
const LAST_SEEN_TTL: i64 = 60_000;
const OUTPUT_TOPIC_SUFFIX: &str = "closed-windows";
/// The key of records that only move a task's stream time.
const CLOSER: &[u8] = b"closer";

/// Record `i` is at `BASE + i` seconds.
fn ts(i: u64) -> i64 {
    base() + i64::try_from(i).expect("small") * 1_000
}

fn stores() -> Vec<StoreSpec> {
    let hour = 3_600_000;
    vec![
        StoreSpec::new("counts", "redb"),
        StoreSpec::new("per-minute", "redb").with_kind(StoreKind::Window {
            retention_ms: hour,
            segment_interval_ms: None,
            retain_duplicates: false,
        }),
        StoreSpec::new("sessions", "redb").with_kind(StoreKind::Session {
            retention_ms: hour,
            segment_interval_ms: None,
        }),
        StoreSpec::new("latest", "redb").with_kind(StoreKind::Versioned {
            history_retention_ms: hour,
        }),
        StoreSpec::new("recent", "redb").with_kind(StoreKind::Lru {
            capacity: LRU_CAPACITY,
        }),
        StoreSpec::new("last-seen", "redb").with_kind(StoreKind::Ttl {
            ttl_ms: LAST_SEEN_TTL,
            clock: TtlClock::StreamTime,
            sweep_interval_ms: None,
        }),
        StoreSpec::new("emitted", "redb"),
        StoreSpec::new("scratch", "redb").with_logging(false),
    ]
}

fn config(bootstrap: &str, app: &str, input: &str, dir: &Path, standbys: u32) -> TasksConfig {
    TasksConfig {
        stores: stores(),
        num_standby_replicas: standbys,
        ..support::config(bootstrap, app, input, dir)
    }
}

/// What the processors of every instance saw, for the assertions.
#[derive(Default)]
struct Seen {
    processed: AtomicU64,
    /// The stream time of each task when its processor's `init` ran, in order.
    init_stream_times: Mutex<Vec<(u32, Option<i64>)>>,
    /// Wall-clock punctuations, by task.
    wall_clock: Mutex<BTreeMap<u32, u64>>,
    /// Calls of `init`, by task.
    inits: Mutex<BTreeMap<u32, u64>>,
}

/// Counts each word in every kind of store; emits closed one-minute windows from a stream-time
/// punctuator, keeping in store `emitted` the window start it emitted up to.
struct WordStats {
    counts: StoreHandle<TypedStore<String, u64>>,
    windows: StoreHandle<WindowStore>,
    sessions: StoreHandle<SessionStore>,
    latest: StoreHandle<VersionedStore>,
    recent: StoreHandle<LruStore>,
    last_seen: StoreHandle<TtlStore>,
    emitted: StoreHandle<TaskKv>,
    scratch: StoreHandle<TaskKv>,
    output: String,
    seen: Arc<Seen>,
    wall_clock_ids: BTreeMap<u32, PunctuatorId>,
    /// Wall-clock calls since the task's `init`.
    ticks: BTreeMap<u32, u64>,
}

impl WordStats {
    fn new(config: &TasksConfig, output: &str, seen: Arc<Seen>) -> Result<Self> {
        Ok(WordStats {
            counts: StoreHandle::new(config, "counts")?,
            windows: StoreHandle::new(config, "per-minute")?,
            sessions: StoreHandle::new(config, "sessions")?,
            latest: StoreHandle::new(config, "latest")?,
            recent: StoreHandle::new(config, "recent")?,
            last_seen: StoreHandle::new(config, "last-seen")?,
            emitted: StoreHandle::new(config, "emitted")?,
            scratch: StoreHandle::new(config, "scratch")?,
            output: output.to_owned(),
            seen,
            wall_clock_ids: BTreeMap::new(),
            ticks: BTreeMap::new(),
        })
    }

    /// Emits every window that closed at `now` and was not emitted yet.
    fn emit_closed(&self, ctx: &TaskContext<'_>, now: i64) -> Result<()> {
        let emitted = ctx.store_of(&self.emitted)?;
        let from = emitted.get(b"upto")?.map_or(i64::MIN, |v| {
            i64::from_be_bytes(v.try_into().expect("8 bytes"))
        });
        // A one-minute window without grace closes when the stream time reaches its end.
        let last_closed = (now - MINUTE).div_euclid(MINUTE) * MINUTE;
        if last_closed < from {
            return Ok(());
        }
        let windows = ctx.store_of(&self.windows)?;
        for entry in windows.fetch_all(from, last_closed)? {
            let entry = entry?;
            let value = format!("{}:{}", entry.start, decode(&entry.value));
            ctx.send(&self.output, Some(&entry.key), Some(value.as_bytes()));
        }
        emitted.put(b"upto", &(last_closed + 1).to_be_bytes())
    }
}

impl Processor for WordStats {
    fn init(&mut self, ctx: &mut TaskContext<'_>) -> Result<()> {
        let task = ctx.task_id().partition;
        self.seen
            .init_stream_times
            .lock()
            .push((task, ctx.stream_time()));
        *self.seen.inits.lock().entry(task).or_insert(0) += 1;
        ctx.schedule("emit", Duration::from_secs(60), PunctuationType::StreamTime)?;
        let id = ctx.schedule(
            "tick",
            Duration::from_millis(100),
            PunctuationType::WallClockTime,
        )?;
        self.wall_clock_ids.insert(task, id);
        self.ticks.insert(task, 0);
        Ok(())
    }

    fn process(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        self.seen.processed.fetch_add(1, Ordering::Relaxed);
        if ctx.key() == Some(CLOSER) {
            // Only moves the stream time, which closes windows.
            return Ok(());
        }
        let word = String::from_utf8(ctx.key().unwrap_or_default().to_vec()).expect("utf-8");
        let ts = ctx.timestamp().expect("timestamped");
        let counts = ctx.store_of(&self.counts)?;
        let count = counts.get(&word)?.unwrap_or(0) + 1;
        counts.put(&word, &count)?;

        let tumbling = TimeWindows::tumbling(MINUTE)?;
        let windows = ctx.store_of(&self.windows)?;
        let _ = windows.aggregate(word.as_bytes(), ts, &tumbling, |old| {
            (old.map_or(0, decode) + 1).to_be_bytes().to_vec()
        })?;

        let gap = SessionWindows::with_gap(SESSION_GAP)?;
        let sessions = ctx.store_of(&self.sessions)?;
        let _ = sessions.merge_record(word.as_bytes(), ts, &gap, &1u64.to_be_bytes(), |a, b| {
            (decode(a) + decode(b)).to_be_bytes().to_vec()
        })?;

        let latest = ctx.store_of(&self.latest)?;
        let _ = latest.put(word.as_bytes(), &ctx.offset().to_be_bytes(), ts)?;
        ctx.store_of(&self.recent)?
            .put(word.as_bytes(), &ts.to_be_bytes())?;
        // The runtime moves the TTL store's stream time to the task's as the store is reached.
        ctx.store_of(&self.last_seen)?
            .put(word.as_bytes(), &ts.to_be_bytes())?;
        let scratch = ctx.store_of(&self.scratch)?;
        let seen = scratch.get(word.as_bytes())?.map_or(0, |v| decode(&v));
        scratch.put(word.as_bytes(), &(seen + 1).to_be_bytes())
    }

    fn punctuate(
        &mut self,
        ctx: &mut TaskContext<'_>,
        punctuation: &Punctuation<'_>,
    ) -> Result<()> {
        match punctuation.kind {
            PunctuationType::StreamTime => self.emit_closed(ctx, punctuation.time),
            PunctuationType::WallClockTime => {
                let task = ctx.task_id().partition;
                let mut calls = self.seen.wall_clock.lock();
                let calls = calls.entry(task).or_insert(0);
                *calls += 1;
                let mine = self.ticks.entry(task).or_insert(0);
                *mine += 1;
                // Three calls per opening of the task, then the punctuator cancels itself.
                if *mine == 3 {
                    let id = self.wall_clock_ids[&task];
                    assert!(ctx.cancel(id), "the punctuator was scheduled");
                    assert!(!ctx.cancel(id), "cancelled twice");
                }
                Ok(())
            }
        }
    }
}

/// An instance on a thread of its own.
struct Instance {
    stop: Arc<AtomicBool>,
    tasks: Arc<Mutex<usize>>,
    standbys: Arc<Mutex<usize>>,
    queries: Arc<Mutex<Option<Queries>>>,
    handle: JoinHandle<Result<()>>,
}

impl Instance {
    fn start(config: TasksConfig, output: &str, seen: &Arc<Seen>) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = Arc::new(Mutex::new(0));
        let standbys = Arc::new(Mutex::new(0));
        let (stop2, tasks2, standbys2) = (stop.clone(), tasks.clone(), standbys.clone());
        let mut processor = WordStats::new(&config, output, Arc::clone(seen)).expect("handles");
        let queries = Arc::new(Mutex::new(None));
        let queries2 = Arc::clone(&queries);
        let handle = thread::spawn(move || {
            let mut app = Application::new(config)?;
            *queries2.lock() = Some(app.queries());
            while !stop2.load(Ordering::Relaxed) {
                app.poll(Duration::from_millis(20), &mut processor)?;
                *tasks2.lock() = app.active_tasks().len();
                *standbys2.lock() = app.standby_tasks().len();
            }
            app.close()
        });
        Instance {
            stop,
            tasks,
            standbys,
            queries,
            handle,
        }
    }

    fn queries(&self) -> Queries {
        let queries = self.queries.lock().clone();
        queries.expect("the application started")
    }

    fn ended(&self) -> bool {
        self.handle.is_finished()
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .expect("instance thread")
            .expect("instance ran");
    }
}

/// Produces records `range` at [`ts`], keyed by [`word`], to their word's partition.
fn produce_timed(bootstrap: &str, topic: &str, range: std::ops::Range<u64>) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for i in range {
        let word = word(i);
        let record = BaseRecord::to(topic)
            .key(word.as_bytes())
            .payload(word.as_bytes())
            .partition(partition_of(&word, PARTITIONS))
            .timestamp(ts(i));
        producer.send(record).map_err(|(err, _)| err).expect("send");
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Sends one [`CLOSER`] record at `ts` to every partition.
fn produce_closers(bootstrap: &str, topic: &str, ts: i64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for p in 0..PARTITIONS {
        let record = BaseRecord::<[u8], [u8]>::to(topic)
            .key(CLOSER)
            .payload(CLOSER)
            .partition(p as i32)
            .timestamp(ts);
        producer.send(record).map_err(|(err, _)| err).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// The model of records `0..n`: per word its count, its per-minute counts, its timestamps,
/// and per partition the words in the order last used.
struct Model {
    counts: BTreeMap<String, u64>,
    windows: BTreeMap<(String, i64), u64>,
    times: BTreeMap<String, Vec<i64>>,
    recency: BTreeMap<u32, Vec<String>>,
    stream_time: BTreeMap<u32, i64>,
}

fn model(n: u64) -> Model {
    let mut m = Model {
        counts: BTreeMap::new(),
        windows: BTreeMap::new(),
        times: BTreeMap::new(),
        recency: BTreeMap::new(),
        stream_time: BTreeMap::new(),
    };
    for i in 0..n {
        let (word, ts) = (word(i), ts(i));
        let partition = u32::try_from(partition_of(&word, PARTITIONS)).expect("partition");
        *m.counts.entry(word.clone()).or_insert(0) += 1;
        *m.windows
            .entry((word.clone(), ts - ts % MINUTE))
            .or_insert(0) += 1;
        m.times.entry(word.clone()).or_default().push(ts);
        let recency = m.recency.entry(partition).or_default();
        recency.retain(|w| *w != word);
        recency.push(word);
        m.stream_time.insert(partition, ts);
    }
    m
}

/// Opens store `name` of task `0_<partition>` in `dir` as its engine holds it.
fn open_store(dir: &Path, app: &str, partition: u32, name: &str) -> Arc<dyn KeyValueStore> {
    let path = dir
        .join(app)
        .join(format!("0_{partition}"))
        .join("redb")
        .join(name);
    Arc::from(statestore::open("redb", &path, &serde_json::Value::Null).expect("store"))
}

/// A copy of `store` in memory without the keys the task and the changelog reserve (they start
/// with NUL), which a typed store over the raw engine would try to decode.
fn without_reserved(store: &Arc<dyn KeyValueStore>) -> Arc<dyn KeyValueStore> {
    let copy = statestore::memory::MemoryStore::new(statestore::memory::Config::default());
    for entry in store
        .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
        .expect("scan")
    {
        let (key, value) = entry.expect("entry");
        if !key.starts_with(b"\0") {
            copy.put(&key, &value).expect("copy");
        }
    }
    Arc::new(copy)
}

/// Checks every logged store of every task in `dir` against the model of records `0..n`.
fn assert_stores_exact(dir: &Path, app: &str, n: u64) {
    let m = model(n);
    let mut counts = BTreeMap::new();
    let mut windows = BTreeMap::new();
    for p in 0..PARTITIONS {
        let typed: TypedStore<String, u64> =
            TypedStore::new(without_reserved(&open_store(dir, app, p, "counts")));
        for entry in typed.all().expect("scan") {
            let (word, count) = entry.expect("entry");
            counts.insert(word, count);
        }
        let store = open_store(dir, app, p, "per-minute");
        let window = WindowStore::open(store, WindowStoreConfig::new(3_600_000)).expect("open");
        for entry in window.all().expect("scan") {
            let entry = entry.expect("entry");
            let word = String::from_utf8(entry.key).expect("utf-8");
            windows.insert((word, entry.start), decode(&entry.value));
        }
        let store = open_store(dir, app, p, "sessions");
        let sessions = SessionStore::open(store, SessionStoreConfig::new(3_600_000)).expect("open");
        let store = open_store(dir, app, p, "latest");
        let latest = VersionedStore::open(store, 3_600_000).expect("open");
        for (word, times) in m
            .times
            .iter()
            .filter(|(w, _)| partition_of(w, PARTITIONS) == p as i32)
        {
            // Records of one word are at most 97 s apart, under the gap: one session each.
            let found: Vec<_> = sessions
                .fetch(word.as_bytes())
                .expect("fetch")
                .map(|s| s.expect("session"))
                .map(|(s, v)| (s.start, s.end, decode(&v)))
                .collect();
            let expected = (times[0], times[times.len() - 1], times.len() as u64);
            assert_eq!(found, [expected], "sessions of {word}");
            let version = latest.get(word.as_bytes()).expect("get").expect("latest");
            assert_eq!(
                version.timestamp,
                times[times.len() - 1],
                "latest of {word}"
            );
        }
        let recent = open_store(dir, app, p, "recent");
        let held: BTreeSet<String> = recent
            .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
            .expect("scan")
            .map(|e| String::from_utf8(e.expect("entry").0).expect("utf-8"))
            .filter(|key| !key.starts_with('\0'))
            .collect();
        let order = &m.recency[&p];
        let wanted: BTreeSet<String> = order[order.len().saturating_sub(LRU_CAPACITY)..]
            .iter()
            .cloned()
            .collect();
        assert_eq!(held, wanted, "LRU store of task 0_{p}");

        // The TTL store holds each word of the task whose last record is under a minute of
        // stream time old, and its engine no other entry: expiries were logged tombstones.
        let config = TtlConfig::new(LAST_SEEN_TTL, TtlClock::StreamTime);
        let raw = open_store(dir, app, p, "last-seen");
        let last_seen = TtlStore::open(Arc::clone(&raw), config).expect("open");
        let now = m.stream_time[&p];
        assert_eq!(last_seen.now(), now, "TTL stream time of task 0_{p}");
        let live: BTreeMap<String, i64> = last_seen
            .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
            .expect("scan")
            .map(|e| e.expect("entry"))
            .map(|(k, v)| {
                let ts = i64::from_be_bytes(v.try_into().expect("8 bytes"));
                (String::from_utf8(k).expect("utf-8"), ts)
            })
            .collect();
        let wanted: BTreeMap<String, i64> = m
            .times
            .iter()
            .filter(|(w, _)| partition_of(w, PARTITIONS) == p as i32)
            .map(|(w, times)| (w.clone(), times[times.len() - 1]))
            .filter(|(_, last)| last + LAST_SEEN_TTL > now)
            .collect();
        assert!(
            wanted.len()
                < m.times
                    .iter()
                    .filter(|(w, _)| partition_of(w, PARTITIONS) == p as i32)
                    .count(),
            "some words of task 0_{p} expired"
        );
        assert_eq!(live, wanted, "TTL store of task 0_{p}");
        let stored = raw.prefix_scan(&[1]).expect("scan").count();
        assert_eq!(
            stored,
            wanted.len(),
            "expired entries deleted in the engine of task 0_{p}"
        );
    }
    assert_eq!(counts, m.counts, "typed counts");
    assert_eq!(windows, m.windows, "window counts");
}

/// The Prometheus recorder of this test binary, installed at the first call.
fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE.get_or_init(|| {
        // Histograms with buckets: their `_count` counts every sample.
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[0.001, 0.01, 0.1, 1.0])
            .expect("buckets")
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).expect("the only recorder");
        handle
    })
}

/// Whether `queries` answers, from `from`, each word's windows as the model of records `0..n`
/// holds them, for every partition, and where each partition was answered from.
fn windows_answered(
    queries: &Queries,
    handle: &StoreHandle<WindowStore>,
    from: ReadFrom,
    n: u64,
) -> std::result::Result<Vec<ReadSource>, String> {
    let m = model(n);
    let mut sources = Vec::new();
    for p in 0..PARTITIONS {
        let words = m
            .counts
            .keys()
            .filter(|w| partition_of(w, PARTITIONS) == p as i32);
        let mut source = None;
        for word in words {
            let (found, from_where) = queries
                .query(handle, p, from, |windows| {
                    windows
                        .fetch(word.as_bytes(), i64::MIN, i64::MAX)?
                        .map(|entry| entry.map(|(start, count)| (start, decode(&count))))
                        .collect::<Result<Vec<_>>>()
                })
                .map_err(|err| format!("partition {p}: {err}"))?;
            let wanted: Vec<(i64, u64)> = m
                .windows
                .iter()
                .filter(|((w, _), _)| w == word)
                .map(|((_, start), &count)| (*start, count))
                .collect();
            if found != wanted {
                return Err(format!(
                    "{word} in partition {p}: {found:?}, not {wanted:?}"
                ));
            }
            source = Some(from_where);
        }
        sources.extend(source);
    }
    Ok(sources)
}

/// Reads every record of `topic` (one partition): (key, value) in order.
fn read_topic(bootstrap: &str, topic: &str) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let (_, end) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let mut records = Vec::new();
    while (records.len() as i64) < end {
        match consumer.poll(Duration::from_secs(10)) {
            Some(Ok(message)) => records.push((
                String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
                String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
            )),
            Some(Err(err)) => panic!("reading {topic}: {err}"),
            None => panic!("reading {topic}: only {} of {end} records", records.len()),
        }
    }
    records
}

fn wait_processed(seen: &Seen, total: u64, instances: &mut [&mut Option<Instance>]) {
    let processed = || seen.processed.load(Ordering::Relaxed);
    let done = wait_until(Duration::from_secs(90), || {
        processed() >= total
            || instances
                .iter()
                .any(|i| i.as_ref().is_some_and(Instance::ended))
    });
    for instance in instances.iter_mut() {
        if instance.as_ref().is_some_and(Instance::ended) {
            let ended = instance.take().expect("ended").handle.join();
            panic!("an instance stopped: {ended:?}");
        }
    }
    assert!(done, "processed {} of {total}", processed());
}

fn wait_tasks(instance: &Instance, tasks: usize) {
    assert!(
        wait_until(Duration::from_secs(90), || *instance.tasks.lock() == tasks),
        "the instance owns {} tasks, not {tasks}",
        instance.tasks.lock()
    );
}

/// Each kind of store is restored, committed with the task's position, kept on a standby and
/// rebuilt whole on a new machine; a task's stream time comes back with its stores; closed
/// windows are emitted once each, and wall-clock punctuators run and cancel.
#[test]
fn every_store_kind_follows_its_task_and_punctuation_resumes_from_the_committed_stream_time() {
    let Some(bootstrap) = bootstrap("operator_tasks") else {
        return;
    };
    let app = unique("opstores");
    let input = unique("opstores-input");
    let output = format!("{app}-{OUTPUT_TOPIC_SUFFIX}");
    create_topic(&bootstrap, &input, PARTITIONS as i32);
    create_topic(&bootstrap, &output, 1);
    let (dir_a, dir_b, dir_c) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let n = 600;
    let seen = Arc::new(Seen::default());
    let prometheus = prometheus();

    // Two instances, each keeping a standby of the other's tasks.
    produce_timed(&bootstrap, &input, 0..n);
    let start = |dir: &Path, standbys| {
        let config = config(&bootstrap, &app, &input, dir, standbys);
        Some(Instance::start(config, &output, &seen))
    };
    let (mut a, mut b) = (start(dir_a.path(), 1), start(dir_b.path(), 1));
    wait_processed(&seen, n, &mut [&mut a, &mut b]);
    let a = a.expect("running");
    for instance in [&a, b.as_ref().expect("running")] {
        assert!(
            wait_until(Duration::from_secs(60), || *instance.standbys.lock() == 2),
            "each instance keeps standbys of the other's two tasks"
        );
    }
    // B answers window queries for every partition: its own from its active tasks, A's from
    // its standby copies once they caught up.
    let windows: StoreHandle<WindowStore> = StoreHandle::new(
        &config(&bootstrap, &app, &input, dir_b.path(), 1),
        "per-minute",
    )
    .expect("handle");
    let queries = b.as_ref().expect("running").queries();
    let mut last = Err(String::new());
    assert!(
        wait_until(Duration::from_secs(30), || {
            last = windows_answered(&queries, &windows, ReadFrom::ActiveOrStandby, n);
            last.is_ok()
        }),
        "{last:?}"
    );
    let sources = last.expect("answered");
    assert!(sources.contains(&ReadSource::Active), "{sources:?}");
    assert!(
        sources.iter().any(|s| matches!(s, ReadSource::Standby(_))),
        "{sources:?}"
    );
    // The byte-level queries read the TTL store as the TTL store: each word to its last
    // timestamp, never the stored envelope or the expiry index, from active and standby.
    for p in 0..PARTITIONS {
        let all = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
        // Each store's standby copy catches up on its own changelog: this one may still be
        // behind the window store's.
        let (mut entries, mut source) = (Vec::new(), None);
        assert!(
            wait_until(Duration::from_secs(30), || {
                let read = queries
                    .range("last-seen", p, all, false, ReadFrom::ActiveOrStandby)
                    .expect("a range of the TTL store");
                source = Some(read.source);
                entries = read.entries.map(|e| e.expect("entry")).collect();
                !entries.is_empty()
            }),
            "words of task 0_{p}"
        );
        for (key, value) in &entries {
            let word = String::from_utf8(key.clone()).expect("a word, not a stored key");
            assert_eq!(value.len(), 8, "the last timestamp of {word} ({source:?})");
            // A copy still catching up may have moved on (or expired the word) since.
            let one = queries
                .get_in_partition("last-seen", p, key, ReadFrom::ActiveOrStandby)
                .expect("a get of the TTL store");
            if let Some(value) = one.value {
                assert_eq!(value.len(), 8, "the last timestamp of {word}, got alone");
            }
        }
    }
    // A leaves: B promotes its standby copies of A's tasks.
    a.stop();
    wait_tasks(b.as_ref().expect("running"), PARTITIONS as usize);
    produce_timed(&bootstrap, &input, n..2 * n);
    wait_processed(&seen, 2 * n, &mut [&mut b]);
    b.expect("running").stop();
    let after_b = model(2 * n);
    assert_stores_exact(dir_b.path(), &app, 2 * n);

    // A new machine: every store rebuilt from its changelog; the stream time comes back.
    seen.init_stream_times.lock().clear();
    let mut c = start(dir_c.path(), 0);
    wait_tasks(c.as_ref().expect("running"), PARTITIONS as usize);
    // A record far ahead in each partition closes every window, and the stream-time
    // punctuation emits them.
    produce_closers(&bootstrap, &input, ts(10 * n));
    wait_processed(&seen, 2 * n + u64::from(PARTITIONS), &mut [&mut c]);
    thread::sleep(Duration::from_millis(500));
    let sources = windows_answered(
        &c.as_ref().expect("running").queries(),
        &windows,
        ReadFrom::Active,
        2 * n,
    )
    .expect("C answers from its active tasks");
    assert_eq!(sources, vec![ReadSource::Active; PARTITIONS as usize]);
    c.expect("running").stop();
    assert_stores_exact(dir_c.path(), &app, 2 * n);

    let inits = seen.init_stream_times.lock().clone();
    for p in 0..PARTITIONS {
        let times: Vec<_> = inits
            .iter()
            .filter(|(t, _)| *t == p)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            times,
            [Some(after_b.stream_time[&p])],
            "task 0_{p} resumes from its committed stream time"
        );
    }

    // Each closed window once, with its exact count.
    let mut emitted: BTreeMap<(String, i64), Vec<u64>> = BTreeMap::new();
    for (word, value) in read_topic(&bootstrap, &output) {
        let (start, count) = value.split_once(':').expect("start:count");
        emitted
            .entry((word, start.parse().expect("start")))
            .or_default()
            .push(count.parse().expect("count"));
    }
    let exact: BTreeMap<(String, i64), Vec<u64>> = after_b
        .windows
        .iter()
        .map(|(window, &count)| (window.clone(), vec![count]))
        .collect();
    assert_eq!(emitted, exact, "every closed window emitted once, exact");

    // Wall-clock punctuators ran at most three times per opening of a task, then cancelled;
    // C held every task long enough for all three.
    let ticks = seen.wall_clock.lock().clone();
    let inits = seen.inits.lock().clone();
    for p in 0..PARTITIONS {
        let calls = ticks.get(&p).copied().unwrap_or(0);
        assert!(
            calls >= 3 && calls <= 3 * inits[&p],
            "task 0_{p}: {calls} calls, {inits:?}"
        );
    }
    // Each punctuation's duration reached the metrics recorder, by task.
    let rendered = prometheus.render();
    for p in 0..PARTITIONS {
        let calls = rendered.lines().find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            let ours = key.starts_with(&format!("{PUNCTUATE_SECONDS}_count{{"))
                && key.contains(&format!("application=\"{app}\""))
                && key.contains(&format!("task=\"0_{p}\""));
            ours.then(|| value.parse::<f64>().ok()).flatten()
        });
        assert!(
            calls.is_some_and(|calls| calls >= 3.0),
            "task 0_{p}: {calls:?}"
        );
    }
    // No changelog for the store that is not logged.
    let clients = statestore_changelog::KafkaClients::new(&statestore_changelog::KafkaConfig {
        bootstrap_servers: bootstrap.clone(),
        ..Default::default()
    })
    .expect("clients");
    assert_eq!(
        clients
            .partition_count(&format!("{app}-scratch-changelog"))
            .expect("metadata"),
        None,
        "an unlogged store has no changelog topic"
    );
}

/// A handle of the wrong kind and bad store options are typed errors, before anything runs.
#[test]
fn store_kinds_are_checked_when_handles_are_made_and_configurations_validated() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config("127.0.0.1:1", "kinds", "in", dir.path(), 0);
    let err = StoreHandle::<WindowStore>::new(&config, "counts").expect_err("a key-value store");
    assert!(err.to_string().contains("key-value"), "{err}");
    assert!(StoreHandle::<TaskKv>::new(&config, "per-minute").is_err());
    assert!(StoreHandle::<TaskKv>::new(&config, "missing").is_err());
    let mut bad = config.clone();
    bad.stores[1].kind = StoreKind::Window {
        retention_ms: 0,
        segment_interval_ms: None,
        retain_duplicates: false,
    };
    let err = bad.validate().expect_err("zero retention");
    assert!(err.to_string().contains("retention_ms"), "{err}");
    let mut bad = config;
    bad.stores[4].kind = StoreKind::Lru { capacity: 0 };
    assert!(bad.validate().is_err());
    let parsed: StoreSpec = serde_json::from_str(
        r#"{"name": "w", "backend": "redb", "kind": {"type": "window", "retention_ms": 60000}}"#,
    )
    .expect("parse");
    assert!(matches!(
        parsed.kind,
        StoreKind::Window {
            retention_ms: 60_000,
            ..
        }
    ));
    let err = serde_json::from_str::<StoreSpec>(
        r#"{"name": "w", "backend": "redb", "kind": {"type": "window", "retention": 1}}"#,
    )
    .expect_err("unknown option");
    assert!(err.to_string().contains("retention"), "{err}");
}
