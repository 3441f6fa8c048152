//! Instances of partitioned-wordcount as separate processes in one group against the real
//! broker: the group's leader is killed with SIGKILL while it processes and commits (every
//! 50 ms), the survivors take its tasks over, another instance joins later, and the final
//! counts of both stores equal those computed without Kafka.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP`; without it the tests print one SKIP line and pass (they
//! fail instead under `STATESTORE_REQUIRE_KAFKA=1`, which `scripts/test.sh` sets).
//! `STATESTORE_TASKS_LINES` sets the lines per produced round (default 1000, 8 records each).

mod support;
use support::instances::complete_within;
use support::{BIN, output, unique};

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use statestore_changelog::{Changelog, CommitReader, KafkaConfig, KafkaLog};
use statestore_tasks::{POSITION_KEY, decode_task_position};
use store_api::BatchOp;

/// The session timeout of the instances of the first test: long enough for a saturated 2-core
/// machine, where a broker can answer heartbeats late.
const SESSION_TIMEOUT_MS: u64 = 20_000;

fn bootstrap(test: &str) -> Option<String> {
    statestore_test_support::kafka_bootstrap(test)
}

fn lines() -> u64 {
    std::env::var("STATESTORE_TASKS_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// How an instance runs.
struct Options {
    backend: &'static str,
    commit_interval_ms: u64,
    session_timeout_ms: u64,
    standbys: u32,
    commit_bytes: Option<usize>,
    kill_between_store_commits: Option<u64>,
    max_poll_interval_ms: Option<u64>,
    /// Sleep for `.1` ms in the processing of the `.0`th record.
    stall_in_record: Option<(u64, u64)>,
    /// Processing threads (`--threads`).
    threads: usize,
    /// `--snapshot-url`, with a snapshot of every store at every commit that wrote.
    snapshot_url: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: "redb",
            commit_interval_ms: 50,
            session_timeout_ms: SESSION_TIMEOUT_MS,
            standbys: 0,
            commit_bytes: None,
            kill_between_store_commits: None,
            max_poll_interval_ms: None,
            stall_in_record: None,
            threads: 1,
            snapshot_url: None,
        }
    }
}

/// One instance process, its stderr lines on a channel.
struct Instance {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: Vec<String>,
}

impl Instance {
    fn start(bootstrap: &str, topic: &str, app: &str, state_dir: &Path) -> Instance {
        Self::start_with(bootstrap, topic, app, state_dir, &Options::default())
    }

