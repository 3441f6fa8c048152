//! Static membership (KIP-345) with instances of partitioned-wordcount as separate processes:
//! an instance killed with SIGKILL and started again within the session timeout, with the same
//! `--group-instance-id` and state directory, gets its partitions back without the group
//! rebalancing, so the other instance keeps processing without giving up a task; the same holds
//! for a clean stop (`Application::close`) and restart; the counts of both stores stay exact.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP`; without it the test prints one SKIP line and passes (it
//! fails instead under `STATESTORE_REQUIRE_KAFKA=1`).

mod support;
use support::{BIN, output, unique};

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Long enough that the restarted instance is back well within it, even on a loaded machine.
const SESSION_TIMEOUT_MS: &str = "20000";
const LINES: u64 = 1_000;
const PARTITIONS: i32 = 4;

/// One instance process with a static id, its stderr lines on a channel.
struct Instance {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: Vec<String>,
}

impl Instance {
    fn start(bootstrap: &str, topic: &str, app: &str, id: &str, dir: &Path) -> Instance {
        let mut child = Command::new(BIN)
            .args(["run", "--bootstrap", bootstrap, "--topic", topic])
            .args(["--application-id", app, "--backend", "redb"])
            .args(["--commit-interval-ms", "100"])
            .args(["--session-timeout-ms", SESSION_TIMEOUT_MS])
            .args(["--group-instance-id", id, "--stop-on-stdin-eof"])
            .arg("--state-dir")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn instance");
        let stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Instance {
            child,
            stdin,
            lines,
            log: Vec::new(),
        }
    }

    /// Every stderr line so far.
    fn drain(&mut self) -> &[String] {
        self.log.extend(self.lines.try_iter());
        &self.log
    }

    /// The tasks the instance owns by its assignment events so far.
    fn owned(&mut self) -> BTreeSet<String> {
        owned(self.drain())
    }

    /// Waits until the instance owns `count` tasks.
    fn wait_owning(&mut self, count: usize, timeout: Duration) -> BTreeSet<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let owned = self.owned();
            if owned.len() == count {
                return owned;
            }
            assert!(
                Instant::now() < deadline,
                "owns {owned:?}, not {count} tasks, after {timeout:?}: {:#?}",
                self.log
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// Closes stdin, so the instance commits and exits.
    fn stop(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait");
        self.log.extend(self.lines.try_iter());
        assert!(status.success(), "instance failed: {:#?}", self.log);
    }
}

/// The tasks owned after the assignment events among `lines`.
fn owned(lines: &[String]) -> BTreeSet<String> {
    let mut owned = BTreeSet::new();
    for line in lines {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("assigned"), Some(task)) => owned.insert(task.to_owned()),
            (Some("revoked" | "lost" | "fenced"), Some(task)) => owned.remove(task),
            _ => false,
        };
    }
    owned
}

/// Lines of task events: assignments and the ways a task goes.
fn task_events(lines: &[String]) -> Vec<&String> {
    let events = ["assigned ", "revoked ", "lost ", "fenced "];
    lines
        .iter()
        .filter(|line| events.iter().any(|event| line.starts_with(event)))
        .collect()
}

/// Produces lines `from..to` to `topic` (created with 4 partitions when missing).
fn produce(bootstrap: &str, topic: &str, from: u64, to: u64) {
    let (from, to) = (from.to_string(), to.to_string());
    output(&[
        "produce",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--from",
        &from,
        "--lines",
        &to,
    ]);
}

/// Waits until the group's committed offsets reach the end of every input partition: every
/// record is in the state (the group offset is committed after the stores).
fn wait_complete(bootstrap: &str, topic: &str, app: &str, timeout: Duration) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", app)
        .create()
        .expect("consumer");
    let deadline = Instant::now() + timeout;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    loop {
        let ends: Vec<Offset> = (0..PARTITIONS)
            .map(|p| {
                let watermarks = consumer.fetch_watermarks(topic, p, Duration::from_secs(10));
                watermarks.map_or(Offset::Invalid, |(_, high)| Offset::Offset(high))
            })
            .collect();
        // A loaded broker may not answer in time: that is "not yet", until the deadline.
        let committed: Vec<Offset> = consumer
            .committed_offsets(tpl.clone(), Duration::from_secs(10))
            .map_or_else(
                |_| Vec::new(),
                |list| list.elements().iter().map(|e| e.offset()).collect(),
            );
        if committed == ends {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group offsets {committed:?} short of {ends:?} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Both stores' changelogs hold exactly the counts of lines `0..lines`.
fn assert_exact(bootstrap: &str, app: &str, lines: u64) {
    let total = lines.to_string();
    for store in ["counts", "letters"] {
        let counted = output(&[
            "counts",
            "--bootstrap",
            bootstrap,
            "--application-id",
            app,
            "--store",
            store,
        ]);
        let expected = output(&["expected", "--lines", &total, "--store", store]);
        assert!(!expected.is_empty());
        assert_eq!(counted, expected, "store {store}");
    }
}

#[test]
fn a_static_member_killed_and_restarted_in_its_session_gets_its_tasks_back_alone() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "a_static_member_killed_and_restarted_in_its_session_gets_its_tasks_back_alone",
    ) else {
        return;
    };
    let (app, topic) = (unique("pwc-static"), unique("pwc-static-words"));
    let (id_a, id_b) = (unique("host-a"), unique("host-b"));
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    produce(&bootstrap, &topic, 0, LINES);
    let wait = Duration::from_secs(120);
    // A joins first and leads; B joins and the group settles at two tasks each.
    let mut a = Instance::start(&bootstrap, &topic, &app, &id_a, dir_a.path());
    a.wait_owning(4, wait);
    let mut b = Instance::start(&bootstrap, &topic, &app, &id_b, dir_b.path());
    let tasks_b = b.wait_owning(2, wait);
    let tasks_a = a.wait_owning(2, wait);
    wait_complete(&bootstrap, &topic, &app, wait);
    let settled = a.drain().len();

    b.kill();
    let killed = Instant::now();
    produce(&bootstrap, &topic, LINES, 2 * LINES);
    let mut b = Instance::start(&bootstrap, &topic, &app, &id_b, dir_b.path());
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "restarted too late"
    );
    assert_eq!(
        b.wait_owning(2, wait),
        tasks_b,
        "B's tasks after its restart"
    );
    wait_complete(&bootstrap, &topic, &app, wait);

    let after: Vec<String> = task_events(&a.drain()[settled..])
        .into_iter()
        .cloned()
        .collect();
    assert!(
        after.is_empty(),
        "A saw a rebalance when B came back: {after:#?}"
    );
    assert_eq!(a.owned(), tasks_a);

    // A clean stop (Application::close) of a static member does not leave the group either.
    let settled = a.drain().len();
    b.stop();
    produce(&bootstrap, &topic, 2 * LINES, 3 * LINES);
    let mut b = Instance::start(&bootstrap, &topic, &app, &id_b, dir_b.path());
    assert_eq!(b.wait_owning(2, wait), tasks_b, "B's tasks after its stop");
    wait_complete(&bootstrap, &topic, &app, wait);
    let after: Vec<String> = task_events(&a.drain()[settled..])
        .into_iter()
        .cloned()
        .collect();
    assert!(
        after.is_empty(),
        "A saw a rebalance when B stopped and came back: {after:#?}"
    );
    a.stop();
    b.stop();
    assert_exact(&bootstrap, &app, 3 * LINES);
}
