//! `exactly_once_v2` against the real broker, with instance processes that send one output
//! per input record (`<partition>:<offset>` of the input): killed with SIGKILL at random
//! moments, paused past their session, or aborting a transaction on purpose, every input
//! record has exactly one output in a `read_committed` read of the output topic, and both
//! stores' changelogs hold exact counts.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP`; without it the tests print one SKIP line and pass.

mod support;
use support::instances::{
    Feeder, Instance, PARTITIONS, assert_exact, create_topics, wait_complete, watch,
};
use support::outputs::{ends, read_committed, reader};
use support::{BIN, unique};

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::Message;

/// The tests run one at a time: each loads the machine's two cores on its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const SESSION_TIMEOUT_MS: u64 = 6_000;

/// The input topic, the application and the output topic of one test, created.
struct Names {
    topic: String,
    app: String,
    output: String,
}

impl Names {
    fn create(bootstrap: &str, prefix: &str) -> Names {
        Names::create_replicated(bootstrap, prefix, 1)
    }

    /// [`create`](Names::create) with input and changelog topics of `replicas` replicas (the
    /// output topic takes the brokers' default).
    fn create_replicated(bootstrap: &str, prefix: &str, replicas: i32) -> Names {
        let names = Names {
            topic: unique(&format!("{prefix}-words")),
            app: unique(prefix),
            output: unique(&format!("{prefix}-out")),
        };
        create_topics(bootstrap, &names.topic, &names.app, replicas);
        statestore_tasks::create_topic(bootstrap, &names.output, PARTITIONS).expect("output");
        names
    }

    /// Starts an exactly-once instance that sends an output per record, with `extra`
    /// arguments.
    fn start(
        &self,
        name: &'static str,
        bootstrap: &str,
        dir: &tempfile::TempDir,
        extra: &[&str],
    ) -> Instance {
        let mut args = vec![
            "--processing-guarantee",
            "exactly_once_v2",
            "--output-topic",
            &self.output,
        ];
        args.extend_from_slice(extra);
        Instance::start_with(
            name,
            Command::new(BIN),
            bootstrap,
            (&self.topic, &self.app),
            dir.path(),
            SESSION_TIMEOUT_MS,
            &args,
        )
    }
}

/// How many outputs each input record `(partition, offset)` has in a `read_committed` read
/// of the whole output topic.
fn outputs(bootstrap: &str, topic: &str) -> BTreeMap<(i32, i64), u32> {
    let mut counts = BTreeMap::new();
    read_committed(bootstrap, topic, |message| {
        let value = std::str::from_utf8(message.payload().expect("value")).expect("utf-8");
        let (partition, offset) = value.split_once(':').expect("partition:offset");
        let input = (
            partition.parse().expect("partition"),
            offset.parse().expect("offset"),
        );
        *counts.entry(input).or_insert(0) += 1;
    });
    counts
}

/// Stops `feeder`, waits up to `timeout_s` seconds until `instances` processed every line it
/// fed, stops them, and checks that every input has exactly one output and the stores are
/// exact. Returns the lines fed.
fn finish(
    bootstrap: &str,
    names: &Names,
    feeder: Feeder,
    timeout_s: u64,
    mut instances: Vec<Instance>,
) -> u64 {
    let lines = feeder.stop();
    wait_complete(
        bootstrap,
        (&names.topic, &names.app),
        Duration::from_secs(timeout_s),
        &mut instances.iter_mut().collect::<Vec<_>>(),
    );
    for instance in instances {
        instance.stop();
    }
    assert_each_output_once(bootstrap, names);
    assert_exact(bootstrap, &names.app, lines);
    lines
}

/// Every record of the input topic has exactly one output.
fn assert_each_output_once(bootstrap: &str, names: &Names) {
    let inputs = ends(&reader(bootstrap), &names.topic);
    let counts = outputs(bootstrap, &names.output);
    let mut missing = Vec::new();
    for (p, &end) in (0..PARTITIONS).zip(&inputs) {
        for offset in 0..end {
            if !counts.contains_key(&(p, offset)) {
                missing.push((p, offset));
            }
        }
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let total: i64 = inputs.iter().sum();
    let outputs: u64 = counts.values().map(|&n| u64::from(n)).sum();
    assert!(
        missing.is_empty() && twice.is_empty(),
        "{total} inputs, {outputs} outputs: {} inputs without output (first {:?}), {} with \
         several (first {:?})",
        missing.len(),
        missing.first(),
        twice.len(),
        twice.first()
    );
    assert_eq!(outputs, u64::try_from(total).expect("total"));
    eprintln!("{total} inputs, each with exactly one committed output");
}

/// A number from the clock, for the random moments of the kills.
fn random_below(bound: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) % bound
}

