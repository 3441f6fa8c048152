//! Brokers lost and instances cut off, on a 3-node Apache Kafka cluster of each test's own
//! (topics at 3 replicas, `min.insync.replicas` 2), while input flows: a broker's loss and a
//! network partition are retries, never an error that stops an instance (issue 31, point 4).
//! Each test checks that no instance exited on its own and that the final counts of both
//! stores equal those computed without Kafka.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP` (only as the switch that Kafka tests run; the clusters
//! are the tests' own, started through `scripts/broker.sh`). The partition test needs root
//! (`ip netns`).

mod support;
use support::{BIN, output, unique};

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use statestore_changelog::kafka_util::block_on;
use statestore_test_support::{Cluster, NetNamespace};

/// Input partitions, so tasks.
const PARTITIONS: i32 = 4;

/// Lines per produced round (8 words each): modest, the machine has 2 cores.
const ROUND: u64 = 100;

/// Creates the input topic and both changelogs with 3 replicas and `min.insync.replicas` 2
/// before any instance starts (the application's default replication factor may be 1).
fn create_topics(bootstrap: &str, topic: &str, app: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let changelogs = [
        format!("{app}-counts-changelog"),
        format!("{app}-letters-changelog"),
    ];
    let mut topics = vec![
        NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(3))
            .set("min.insync.replicas", "2"),
    ];
    for changelog in &changelogs {
        topics.push(
            NewTopic::new(changelog, PARTITIONS, TopicReplication::Fixed(3))
                .set("min.insync.replicas", "2")
                .set("cleanup.policy", "compact"),
        );
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(
        admin.create_topics(&topics, &options),
        Duration::from_secs(40),
    )
    .expect("topic creation answered")
    .expect("topics created");
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => panic!("creating {topic}: {code}"),
        }
    }
}

/// One instance process, its stderr lines on a channel.
struct Instance {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: Vec<String>,
}

impl Instance {
    /// Starts `run` of the example through `command` (the binary, or `ip netns exec`).
    fn start(
        name: &'static str,
        mut command: Command,
        bootstrap: &str,
        (topic, app): (&str, &str),
        state_dir: &Path,
        session_timeout_ms: u64,
    ) -> Instance {
        command
            .args(["run", "--bootstrap", bootstrap, "--topic", topic])
            .args(["--application-id", app, "--backend", "redb"])
            .args(["--commit-interval-ms", "200"])
            .args(["--session-timeout-ms", &session_timeout_ms.to_string()])
            .arg("--stop-on-stdin-eof")
            .arg("--state-dir")
            .arg(state_dir);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn instance");
        let stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Instance {
            name,
            stdin: child.stdin.take(),
            child,
            lines: rx,
            log: Vec::new(),
        }
    }

    /// The stderr lines read so far and those waiting.
    fn drain(&mut self) -> &[String] {
        self.log.extend(self.lines.try_iter());
        &self.log
    }

