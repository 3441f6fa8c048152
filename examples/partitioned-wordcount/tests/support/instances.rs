//! The harness of the process tests that run instances while input flows: instance processes
//! and their stderr, a feeder of input rounds, and the checks that every record was counted
//! exactly.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of this module"
)]

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

use super::output;

/// Input partitions, so tasks.
pub const PARTITIONS: i32 = 4;

/// Lines per produced round (8 words each): modest, the machine has 2 cores.
pub const ROUND: u64 = 100;

/// Creates the input topic and both changelogs with `replicas` replicas (and
/// `min.insync.replicas` 2 when there are several) before any instance starts.
pub fn create_topics(bootstrap: &str, topic: &str, app: &str, replicas: i32) {
    let insync = if replicas > 1 { "2" } else { "1" };
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let changelogs = [
        format!("{app}-counts-changelog"),
        format!("{app}-letters-changelog"),
    ];
    let mut topics = vec![
        NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(replicas))
            .set("min.insync.replicas", insync),
    ];
    for changelog in &changelogs {
        topics.push(
            NewTopic::new(changelog, PARTITIONS, TopicReplication::Fixed(replicas))
                .set("min.insync.replicas", insync)
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
pub struct Instance {
    pub name: &'static str,
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// The stderr lines read so far.
    pub log: Vec<String>,
}

impl Instance {
    /// Starts `run` of the example through `command` (the binary, or `ip netns exec`).
    pub fn start(
        name: &'static str,
        command: Command,
        bootstrap: &str,
        names: (&str, &str),
        state_dir: &Path,
        session_timeout_ms: u64,
    ) -> Instance {
        Self::start_with(
            name,
            command,
            bootstrap,
            names,
            state_dir,
            session_timeout_ms,
            &[],
        )
    }

    /// As [`start`](Instance::start), with `extra` arguments to `run` (which may set
    /// `--commit-interval-ms`, 200 otherwise).
    pub fn start_with(
        name: &'static str,
        mut command: Command,
        bootstrap: &str,
        (topic, app): (&str, &str),
        state_dir: &Path,
        session_timeout_ms: u64,
        extra: &[&str],
    ) -> Instance {
        command
            .args(["run", "--bootstrap", bootstrap, "--topic", topic])
            .args(extra)
            .args(["--application-id", app, "--backend", "redb"]);
        if !extra.contains(&"--commit-interval-ms") {
            command.args(["--commit-interval-ms", "200"]);
        }
        command
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
    pub fn drain(&mut self) -> &[String] {
        self.log.extend(self.lines.try_iter());
        &self.log
    }

    /// Panics, with the instance's log, when it has exited: nothing here may stop it.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            let log = self.drain().to_vec();
            panic!(
                "instance {} exited on its own ({status}): {log:#?}",
                self.name
            );
        }
    }

    /// How many stderr lines were read so far: a mark for [`wait_after`](Instance::wait_after).
    pub fn mark(&mut self) -> usize {
        self.drain().len()
    }

    /// Waits for a stderr line satisfying `wanted` among those after line `mark` (read
    /// already, or still to come), checking that the instance still runs.
    pub fn wait_after(&mut self, mark: usize, timeout: Duration, wanted: impl Fn(&str) -> bool) {
        if self.log.iter().skip(mark).any(|line| wanted(line)) {
            return;
        }
        self.wait_for(timeout, wanted);
    }

    /// Waits until the instance's latest status line (printed every second) lists an active
    /// task: the group may still move tasks after the first record (a member whose session
    /// lapsed under load loses them), and a test about losing tasks needs one owned.
    pub fn wait_owning(&mut self, timeout: Duration) {
        self.wait_for(timeout, |line| {
            line.starts_with("processed ") && !line.contains(" tasks [] ")
        });
    }

    /// Waits for a stderr line satisfying `wanted`, checking that the instance still runs.
    pub fn wait_for(&mut self, timeout: Duration, wanted: impl Fn(&str) -> bool) {
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
    pub fn stop(mut self) {
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
pub struct Feeder {
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Feeder {
    pub fn start(bootstrap: &str, topic: &str) -> Feeder {
        Feeder::start_with(bootstrap, topic, &[])
    }

    /// As [`start`](Feeder::start), with `extra` arguments to `produce` (e.g.
    /// `--unkeyed-lines`).
    pub fn start_with(bootstrap: &str, topic: &str, extra: &[&str]) -> Feeder {
        let extra: Vec<String> = extra.iter().map(|&arg| arg.to_owned()).collect();
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
                    let partitions = PARTITIONS.to_string();
                    let mut args = vec![
                        "produce",
                        "--bootstrap",
                        &bootstrap,
                        "--topic",
                        &topic,
                        "--partitions",
                        &partitions,
                        "--from",
                        &start,
                        "--lines",
                        &end,
                    ];
                    args.extend(extra.iter().map(String::as_str));
                    output(&args);
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
    pub fn stop(mut self) -> u64 {
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
pub fn watch(duration: Duration, instances: &mut [&mut Instance]) {
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
pub fn wait_complete(
    bootstrap: &str,
    (topic, app): (&str, &str),
    timeout: Duration,
    instances: &mut [&mut Instance],
) {
    let check = || {
        for instance in instances.iter_mut() {
            instance.assert_running();
        }
    };
    if let Err(why) = complete_within(bootstrap, (topic, app), timeout, check) {
        for instance in instances.iter_mut() {
            let name = instance.name;
            let log = instance.drain();
            let start = log.len().saturating_sub(40);
            eprintln!("instance {name}, last lines: {:#?}", &log[start..]);
        }
        panic!("{why}");
    }
}

/// Whether the group's committed offsets reach the end of every input partition within
/// `timeout`, calling `between` between two looks. After a failed look the next one asks
/// with a new consumer: one that learned a leader as unavailable (a broker fenced for a
/// moment) keeps failing until its next periodic metadata refresh, minutes later.
///
/// # Errors
/// What was seen last, when the deadline passed.
pub fn complete_within(
    bootstrap: &str,
    (topic, app): (&str, &str),
    timeout: Duration,
    mut between: impl FnMut(),
) -> Result<(), String> {
    let new_consumer = || -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", app)
            .create()
            .expect("consumer")
    };
    let mut consumer = new_consumer();
    let deadline = Instant::now() + timeout;
    loop {
        // A loaded broker may not answer in time: that is "not yet", until the deadline.
        let last = match group_progress(&consumer, topic) {
            Ok((committed, ends)) if committed == ends => return Ok(()),
            Ok((committed, ends)) => format!("group offsets {committed:?} of {ends:?}"),
            Err(err) => {
                consumer = new_consumer();
                format!("reading the offsets failed: {err}")
            }
        };
        between();
        if Instant::now() >= deadline {
            return Err(format!("not complete within {timeout:?}: {last}"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The group's committed offsets and the end offsets of the input partitions.
pub fn group_progress(
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
pub fn assert_exact(bootstrap: &str, app: &str, lines: u64) {
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
