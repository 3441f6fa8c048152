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
use support::instances::{Feeder, Instance, assert_exact, create_topics, wait_complete, watch};
use support::{BIN, unique};

use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use statestore_test_support::{Cluster, NetNamespace};

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
    create_topics(&bootstrap, &topic, &app, 3);
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
    create_topics(&bootstrap, &topic, &app, 3);
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
    // b is cut off owning a task, so that it has one to give up.
    b.wait_owning(Duration::from_secs(90));

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