    /// Panics, with the instance's log, when it has exited: nothing here may stop it.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            let log = self.drain().to_vec();
            panic!(
                "instance {} exited on its own ({status}): {log:#?}",
                self.name
            );
        }
    }

    /// How many stderr lines were read so far: a mark for [`wait_after`](Instance::wait_after).
    fn mark(&mut self) -> usize {
        self.drain().len()
    }

    /// Waits for a stderr line satisfying `wanted` among those after line `mark` (read
    /// already, or still to come), checking that the instance still runs.
    fn wait_after(&mut self, mark: usize, timeout: Duration, wanted: impl Fn(&str) -> bool) {
        if self.log.iter().skip(mark).any(|line| wanted(line)) {
            return;
        }
        self.wait_for(timeout, wanted);
    }

    /// Waits for a stderr line satisfying `wanted`, checking that the instance still runs.
    fn wait_for(&mut self, timeout: Duration, wanted: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            self.assert_running();
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let found = wanted(&line);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) if Instant::now() >= deadline => {
                    panic!(
                        "instance {}: no such line within {timeout:?}; log: {:#?}",
                        self.name, self.log
                    )
                }
                Err(_) => {}
            }
        }
    }

    /// Closes stdin, so the instance commits, leaves the group and exits successfully.
    fn stop(mut self) {
        self.assert_running();
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait");
        self.log.extend(self.lines.try_iter());
        assert!(
            status.success(),
            "instance {} failed: {:#?}",
            self.name,
            self.log
        );
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // A failed test leaves no instance behind.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Produces rounds of [`ROUND`] lines to the input topic on a thread of its own until told
/// to stop, and says how many lines were produced.
struct Feeder {
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Feeder {
    fn start(bootstrap: &str, topic: &str) -> Feeder {
        let stop = Arc::new(AtomicBool::new(false));
        let produced = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, produced) = (Arc::clone(&stop), Arc::clone(&produced));
            let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let from = produced.load(Ordering::Relaxed);
                    let (start, end) = (from.to_string(), (from + ROUND).to_string());
                    // With a broker down the producer retries; a round that fails fails the
                    // test through `stop`'s join.
                    output(&[
                        "produce",
                        "--bootstrap",
                        &bootstrap,
                        "--topic",
                        &topic,
                        "--partitions",
                        &PARTITIONS.to_string(),
                        "--from",
                        &start,
                        "--lines",
                        &end,
                    ]);
                    produced.store(from + ROUND, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
        };
        Feeder {
            stop,
            produced,
            thread: Some(thread),
        }
    }

    /// Stops after the round in progress and returns the lines produced.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("a producing round failed");
        }
        self.produced.load(Ordering::Relaxed)
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sleeps `duration` while checking every 200 ms that `instances` still run.
fn watch(duration: Duration, instances: &mut [&mut Instance]) {
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        for instance in instances.iter_mut() {
            instance.assert_running();
            instance.drain();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the group's committed offsets reach the end of every input partition (every
/// record is in the state: the group offset is committed after the stores), checking that
/// `instances` still run.
fn wait_complete(
    bootstrap: &str,
    (topic, app): (&str, &str),
    timeout: Duration,
    instances: &mut [&mut Instance],
) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", app)
        .create()
        .expect("consumer");
    let deadline = Instant::now() + timeout;
    loop {
        let last = match group_progress(&consumer, topic) {
            Ok((committed, ends)) if committed == ends => return,
            Ok((committed, ends)) => format!("group offsets {committed:?} of {ends:?}"),
            Err(err) => format!("reading the offsets failed: {err}"),
        };
        for instance in instances.iter_mut() {
            instance.assert_running();
        }
        if Instant::now() >= deadline {
            for instance in instances.iter_mut() {
                let name = instance.name;
                let log = instance.drain();
                let start = log.len().saturating_sub(40);
                eprintln!("instance {name}, last lines: {:#?}", &log[start..]);
            }
            panic!("not complete within {timeout:?}: {last}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The group's committed offsets and the end offsets of the input partitions.
fn group_progress(
    consumer: &BaseConsumer,
    topic: &str,
) -> rdkafka::error::KafkaResult<(Vec<Offset>, Vec<Offset>)> {
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        ends.push(Offset::Offset(high));
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10))?;
    let committed = (0..PARTITIONS)
        .map(|p| {
            committed
                .find_partition(topic, p)
                .map_or(Offset::Invalid, |e| e.offset())
        })
        .collect();
    Ok((committed, ends))
}

/// Both stores' changelogs hold exactly the counts of lines `0..lines`.
fn assert_exact(bootstrap: &str, app: &str, lines: u64) {
    let total = lines.to_string();
    let partitions = PARTITIONS.to_string();
    for store in ["counts", "letters"] {
        let counted = output(&[
            "counts",
            "--bootstrap",
            bootstrap,
            "--application-id",
            app,
            "--partitions",
            &partitions,
            "--store",
            store,
        ]);
        let expected = output(&["expected", "--lines", &total, "--store", store]);
        assert!(!expected.is_empty());
        assert!(
            counted == expected,
            "store {store} is not exact after {lines} lines"
        );
    }
}

/// The node (1..=3, the script's node ids) that leads the most partitions of `topics`,
/// leaving out `except`, with how many it leads.
fn busiest_leader(bootstrap: &str, topics: &[&str], except: Option<i32>) -> (usize, usize) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("consumer");
    let mut led = [0usize; 4];
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("metadata");
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            if let Some(slot) = usize::try_from(partition.leader())
                .ok()
                .filter(|&node| (1..=3).contains(&node) && Some(partition.leader()) != except)
            {
                led[slot] += 1;
            }
        }
    }
    let (node, count) = (1..=3)
        .map(|node| (node, led[node]))
        .max_by_key(|&(_, count)| count)
        .expect("three nodes");
    assert!(count > 0, "no node leads a partition of {topics:?}");
    (node, count)
}

/// Two instances process while input flows; the broker leading most changelog and input
/// partitions is killed with SIGKILL as a third instance joins (so tasks move and restore
/// while their leaders move), and restarted 15 s later; then another leader is killed the
/// same way while the third instance leaves. Neither of the two exits on its own, and both
/// stores end exact.
#[test]
fn a_killed_leader_broker_is_retried_not_fatal() {
    if statestore_test_support::kafka_bootstrap("a_killed_leader_broker_is_retried_not_fatal")
        .is_none()
    {
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::start(3);
    let bootstrap = cluster.bootstrap().to_owned();
    let (app, topic) = (unique("pwc-faults"), unique("pwc-faults-words"));
    create_topics(&bootstrap, &topic, &app);
    let changelog = format!("{app}-counts-changelog");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let names = (topic.as_str(), app.as_str());
    let feeder = Feeder::start(&bootstrap, &topic);

    let mut a = Instance::start(
        "a",
        Command::new(BIN),
        &bootstrap,
        names,
        dirs[0].path(),
        10_000,
    );
    let mut b = Instance::start(
        "b",
        Command::new(BIN),
        &bootstrap,
        names,
        dirs[1].path(),
        10_000,
    );
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    watch(Duration::from_secs(3), &mut [&mut a, &mut b]);

    let (first, led) = busiest_leader(&bootstrap, &[&changelog, &topic], None);
    eprintln!("killing node {first}, leader of {led} partitions");
    cluster.kill(first);
    // A member joining now moves tasks while their changelogs' leaders move.
    let c = Instance::start(
        "c",
        Command::new(BIN),
        &bootstrap,
        names,
        dirs[2].path(),
        10_000,
    );
    watch(Duration::from_secs(15), &mut [&mut a, &mut b]);
    cluster.restart(first);
    watch(Duration::from_secs(5), &mut [&mut a, &mut b]);

    let except = i32::try_from(first).ok();
    let (second, led) = busiest_leader(&bootstrap, &[&changelog, &topic], except);
    eprintln!("killing node {second}, leader of {led} partitions");
    cluster.kill(second);
    // The third member leaves: its tasks move back while their leaders move again.
    c.stop();
    watch(Duration::from_secs(15), &mut [&mut a, &mut b]);
    cluster.restart(second);

    let lines = feeder.stop();
    wait_complete(
        &bootstrap,
        names,
        Duration::from_secs(120),
        &mut [&mut a, &mut b],
    );
    a.stop();
    b.stop();
    assert_exact(&bootstrap, &app, lines);
    eprintln!("{lines} lines counted exactly in {:?}", started.elapsed());
}

/// Session timeout of the partition test's instances: the cut-off lasts 3 times as long.
const PARTITION_SESSION_MS: u64 = 6_000;

/// One instance runs in a network namespace whose link to the brokers is cut for longer than
/// its session timeout while input flows, then joined again: the group moves its tasks to the
/// other instance, and once back it gives up what it lost, rejoins and processes again,
/// without exiting. Both stores end exact.
#[test]
fn an_instance_cut_off_from_every_broker_rejoins_without_exiting() {
    if statestore_test_support::kafka_bootstrap(
        "an_instance_cut_off_from_every_broker_rejoins_without_exiting",
    )
    .is_none()
    {
        return;
    }
    let started = Instant::now();
    let ns = NetNamespace::create().unwrap_or_else(|why| {
        panic!("this test needs a network namespace (root, iproute2): {why}")
    });
    let cluster = Cluster::start_on(3, ns.host());
    let bootstrap = cluster.bootstrap().to_owned();
    let (app, topic) = (unique("pwc-cut"), unique("pwc-cut-words"));
    create_topics(&bootstrap, &topic, &app);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let names = (topic.as_str(), app.as_str());
    let feeder = Feeder::start(&bootstrap, &topic);

    let session = PARTITION_SESSION_MS;
    let mut a = Instance::start(
        "a",
        Command::new(BIN),
        &bootstrap,
        names,
        dirs[0].path(),
        session,
    );
    let mut b = Instance::start(
        "b",
        ns.command(BIN),
        &bootstrap,
        names,
        dirs[1].path(),
        session,
    );
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    watch(Duration::from_secs(3), &mut [&mut a, &mut b]);

    ns.cut();
    let cut_at = b.mark();
    eprintln!("cut b off at {:?}", started.elapsed());
    // The group gives b's tasks to a, which restores them from the changelogs.
    a.wait_for(Duration::from_secs(60), |l| l.starts_with("assigned"));
    watch(Duration::from_millis(3 * session), &mut [&mut a, &mut b]);
    ns.heal();
    eprintln!("joined b again at {:?}", started.elapsed());
    // b learns that it lost its tasks (or was fenced), rejoins and gets tasks again.
    b.wait_after(cut_at, Duration::from_secs(90), |l| {
        l.starts_with("lost") || l.starts_with("fenced") || l.starts_with("revoked")
    });
    let gave_up = b
        .log
        .iter()
        .skip(cut_at)
        .position(|l| l.starts_with("lost") || l.starts_with("fenced") || l.starts_with("revoked"))
        .map_or(cut_at, |at| cut_at + at);
    b.wait_after(gave_up, Duration::from_secs(90), |l| {
        l.starts_with("assigned")
    });
    watch(Duration::from_secs(3), &mut [&mut a, &mut b]);

    let lines = feeder.stop();
    wait_complete(
        &bootstrap,
        names,
        Duration::from_secs(120),
        &mut [&mut a, &mut b],
    );
    a.stop();
    b.stop();
    assert_exact(&bootstrap, &app, lines);
    eprintln!("{lines} lines counted exactly in {:?}", started.elapsed());
}