    fn start_with(
        bootstrap: &str,
        topic: &str,
        app: &str,
        state_dir: &Path,
        options: &Options,
    ) -> Instance {
        let mut command = Command::new(BIN);
        command
            .args(["run", "--bootstrap", bootstrap, "--topic", topic])
            .args(["--application-id", app, "--backend", options.backend])
            .args([
                "--commit-interval-ms",
                &options.commit_interval_ms.to_string(),
            ])
            .args([
                "--session-timeout-ms",
                &options.session_timeout_ms.to_string(),
            ])
            .args(["--num-standby-replicas", &options.standbys.to_string()])
            .args(["--threads", &options.threads.to_string()])
            .arg("--stop-on-stdin-eof")
            .arg("--state-dir")
            .arg(state_dir);
        if let Some(bytes) = options.commit_bytes {
            command.args(["--commit-bytes", &bytes.to_string()]);
        }
        if let Some(nth) = options.kill_between_store_commits {
            command.args(["--kill-between-store-commits", &nth.to_string()]);
        }
        if let Some(ms) = options.max_poll_interval_ms {
            command.args(["--max-poll-interval-ms", &ms.to_string()]);
        }
        if let Some((nth, ms)) = options.stall_in_record {
            command.args(["--stall-in-record", &format!("{nth}:{ms}")]);
        }
        if let Some(url) = &options.snapshot_url {
            command.args(["--snapshot-url", url, "--snapshot-every-commits", "1"]);
        }
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
            stdin: child.stdin.take(),
            child,
            lines: rx,
            log: Vec::new(),
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the instance.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal}");
    }

    /// The stderr lines read so far and those waiting.
    fn drain(&mut self) -> &[String] {
        self.log.extend(self.lines.try_iter());
        &self.log
    }

    /// Whether the process has exited.
    fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Waits until the process exits by itself and returns its stderr.
    fn wait_exit(mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.log.extend(self.lines.try_iter());
                assert!(!status.success(), "expected a crash: {:#?}", self.log);
                return self.log;
            }
            assert!(
                Instant::now() < deadline,
                "still running: {:#?}",
                self.drain()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for a stderr line satisfying `wanted`.
    fn wait_for(&mut self, timeout: Duration, wanted: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(remaining) {
                Ok(line) => {
                    let found = wanted(&line);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!("no such line within {timeout:?}; log: {:#?}", self.log),
            }
        }
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// Closes stdin, so the instance commits, leaves the group and exits.
    fn stop(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait");
        self.log.extend(self.lines.try_iter());
        assert!(status.success(), "instance failed: {:#?}", self.log);
    }
}

/// Waits until the group's committed offsets reach the end of every input partition: every
/// record is in the state (the group offset is committed after the stores).
fn wait_complete(bootstrap: &str, topic: &str, app: &str, timeout: Duration) {
    if let Err(why) = complete_within(bootstrap, (topic, app), timeout, || {}) {
        panic!("{why}");
    }
}

/// As [`wait_complete`], printing what `instances` logged when it fails.
fn wait_complete_logged(
    bootstrap: &str,
    topic: &str,
    app: &str,
    timeout: Duration,
    instances: &mut [&mut Instance],
) {
    if let Err(why) = complete_within(bootstrap, (topic, app), timeout, || {}) {
        for (index, instance) in instances.iter_mut().enumerate() {
            let log = instance.drain();
            let start = log.len().saturating_sub(60);
            eprintln!("instance {index}, last lines: {:#?}", &log[start..]);
        }
        panic!("{why}");
    }
}

/// Produces lines `from..to` to `topic`.
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

#[test]
fn killing_the_leader_while_it_commits_and_a_join_keep_counts_exact() {
    let Some(bootstrap) =
        bootstrap("killing_the_leader_while_it_commits_and_a_join_keep_counts_exact")
    else {
        return;
    };
    let (app, topic) = (unique("pwc"), unique("pwc-words"));
    let n = lines();
    produce(&bootstrap, &topic, 0, n);
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().expect("dir")).collect();

    // B joins first, so it leads the group.
    let mut b = Instance::start(&bootstrap, &topic, &app, dirs[1].path());
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    let mut a = Instance::start(&bootstrap, &topic, &app, dirs[0].path());
    let mut c = Instance::start(&bootstrap, &topic, &app, dirs[2].path());
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    c.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    // B owns tasks, processes the second round and commits every 50 ms when it is killed.
    produce(&bootstrap, &topic, n, 2 * n);
    b.kill();
    wait_complete_logged(
        &bootstrap,
        &topic,
        &app,
        Duration::from_secs(240),
        &mut [&mut a, &mut c],
    );

    let d = Instance::start(&bootstrap, &topic, &app, dirs[3].path());
    produce(&bootstrap, &topic, 2 * n, 3 * n);
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(120));
    for instance in [a, c, d] {
        instance.stop();
    }

    assert_exact(&bootstrap, &app, 3 * n);
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

/// A pseudo-random duration below `max_ms`, from the clock.
fn random_ms(max_ms: u64) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    Duration::from_millis(nanos % max_ms)
}

/// Stores whose buffers fill long before the commit interval (256 bytes of `commit_bytes`,
/// three or four words, and a commit every minute): the task commits them, at a record boundary, with its position.
/// An instance killed with SIGKILL at random moments and started again on the same state
/// directory ends with both stores exact, never counting a record twice. The stores are fjall's
/// (examples/byo-fjall): a backend registered at run time, named in the configuration.
#[test]
fn full_buffers_commit_with_the_position_under_kill9_at_random_moments() {
    let Some(bootstrap) =
        bootstrap("full_buffers_commit_with_the_position_under_kill9_at_random_moments")
    else {
        return;
    };
    kill9_at_random_moments(&bootstrap, "fjall", 1);
}

/// As above with two processing threads in the instance (and redb stores): tasks processed at
/// the same time on both, each committing at the record that fills its buffer.
#[test]
fn two_processing_threads_keep_counts_exact_under_kill9_at_random_moments() {
    let Some(bootstrap) =
        bootstrap("two_processing_threads_keep_counts_exact_under_kill9_at_random_moments")
    else {
        return;
    };
    kill9_at_random_moments(&bootstrap, "redb", 2);
}

