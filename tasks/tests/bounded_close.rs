//! Closing an application is bounded (issue 44: errors in seconds, never a hang): with every
//! broker unreachable behind the fault proxy (a blackhole: requests wait for answers that
//! never come, as with a coordinator that stopped answering), closing and dropping an
//! application returns within a few request timeouts, and what it committed before stays
//! committed: a new instance resumes from it with counts exact.

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use statestore_tasks::{Application, ProcessorPool, TasksConfig};
use statestore_test_support::FaultProxy;
use support::*;

const PARTITIONS: u32 = 4;
const RECORDS: u64 = 1_000;

/// The request timeout the application is given.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a close may take with the brokers unreachable: a few request timeouts, with room
/// for a loaded machine; a hang is minutes.
const CLOSE_BOUND: Duration = Duration::from_secs(3 * REQUEST_TIMEOUT.as_secs());

/// How long processing the records may take with the brokers there.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn a_close_with_the_brokers_unreachable_is_bounded_and_keeps_its_commits() {
    let Some(broker) = bootstrap("a_close_with_the_brokers_unreachable_is_bounded") else {
        return;
    };
    let proxy = FaultProxy::start(&broker).expect("the proxy");
    let (app, input) = (unique("bc"), unique("bc-in"));
    create_topic(&broker, &input, PARTITIONS as i32);
    create_changelog(&broker, &app, PARTITIONS);
    let mut expected = produce(&broker, &input, PARTITIONS, 0..RECORDS);

    let dir = tempfile::tempdir().expect("a state directory");
    let config = TasksConfig {
        // Every client's `client.id` starts with the application id: the blackhole takes them
        // all (group consumer, producer, restore consumer, admin).
        client_id: Some(app.clone()),
        request_timeout_ms: u64::try_from(REQUEST_TIMEOUT.as_millis()).expect("millis"),
        ..config(proxy.bootstrap(), &app, &input, dir.path())
    };
    let mut first = Application::new(config.clone()).expect("the first instance");
    process(&mut first, RECORDS);
    first.commit().expect("a commit with the brokers there");
    assert_eq!(changelog_counts(&broker, &app, PARTITIONS), expected);

    proxy.blackhole(&app);
    let started = Instant::now();
    let (closed_tx, closed_rx) = mpsc::channel();
    // On a thread of its own, so that a hang fails the test instead of stopping it.
    thread::spawn(move || {
        let closed = first.close();
        drop(first);
        let _ = closed_tx.send(closed);
    });
    let closed = closed_rx.recv_timeout(CLOSE_BOUND).unwrap_or_else(|_| {
        panic!("closing with the brokers unreachable took longer than {CLOSE_BOUND:?}")
    });
    eprintln!(
        "closed with the brokers unreachable in {:?}: {closed:?}",
        started.elapsed()
    );
    proxy.lift();

    // A new instance on another machine (an empty state directory) restores the counts and
    // positions committed before the blackhole, and counts every further record once.
    expected = merge(
        expected,
        produce(&broker, &input, PARTITIONS, RECORDS..2 * RECORDS),
    );
    let other_dir = tempfile::tempdir().expect("a state directory");
    let mut second = Application::new(TasksConfig {
        state_dir: other_dir.path().to_owned(),
        ..config
    })
    .expect("the second instance");
    process(&mut second, RECORDS);
    second.commit().expect("the second instance's commit");
    assert_eq!(changelog_counts(&broker, &app, PARTITIONS), expected);
    second.close().expect("the second instance's close");
}

/// Polls `app` until it processed `records` records.
fn process(app: &mut Application, records: u64) {
    let mut pool = ProcessorPool::new(|_| count_word);
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    let mut processed = 0;
    while processed < records {
        assert!(
            Instant::now() < deadline,
            "processed {processed} of {records} records in {PROCESS_TIMEOUT:?}"
        );
        let polled = app
            .poll_tasks(Duration::from_millis(100), &mut pool)
            .expect("a poll");
        processed += u64::try_from(polled).expect("a count");
    }
}

fn merge(
    mut counts: std::collections::BTreeMap<String, u64>,
    more: std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    for (word, count) in more {
        *counts.entry(word).or_insert(0) += count;
    }
    counts
}