/// Two instances, one processing on one thread and the other on two, are killed with
/// SIGKILL at random moments of their processing over several rounds while input flows,
/// each started again on its state directory at once; then the input is drained. Under
/// `at_least_once` this test fails: outputs sent before a kill are sent again.
#[test]
fn kill_9_at_random_moments_leaves_each_output_exactly_once() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "kill_9_at_random_moments_leaves_each_output_exactly_once",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let started = Instant::now();
    let names = Names::create(&bootstrap, "pwc-eos-kill");
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let threads = ["1", "2"];
    // Static members, restarted at once on their own state directory: each gets its tasks
    // back without waiting for its session to end, so most kills find it processing, with
    // outputs sent since its last commit (one a second).
    let ids = [format!("{}-a", names.app), format!("{}-b", names.app)];
    let start = |i: usize| {
        let name = ["a", "b"][i];
        let args = [
            "--threads",
            threads[i],
            "--group-instance-id",
            &ids[i],
            "--commit-interval-ms",
            "1000",
        ];
        names.start(name, &bootstrap, &dirs[i], &args)
    };
    let feeder = Feeder::start(&bootstrap, &names.topic);
    let mut instances = [start(0), start(1)];
    for instance in &mut instances {
        instance.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    }
    for round in 0..6 {
        let victim = usize::try_from(random_below(2)).expect("index");
        instances[victim].wait_after(0, Duration::from_secs(60), |l| {
            l.starts_with("first record")
        });
        let wait = Duration::from_millis(300 + random_below(1_700));
        let [a, b] = &mut instances;
        watch(wait, &mut [a, b]);
        instances[victim].child.kill().expect("kill -9");
        instances[victim].child.wait().expect("wait");
        eprintln!(
            "round {round}: killed {} after {wait:?}, at {:?}",
            instances[victim].name,
            started.elapsed()
        );
        instances[victim] = start(victim);
    }
    let [a, b] = &mut instances;
    watch(Duration::from_secs(2), &mut [a, b]);
    let lines = finish(&bootstrap, &names, feeder, 180, Vec::from(instances));
    eprintln!("{lines} lines exactly once in {:?}", started.elapsed());
}

/// Instance b is paused (SIGSTOP) past its session timeout but within its transaction
/// timeout, with a transaction open, while input flows: the group gives its tasks to a.
/// Resumed, b's transaction is refused (its group generation is gone) and aborted, and b
/// drops its tasks and rejoins; nothing it sent or logged in that transaction is visible.
#[test]
fn a_zombie_past_its_session_leaves_nothing_visible() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "a_zombie_past_its_session_leaves_nothing_visible",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let started = Instant::now();
    let names = Names::create(&bootstrap, "pwc-eos-zombie");
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let feeder = Feeder::start(&bootstrap, &names.topic);
    // Commits 3 s apart: b's transaction is open for most of the time input flows, and
    // still open when b resumes, 8 s later: only the brokers' fencing keeps it from
    // committing.
    let args = [
        "--commit-interval-ms",
        "3000",
        "--transaction-timeout-ms",
        "30000",
    ];
    let mut a = names.start("a", &bootstrap, &dirs[0], &args);
    let mut b = names.start("b", &bootstrap, &dirs[1], &args);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    watch(Duration::from_secs(2), &mut [&mut a, &mut b]);
    // b is paused owning a task, so that it has one to give up.
    b.wait_owning(Duration::from_secs(90));

    let paused_at = b.mark();
    let taken_at = a.mark();
    signal(&b, "STOP");
    // Past the session (6 s), within the transaction timeout (30 s): a is assigned b's
    // tasks while b's transaction, holding outputs of records a processes again, is open.
    watch(
        Duration::from_millis(SESSION_TIMEOUT_MS + 2_000),
        &mut [&mut a],
    );
    signal(&b, "CONT");
    eprintln!("resumed b at {:?}", started.elapsed());
    a.wait_after(taken_at, Duration::from_secs(60), |l| {
        l.starts_with("assigned")
    });
    let gave_up = |l: &str| l.starts_with("lost") || l.starts_with("fenced");
    b.wait_after(paused_at, Duration::from_secs(90), gave_up);
    let gave_up_at = b
        .log
        .iter()
        .skip(paused_at)
        .position(|l| gave_up(l))
        .map_or(paused_at, |at| paused_at + at);
    b.wait_after(gave_up_at, Duration::from_secs(90), |l| {
        l.starts_with("assigned")
    });
    watch(Duration::from_secs(2), &mut [&mut a, &mut b]);
    for line in b.log.iter().skip(paused_at) {
        if !line.starts_with("processed") {
            eprintln!("b: {line}");
        }
    }

    let lines = finish(&bootstrap, &names, feeder, 120, vec![a, b]);
    eprintln!("{lines} lines exactly once in {:?}", started.elapsed());
}