/// Kills an instance of `threads` processing threads on `backend` stores with SIGKILL three
/// times at random moments, then lets one finish: both stores are exact.
fn kill9_at_random_moments(bootstrap: &str, backend: &'static str, threads: usize) {
    let (app, topic) = (unique("pwc-full"), unique("pwc-full-words"));
    let n = lines();
    produce(bootstrap, &topic, 0, 4 * n);
    let dir = tempfile::tempdir().expect("dir");
    let options = Options {
        backend,
        commit_interval_ms: 60_000,
        session_timeout_ms: 6_000,
        commit_bytes: Some(256),
        threads,
        ..Options::default()
    };
    for _ in 0..3 {
        let mut a = Instance::start_with(bootstrap, &topic, &app, dir.path(), &options);
        a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
        std::thread::sleep(random_ms(1_500));
        a.kill();
    }
    let last = Options {
        backend,
        session_timeout_ms: 6_000,
        threads,
        ..Options::default()
    };
    let a = Instance::start_with(bootstrap, &topic, &app, dir.path(), &last);
    wait_complete(bootstrap, &topic, &app, Duration::from_secs(240));
    a.stop();
    assert_exact(bootstrap, &app, 4 * n);
}

/// An instance killed in a task's commit after its first store committed and before its
/// second did: the stores hold different positions, and the instance started again resumes
/// at the smaller one without counting anything twice in the other.
#[test]
fn a_crash_between_the_commits_of_a_tasks_two_stores_keeps_both_exact() {
    let Some(bootstrap) =
        bootstrap("a_crash_between_the_commits_of_a_tasks_two_stores_keeps_both_exact")
    else {
        return;
    };
    let (app, topic) = (unique("pwc-two"), unique("pwc-two-words"));
    let n = lines();
    produce(&bootstrap, &topic, 0, 2 * n);
    let dir = tempfile::tempdir().expect("dir");
    let crashing = Options {
        session_timeout_ms: 6_000,
        kill_between_store_commits: Some(6),
        ..Options::default()
    };
    let mut a = Instance::start_with(&bootstrap, &topic, &app, dir.path(), &crashing);
    // How many commits a round of input makes depends on how fast the instance processes
    // it: more rounds follow until the fail point has been reached often enough to kill it.
    let mut produced = 2 * n;
    let deadline = Instant::now() + Duration::from_secs(180);
    while !a.exited() {
        assert!(Instant::now() < deadline, "still running: {:#?}", a.drain());
        std::thread::sleep(Duration::from_millis(500));
        produce(&bootstrap, &topic, produced, produced + n / 4);
        produced += n / 4;
    }
    let log = a.wait_exit(Duration::from_secs(10));
    assert!(
        log.iter()
            .any(|l| l.contains("killing myself between two store commits")),
        "{log:#?}"
    );
    let again = Options {
        session_timeout_ms: 6_000,
        ..Options::default()
    };
    let a = Instance::start_with(&bootstrap, &topic, &app, dir.path(), &again);
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(240));
    a.stop();
    assert_exact(&bootstrap, &app, produced);
}

/// An owner paused (SIGSTOP) past its session timeout with counts it has not committed: its
/// tasks move to the other instance, which fences their changelogs and counts more. Woken
/// (SIGCONT), the old owner may commit its stale counts before it learns that it lost its
/// tasks; nothing of that counts, and the counts stay exact. Nothing is produced after the
/// wake-up, so no later write hides a stale one.
#[test]
fn a_paused_owner_woken_after_its_tasks_moved_changes_nothing() {
    let Some(bootstrap) = bootstrap("a_paused_owner_woken_after_its_tasks_moved_changes_nothing")
    else {
        return;
    };
    let (app, topic) = (unique("pwc-stale"), unique("pwc-stale-words"));
    let n = lines();
    produce(&bootstrap, &topic, 0, n);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let options = Options {
        commit_interval_ms: 2_000,
        session_timeout_ms: 6_000,
        ..Options::default()
    };
    let mut a = Instance::start_with(&bootstrap, &topic, &app, dirs[0].path(), &options);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    let mut b = Instance::start_with(&bootstrap, &topic, &app, dirs[1].path(), &options);
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(120));
    // A counts the second round and is paused before its next commit.
    produce(&bootstrap, &topic, n, 2 * n);
    a.signal("STOP");
    // B takes A's tasks over once A's session expires, fences their changelogs, and counts
    // the second round again from A's last commit, and a third one.
    let owns_all = |l: &str| {
        l.starts_with("processed") && (0..4).all(|p| l.contains(&format!("partition: {p} ")))
    };
    b.wait_for(Duration::from_secs(120), owns_all);
    produce(&bootstrap, &topic, 2 * n, 3 * n);
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(240));
    a.signal("CONT");
    // A wakes up, finds its session gone, rejoins and may be given tasks again.
    std::thread::sleep(Duration::from_secs(8));
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(240));
    let fenced = a.drain().iter().any(|l| l.starts_with("fenced"));
    println!("the woken owner found its tasks fenced: {fenced}");
    a.stop();
    b.stop();
    assert_exact(&bootstrap, &app, 3 * n);
    assert_positions_never_move_back(&bootstrap, &app);
}

