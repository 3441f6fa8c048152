//! Closing an application is bounded (issue 44: errors in seconds, never a hang): with every
//! broker unreachable behind the fault proxy (a blackhole: requests wait for answers that
//! never come, as with a coordinator that stopped answering), closing and dropping an
//! application returns within a few request timeouts, under at-least-once and exactly-once,
//! and what it committed before stays committed: a new instance resumes from it with counts
//! exact. A close that cannot commit what it processed since returns a `Timeout` within the
//! bound, and a new instance processes those records again, counting them once.

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use statestore_tasks::{Application, ProcessingGuarantee, ProcessorPool, TasksConfig};
use statestore_test_support::FaultProxy;
use store_api::ErrorKind;
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
    close_unreachable(
        "a_close_with_the_brokers_unreachable_is_bounded",
        ProcessingGuarantee::AtLeastOnce,
        0,
    );
}

/// Records processed since the last commit cannot be committed: the close fails within the
/// bound, and under at-least-once nothing is lost (a new owner processes them again, and the
/// stores' positions keep the counts exact).
#[test]
fn a_close_that_cannot_commit_is_bounded_and_loses_nothing() {
    close_unreachable(
        "a_close_that_cannot_commit_is_bounded",
        ProcessingGuarantee::AtLeastOnce,
        100,
    );
}

#[test]
fn an_exactly_once_close_with_the_brokers_unreachable_is_bounded() {
    close_unreachable(
        "an_exactly_once_close_with_the_brokers_unreachable_is_bounded",
        ProcessingGuarantee::ExactlyOnceV2,
        0,
    );
}

/// Runs an application through the fault proxy that processes and commits [`RECORDS`]
/// records, then processes `uncommitted` more, blackholes every client, and closes and drops
/// it, which must take less than [`CLOSE_BOUND`]; then a new instance on an empty state
/// directory must count every record once.
fn close_unreachable(test: &str, guarantee: ProcessingGuarantee, uncommitted: u64) {
    let Some(broker) = bootstrap(test) else {
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
        processing_guarantee: guarantee,
        // Only the explicit commit below commits.
        commit_interval_ms: 600_000,
        ..config(proxy.bootstrap(), &app, &input, dir.path())
    };
    let mut first = Application::new(config.clone()).expect("the first instance");
    process(&mut first, RECORDS);
    first.commit().expect("a commit with the brokers there");
    assert_eq!(changelog_counts(&broker, &app, PARTITIONS), expected);
    let late = 10 * RECORDS..10 * RECORDS + uncommitted;
    expected = merge(expected, produce(&broker, &input, PARTITIONS, late));
    process(&mut first, uncommitted);

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
        "{test}: closed with the brokers unreachable in {:?}: {closed:?}",
        started.elapsed()
    );
    if uncommitted > 0 {
        let err = closed.expect_err("a close that could not commit");
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
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
    process(&mut second, RECORDS + uncommitted);
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