/// Each instance in turn is paused (SIGSTOP) past its session timeout and past its
/// transaction timeout, while input flows with outputs: the coordinator aborts its open
/// transaction and bumps its producer's epoch, and the group gives its tasks to the other.
/// Resumed, the zombie finds its producer fenced: it drops its tasks without opening them
/// again (which would fence the changelogs of their new owner) and rejoins. Every input has
/// exactly one output to a `read_committed` reader after both rounds.
#[test]
fn a_zombie_past_its_transaction_timeout_steps_aside() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "a_zombie_past_its_transaction_timeout_steps_aside",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let started = Instant::now();
    let names = Names::create(&bootstrap, "pwc-eos-paused");
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let feeder = Feeder::start(&bootstrap, &names.topic);
    let args = [
        "--commit-interval-ms",
        "1000",
        "--transaction-timeout-ms",
        "10000",
    ];
    let mut instances = vec![
        names.start("a", &bootstrap, &dirs[0], &args),
        names.start("b", &bootstrap, &dirs[1], &args),
    ];
    for instance in &mut instances {
        instance.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    }
    for paused in [1, 0] {
        let other = 1 - paused;
        watch(
            Duration::from_secs(3),
            &mut instances.iter_mut().collect::<Vec<_>>(),
        );
        let paused_at = instances[paused].mark();
        signal(&instances[paused], "STOP");
        // Past the session (6 s) and the transaction timeout (10 s).
        watch(Duration::from_secs(16), &mut [&mut instances[other]]);
        signal(&instances[paused], "CONT");
        eprintln!(
            "resumed {} at {:?}",
            instances[paused].name,
            started.elapsed()
        );
        let gave_up = |l: &str| l.starts_with("lost") || l.starts_with("fenced");
        instances[paused].wait_after(paused_at, Duration::from_secs(90), gave_up);
        instances[paused].wait_after(paused_at, Duration::from_secs(90), |l| {
            l.starts_with("assigned")
        });
        for line in instances[paused].log.iter().skip(paused_at) {
            if !line.starts_with("processed") {
                eprintln!("{}: {line}", instances[paused].name);
            }
        }
    }
    let lines = finish(&bootstrap, &names, feeder, 120, instances);
    eprintln!("{lines} lines exactly once in {:?}", started.elapsed());
}