/// However many tasks, stores and standby copies an instance holds, it runs one set of Kafka
/// clients: the group consumer, one producer for every changelog, a few reader consumers
/// lent to restores and standbys, and the admin client that created the changelog topics.
/// Here each of two instances holds 8 tasks of 2 stores, 4 active and 4 standby.
#[test]
fn an_instance_runs_one_set_of_kafka_clients_for_all_its_tasks_and_standbys() {
    let Some(bootstrap) =
        bootstrap("an_instance_runs_one_set_of_kafka_clients_for_all_its_tasks_and_standbys")
    else {
        return;
    };
    let (app, topic) = (unique("pwc-clients"), unique("pwc-clients-words"));
    let lines = lines().to_string();
    output(&[
        "produce",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--partitions",
        "8",
        "--lines",
        &lines,
    ]);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let options = Options {
        standbys: 1,
        ..Options::default()
    };
    let mut instances: Vec<Instance> = dirs
        .iter()
        .map(|dir| Instance::start_with(&bootstrap, &topic, &app, dir.path(), &options))
        .collect();
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(240));
    let holds_eight = |l: &str| l.starts_with("processed") && l.matches("TaskId").count() == 8;
    for instance in &mut instances {
        instance.wait_for(Duration::from_secs(120), holds_eight);
        // A later report, once the standby copies have caught up.
        instance.wait_for(Duration::from_secs(30), holds_eight);
        let line = instance.log.last().expect("a report").clone();
        let clients: usize = line
            .split("kafka clients ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no client count in {line:?}"));
        println!("{line}");
        // Group consumer, producer, two idle readers and one admin client.
        assert!(clients <= 5, "{clients} kafka clients: {line}");
    }
    for instance in instances {
        instance.stop();
    }
}

/// A group offset left behind the stores' positions (a group commit refused while the group
/// rebalanced) is brought up by the task's next owner, with no new record to process, and
/// nothing is counted twice: the stores' positions, not the group offset, say where to resume.
#[test]
fn a_group_offset_behind_the_stores_is_brought_up_without_new_records() {
    let Some(bootstrap) =
        bootstrap("a_group_offset_behind_the_stores_is_brought_up_without_new_records")
    else {
        return;
    };
    let (app, topic) = (unique("pwc-floor"), unique("pwc-floor-words"));
    let n = lines();
    produce(&bootstrap, &topic, 0, n);
    let dir = tempfile::tempdir().expect("dir");
    let a = Instance::start(&bootstrap, &topic, &app, dir.path());
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(120));
    a.stop();
    // What a refused group commit leaves: the group's offsets behind the stores.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &app)
        .create()
        .expect("consumer");
    let mut behind = TopicPartitionList::new();
    for partition in 0..4 {
        behind
            .add_partition_offset(&topic, partition, Offset::Offset(1))
            .expect("offset");
    }
    consumer
        .commit(&behind, CommitMode::Sync)
        .expect("move the group offsets back");
    assert!(complete_within(&bootstrap, (&topic, &app), Duration::from_secs(1), || {}).is_err());
    let a = Instance::start(&bootstrap, &topic, &app, dir.path());
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(60));
    a.stop();
    assert_exact(&bootstrap, &app, n);
}

