//! Load and pauses are not errors: an instance stopped with SIGSTOP past its session timeout,
//! a broker stopped past the instances' request timeout, or commits of a million keys at once,
//! while input flows. The instances give up what they lost (or close their tasks uncommitted
//! and open them again), rejoin and go on processing, without exiting; both stores end exact.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP` (the instance pause and the big commits run on that
//! broker; the broker pause on a one-node cluster of its own, started through
//! `scripts/broker.sh`).

mod support;
use support::instances::PARTITIONS;
use support::instances::{Feeder, Instance, assert_exact, create_topics, wait_complete, watch};
use support::{BIN, output, unique};

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use statestore_test_support::Cluster;

/// Held by each test while it runs: they run one at a time, as each loads the machine's two
/// cores on its own (the million keys) or needs its pauses to be the only ones.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// Whether `line` says the instance gave a task up after a pause.
fn gave_up(line: &str) -> bool {
    line.starts_with("lost") || line.starts_with("fenced") || line.starts_with("revoked")
}

/// Instance b is stopped for three session timeouts while input flows: the group gives its
/// tasks to a. Once resumed, b learns it lost them (or that they were fenced), rejoins, gets
/// tasks again and processes; neither exits, and the counts are exact.
#[test]
fn a_paused_owner_wakes_up_rejoins_and_keeps_processing() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "a_paused_owner_wakes_up_rejoins_and_keeps_processing",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let started = Instant::now();
    let (app, topic) = (unique("pwc-pause"), unique("pwc-pause-words"));
    create_topics(&bootstrap, &topic, &app, 1);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let names = (topic.as_str(), app.as_str());
    let feeder = Feeder::start(&bootstrap, &topic);
    let session = 6_000;
    let start = |name, dir: &tempfile::TempDir| {
        Instance::start(
            name,
            Command::new(BIN),
            &bootstrap,
            names,
            dir.path(),
            session,
        )
    };
    let mut a = start("a", &dirs[0]);
    let mut b = start("b", &dirs[1]);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    watch(Duration::from_secs(3), &mut [&mut a, &mut b]);
    // b is paused owning a task, so that it has one to give up.
    b.wait_owning(Duration::from_secs(90));

    let paused_at = b.mark();
    signal(&b, "STOP");
    eprintln!("paused b at {:?}", started.elapsed());
    a.wait_for(Duration::from_secs(60), |l| l.starts_with("assigned"));
    watch(Duration::from_millis(3 * session), &mut [&mut a]);
    signal(&b, "CONT");
    eprintln!("resumed b at {:?}", started.elapsed());
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

/// The request timeout of the broker-pause test's instances: the broker is stopped for three
/// times as long, so their changelog appends and commits time out.
const REQUEST_TIMEOUT_MS: u64 = 5_000;

/// Produces lines `from..to` to `topic`.
fn produce(bootstrap: &str, topic: &str, from: u64, to: u64) {
    let (from, to, partitions) = (from.to_string(), to.to_string(), PARTITIONS.to_string());
    output(&[
        "produce",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        &partitions,
        "--from",
        &from,
        "--lines",
        &to,
    ]);
}