/// The fifth commit's transaction is aborted after its outputs and changelog records were
/// sent: every task goes back to its last commit from its local files, which the abort left
/// as they were: checkpointed at every commit, they are opened again without a record
/// replayed (no store with a commit is wiped or rebuilt), then process again and end exact. Were the
/// aborted writes in the files, the counts would not be exact.
#[test]
fn an_aborted_transaction_leaves_the_stores_at_their_last_commit() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "an_aborted_transaction_leaves_the_stores_at_their_last_commit",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let names = Names::create(&bootstrap, "pwc-eos-abort");
    let dir = tempfile::tempdir().expect("dir");
    let feeder = Feeder::start(&bootstrap, &names.topic);
    let args = ["--abort-in-commit", "5", "--checkpoint-every-commit"];
    let mut a = names.start("a", &bootstrap, &dir, &args);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    let opened = a.mark();
    // Revived tasks are assigned again, restored from their own files.
    a.wait_after(opened, Duration::from_secs(60), |l| l.starts_with("lost"));
    a.wait_for(Duration::from_secs(60), |l| l.starts_with("assigned"));
    watch(Duration::from_secs(2), &mut [&mut a]);
    let reopened: Vec<&String> = a
        .log
        .iter()
        .skip(opened)
        .filter(|l| l.starts_with("assigned"))
        .collect();
    // A task whose first records were all in the aborted transaction had nothing committed
    // ("offset None"): its files hold only aborted writes, and it is rightly started empty.
    // The four commits before the abort committed at least the task of the first record.
    let committed: Vec<&&String> = reopened
        .iter()
        .filter(|l| !l.contains("at offset None"))
        .collect();
    assert!(
        !committed.is_empty(),
        "no reopened task had a commit: {reopened:?}"
    );
    for line in &reopened {
        let replayed_nothing =
            line.contains("counts: 0 records") && line.contains("letters: 0 records");
        assert!(replayed_nothing, "{line}");
    }
    for line in &committed {
        assert!(!line.contains("wiped"), "{line}");
    }
    finish(&bootstrap, &names, feeder, 120, vec![a]);
}

/// The nodes coordinating the transactions of `app`'s instances, from Apache Kafka's own tool.
fn coordinators(bootstrap: &str, app: &str) -> Vec<usize> {
    let out = Command::new("java")
        .args(["-cp", &statestore_test_support::kafka_classpath()])
        .args([
            "org.apache.kafka.tools.TransactionsCommand",
            "--bootstrap-server",
        ])
        .args([bootstrap, "list"])
        .output()
        .expect("running kafka's TransactionsCommand");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "TransactionsCommand list: {listed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Columns: TransactionalId, Coordinator, ProducerId, TransactionState.
    let prefix = format!("{app}-");
    let mut nodes: Vec<usize> = listed
        .lines()
        .filter_map(|line| {
            let mut columns = line.split_whitespace();
            let id = columns.next()?;
            let node = columns.next()?.parse().ok()?;
            id.starts_with(&prefix).then_some(node)
        })
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// On a 3-node cluster (every topic at 3 replicas), the node coordinating an instance's
/// transactions is killed with SIGKILL while both instances process, and restarted 10 s
/// later, twice (another instance's coordinator the second time when they differ): every
/// task keeps being processed to the end of its input, each input has exactly one output,
/// and the stores are exact.
#[test]
fn a_killed_transaction_coordinator_leaves_no_task_behind() {
    let Some(_) = statestore_test_support::kafka_bootstrap(
        "a_killed_transaction_coordinator_leaves_no_task_behind",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let started = Instant::now();
    let cluster = statestore_test_support::Cluster::start(3);
    let bootstrap = cluster.bootstrap().to_owned();
    let names = Names::create_replicated(&bootstrap, "pwc-eos-coordinator", 3);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let feeder = Feeder::start(&bootstrap, &names.topic);
    let args = ["--commit-interval-ms", "1000"];
    let mut a = names.start("a", &bootstrap, &dirs[0], &args);
    let mut b = names.start("b", &bootstrap, &dirs[1], &args);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    for round in 0..2 {
        watch(Duration::from_secs(3), &mut [&mut a, &mut b]);
        let nodes = coordinators(&bootstrap, &names.app);
        assert!(!nodes.is_empty(), "no transaction of {} listed", names.app);
        let victim = nodes[round % nodes.len()];
        cluster.kill(victim);
        eprintln!(
            "round {round}: killed coordinator {victim} of {nodes:?} at {:?}",
            started.elapsed()
        );
        watch(Duration::from_secs(10), &mut [&mut a, &mut b]);
        cluster.restart(victim);
        watch(Duration::from_secs(10), &mut [&mut a, &mut b]);
    }
    let lines = finish(&bootstrap, &names, feeder, 180, vec![a, b]);
    eprintln!("{lines} lines exactly once in {:?}", started.elapsed());
}

/// Sends `signal` (`STOP` or `CONT`) to `instance`.
fn signal(instance: &Instance, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(instance.child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} failed");
}