/// `run --snapshot-url`: every commit that wrote snapshots both stores' RocksDB files into a
/// file:// object store, so an instance on an empty state directory (a new machine) loads the
/// newest snapshots and replays nothing of the changelogs before them, and the counts stay
/// exact. A URL that does not parse is an invalid-argument error before anything starts.
#[test]
fn an_instance_on_an_empty_disk_starts_from_the_snapshots_of_its_stores() {
    let out = Command::new(BIN)
        .args([
            "run",
            "--bootstrap",
            "127.0.0.1:1",
            "--snapshot-url",
            "not a url",
        ])
        .args(["--state-dir", "/nonexistent/never-made"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("invalid argument: snapshots: url"),
        "{stderr}"
    );
    let Some(bootstrap) =
        bootstrap("an_instance_on_an_empty_disk_starts_from_the_snapshots_of_its_stores")
    else {
        return;
    };
    let (app, topic) = (unique("pwc-snap"), unique("pwc-snap-words"));
    let n = lines();
    produce(&bootstrap, &topic, 0, n);
    let objects = tempfile::tempdir().expect("dir");
    let options = Options {
        backend: "rocksdb",
        snapshot_url: Some(format!("file://{}", objects.path().display())),
        ..Options::default()
    };
    let first_disk = tempfile::tempdir().expect("dir");
    let a = Instance::start_with(&bootstrap, &topic, &app, first_disk.path(), &options);
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(120));
    a.stop();

    produce(&bootstrap, &topic, n, 2 * n);
    let new_disk = tempfile::tempdir().expect("dir");
    let mut b = Instance::start_with(&bootstrap, &topic, &app, new_disk.path(), &options);
    wait_complete_logged(
        &bootstrap,
        &topic,
        &app,
        Duration::from_secs(120),
        &mut [&mut b],
    );
    let assigned: Vec<String> = b
        .drain()
        .iter()
        .filter(|l| l.starts_with("assigned"))
        .cloned()
        .collect();
    assert_eq!(assigned.len(), 4, "{assigned:#?}");
    for line in &assigned {
        // Without a snapshot an empty store replays its changelog from 0, and is wiped first.
        let from_snapshot = line.contains("counts: 0 records from ")
            && line.contains("letters: 0 records from ")
            && !line.contains("records from 0")
            && !line.contains("wiped");
        assert!(from_snapshot, "{line}");
    }
    b.stop();
    assert_exact(&bootstrap, &app, 2 * n);
}

/// `local-restore` (the figures' restore without a broker) checks what each restore rebuilt
/// and fails on a short one; here it runs at a small size, with a task left without keys.
#[test]
fn local_restore_rebuilds_every_task_serially_and_in_parallel() {
    let dir = tempfile::tempdir().expect("dir");
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let out = output(&[
        "local-restore",
        "--dir",
        dir_arg,
        "--keys",
        "2003",
        "--parallelism",
        "4",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    // 2003 keys, 501 + 501 + 501 + 500 over the tasks, and one letters update each.
    for (line, parallelism) in lines.iter().zip(["1", "4"]) {
        assert!(
            line.contains("(2003 keys, 2007 records)")
                && line.contains(&format!("restore_parallelism {parallelism}: ")),
            "{out}"
        );
    }
    let out = output(&[
        "local-restore",
        "--dir",
        dir_arg,
        "--keys",
        "3",
        "--backend",
        "memory",
    ]);
    assert!(out.contains("(3 keys, 6 records)"), "{out}");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "the logs and stores are removed"
    );
}

/// Three instances with one standby replica: the group's leader (the first to join) is killed
/// with SIGKILL, then a follower; another instance joins; then one loses its disk (killed, its
/// state directory deleted, started again on the empty one). Standbys are promoted on the way,
/// the group never stalls, and both stores stay exact.
#[test]
fn leader_and_follower_kills_disk_loss_and_standby_promotion_keep_counts_exact() {
    let Some(bootstrap) =
        bootstrap("leader_and_follower_kills_disk_loss_and_standby_promotion_keep_counts_exact")
    else {
        return;
    };
    let (app, topic) = (unique("pwc-standby"), unique("pwc-standby-words"));
    let n = lines();
    produce(&bootstrap, &topic, 0, n);
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().expect("dir")).collect();
    let options = Options {
        standbys: 1,
        session_timeout_ms: 6_000,
        ..Options::default()
    };
    let start = |dir: &Path| Instance::start_with(&bootstrap, &topic, &app, dir, &options);
    let mut a = start(dirs[0].path());
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    let mut b = start(dirs[1].path());
    let mut c = start(dirs[2].path());
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    c.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(120));
    // Each survivor keeps a standby before the leader dies.
    let has_standby = |l: &str| l.starts_with("processed") && l.contains("standby [TaskId");
    b.wait_for(Duration::from_secs(60), has_standby);
    c.wait_for(Duration::from_secs(60), has_standby);
    produce(&bootstrap, &topic, n, 2 * n);
    a.kill();
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(240));
    produce(&bootstrap, &topic, 2 * n, 3 * n);
    b.kill();
    wait_complete_logged(
        &bootstrap,
        &topic,
        &app,
        Duration::from_secs(240),
        &mut [&mut c],
    );
    let d = start(dirs[3].path());
    produce(&bootstrap, &topic, 3 * n, 4 * n);
    c.kill();
    std::fs::remove_dir_all(dirs[2].path()).expect("lose c's disk");
    let c = start(dirs[2].path());
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(240));
    c.stop();
    d.stop();
    assert_exact(&bootstrap, &app, 4 * n);
}