/// The only broker is stopped with SIGSTOP for three request timeouts while two instances
/// work through a backlog (a millisecond of work per record): their changelog appends and
/// commits time out. Each closes the tasks whose commit timed out without committing and
/// opens them again from the changelogs; once the broker is back both go on, neither exits,
/// and the counts are exact.
#[test]
fn a_broker_paused_past_the_request_timeout_is_not_fatal() {
    if statestore_test_support::kafka_bootstrap(
        "a_broker_paused_past_the_request_timeout_is_not_fatal",
    )
    .is_none()
    {
        return;
    }
    let _alone = one_at_a_time();
    let started = Instant::now();
    let cluster = Cluster::start(1);
    let bootstrap = cluster.bootstrap().to_owned();
    let (app, topic) = (unique("pwc-stall"), unique("pwc-stall-words"));
    create_topics(&bootstrap, &topic, &app, 1);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let names = (topic.as_str(), app.as_str());
    let timeout = REQUEST_TIMEOUT_MS.to_string();
    let start = |name, dir: &tempfile::TempDir| {
        let extra = [
            "--request-timeout-ms",
            timeout.as_str(),
            "--work-us",
            "1000",
        ];
        Instance::start_with(
            name,
            Command::new(BIN),
            &bootstrap,
            names,
            dir.path(),
            10_000,
            &extra,
        )
    };
    let mut a = start("a", &dirs[0]);
    let mut b = start("b", &dirs[1]);
    // Both in the group before the first lines, so that each gets some of them: an instance
    // that joins after the other counted them all sees no record until the next lines.
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    produce(&bootstrap, &topic, 0, 100);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    // About 11 s of work for each instance: still under way while the broker is stopped.
    let lines = 3_000;
    produce(&bootstrap, &topic, 100, lines);
    watch(Duration::from_secs(1), &mut [&mut a, &mut b]);

    cluster.pause(1);
    eprintln!("paused the broker at {:?}", started.elapsed());
    watch(
        Duration::from_millis(3 * REQUEST_TIMEOUT_MS),
        &mut [&mut a, &mut b],
    );
    cluster.resume(1);
    eprintln!("resumed the broker at {:?}", started.elapsed());
    wait_complete(
        &bootstrap,
        names,
        Duration::from_secs(180),
        &mut [&mut a, &mut b],
    );
    a.stop();
    b.stop();
    assert_exact(&bootstrap, &app, lines);
    eprintln!("{lines} lines counted exactly in {:?}", started.elapsed());
}

/// Distinct keys of the big-commit test; `STATESTORE_BIG_COMMIT_KEYS` scales it.
fn big_commit_keys() -> u64 {
    std::env::var("STATESTORE_BIG_COMMIT_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// One instance counts a million distinct keys with a commit interval of 30 s: each commit is
/// one of full 16 MiB buffers, which hands hundreds of thousands of records to the producer at
/// once (more than its queue holds). It is killed with SIGKILL half-way and started again. It
/// never exits on its own, and every key is counted once.
#[test]
fn a_million_keys_in_big_commits_are_counted_once_across_a_kill() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "a_million_keys_in_big_commits_are_counted_once_across_a_kill",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let started = Instant::now();
    let keys = big_commit_keys();
    let (app, topic) = (unique("pwc-big"), unique("pwc-big-keys"));
    create_topics(&bootstrap, &topic, &app, 1);
    let (to, partitions) = (keys.to_string(), PARTITIONS.to_string());
    output(&[
        "produce",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--partitions",
        &partitions,
        "--lines",
        &to,
        "--distinct-keys",
    ]);
    eprintln!("produced {keys} keys in {:?}", started.elapsed());
    let dir = tempfile::tempdir().expect("dir");
    let names = (topic.as_str(), app.as_str());
    let extra = ["--commit-interval-ms", "30000"];
    let start = || {
        Instance::start_with(
            "a",
            Command::new(BIN),
            &bootstrap,
            names,
            dir.path(),
            10_000,
            &extra,
        )
    };
    let mut a = start();
    let half = keys / 2;
    a.wait_for(Duration::from_secs(300), |l| {
        l.strip_prefix("processed ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n >= half)
    });
    a.child.kill().expect("kill -9");
    let _ = a.child.wait();
    eprintln!("killed the instance at {:?}", started.elapsed());
    let mut a = start();
    wait_complete(&bootstrap, names, Duration::from_secs(600), &mut [&mut a]);
    a.stop();
    let counted = output(&[
        "counts",
        "--bootstrap",
        &bootstrap,
        "--application-id",
        &app,
        "--partitions",
        &partitions,
        "--store",
        "counts",
    ]);
    let mut seen = 0u64;
    for line in counted.lines() {
        let (key, count) = line.split_once('\t').expect("key<TAB>count");
        assert_eq!(count, "1", "key {key} counted {count} times");
        seen += 1;
    }
    assert_eq!(seen, keys, "keys counted");
    let letters = output(&[
        "counts",
        "--bootstrap",
        &bootstrap,
        "--application-id",
        &app,
        "--partitions",
        &partitions,
        "--store",
        "letters",
    ]);
    assert_eq!(letters.trim(), format!("k\t{keys}"), "letters");
    eprintln!("{keys} keys counted once in {:?}", started.elapsed());
}