/// An owner stalls in the middle of processing (15 s in one record) past its
/// `max.poll.interval.ms` (7 s): it leaves the group, its tasks move and the other instance
/// fences their changelogs and counts on. When the stall ends the old owner commits what it
/// buffered before it, as a paused process would: the commit finds the newer epoch and fails,
/// the old owner drops its tasks as fenced and rejoins, and nothing it appended counts.
#[test]
fn an_owner_stalled_past_its_poll_interval_commits_nothing_that_counts() {
    let Some(bootstrap) =
        bootstrap("an_owner_stalled_past_its_poll_interval_commits_nothing_that_counts")
    else {
        return;
    };
    let (app, topic) = (unique("pwc-stall"), unique("pwc-stall-words"));
    let n = lines();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let stalling = Options {
        commit_interval_ms: 2_000,
        session_timeout_ms: 6_000,
        max_poll_interval_ms: Some(7_000),
        // A counts about half of the 8 records a line: the stall comes halfway through.
        stall_in_record: Some((2 * n, 15_000)),
        ..Options::default()
    };
    let other = Options {
        session_timeout_ms: 6_000,
        ..Options::default()
    };
    produce(&bootstrap, &topic, 0, 1);
    let mut a = Instance::start_with(&bootstrap, &topic, &app, dirs[0].path(), &stalling);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    let mut b = Instance::start_with(&bootstrap, &topic, &app, dirs[1].path(), &other);
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    produce(&bootstrap, &topic, 1, n);
    // The stall, the move, the wake-up and A's rejoin.
    std::thread::sleep(Duration::from_secs(25));
    wait_complete(&bootstrap, &topic, &app, Duration::from_secs(240));
    let fenced = a.drain().iter().any(|l| l.starts_with("fenced"));
    a.stop();
    b.stop();
    assert_exact(&bootstrap, &app, n);
    assert_positions_never_move_back(&bootstrap, &app);
    assert!(
        fenced,
        "the stalled owner never committed after its tasks moved"
    );
}

/// Every store's position, as every reader of its changelog applies the commits, never moves
/// back: a previous owner's late commit (an older position) is not applied.
fn assert_positions_never_move_back(bootstrap: &str, app: &str) {
    for store in ["counts", "letters"] {
        let topic = format!("{app}-{store}-changelog");
        for partition in 0..4 {
            let config = KafkaConfig {
                bootstrap_servers: bootstrap.to_owned(),
                ..KafkaConfig::default()
            };
            let log = KafkaLog::open_topic(config, &topic, partition).expect("open changelog");
            let end = log.end_offset().expect("end");
            let mut reader = CommitReader::new(&log, log.start_offset().expect("start"));
            let mut last = 0;
            while reader.position() < end {
                let released = reader.read(1000).expect("read");
                if released.last_read.is_none() {
                    break;
                }
                for op in released.ops {
                    if let BatchOp::Put { key, value } = op
                        && key == POSITION_KEY
                    {
                        let topics = [String::new()];
                        let (position, _) =
                            decode_task_position(&value, &topics).expect("position");
                        let position = position[0];
                        assert!(
                            position >= last,
                            "{topic}/{partition}: the position moved back from {last} to \
                             {position}"
                        );
                        last = position;
                    }
                }
            }
        }
    }
}
