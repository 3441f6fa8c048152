//! Brokers slower than the request timeout are not an error of the instance: the only broker
//! of a cluster of the test's own is stopped with SIGSTOP for three request timeouts while an
//! application with outputs processes a backlog. Its output deliveries, flushes and commits
//! time out; the tasks concerned go back to their last commit and process again, the
//! instance never stops, and once the broker is back every count is exact and every input
//! record has its output.

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use statestore_tasks::{Application, ProcessorContext, TasksConfig};
use statestore_test_support::Cluster;
use support::*;

const PARTITIONS: u32 = 4;

/// The request timeout; the broker stays stopped three times as long.
const REQUEST_TIMEOUT_MS: u64 = 4_000;

#[test]
fn outputs_and_commits_that_time_out_are_processed_again_not_fatal() {
    if bootstrap("outputs_and_commits_that_time_out_are_processed_again_not_fatal").is_none() {
        return;
    }
    let cluster = Cluster::start(1);
    let bootstrap = cluster.bootstrap().to_owned();
    let (app, input, output) = (unique("slow"), unique("slow-in"), unique("slow-out"));
    create_topic(&bootstrap, &input, 4);
    create_topic(&bootstrap, &output, 4);
    let n = 6_000;
    let expected = produce(&bootstrap, &input, PARTITIONS, 0..n);
    let dir = tempfile::tempdir().expect("dir");
    let config = TasksConfig {
        request_timeout_ms: REQUEST_TIMEOUT_MS,
        stream_threads: 2,
        ..config(&bootstrap, &app, &input, dir.path())
    };
    let stop = AtomicBool::new(false);
    // About 6 s of work for each of the two threads: under way while the broker is stopped.
    let processor = |ctx: &mut ProcessorContext<'_>| {
        let started = Instant::now();
        while started.elapsed() < Duration::from_micros(2_000) {
            std::hint::spin_loop();
        }
        count_word(ctx)?;
        let at = format!("{}:{}", ctx.partition(), ctx.offset());
        ctx.send(&output, ctx.key(), Some(at.as_bytes()));
        Ok(())
    };
    let ended = thread::scope(|scope| {
        let running = scope.spawn(|| Application::new(config)?.run_tasks(&stop, |_| processor));
        thread::sleep(Duration::from_secs(3));
        cluster.pause(1);
        thread::sleep(Duration::from_millis(3 * REQUEST_TIMEOUT_MS));
        cluster.resume(1);
        let done = wait_until(Duration::from_secs(180), || {
            running.is_finished()
                || try_changelog_counts(&bootstrap, &app, PARTITIONS)
                    .ok()
                    .as_ref()
                    == Some(&expected)
        });
        stop.store(true, Ordering::Relaxed);
        let ended = running.join().expect("instance thread");
        assert!(done, "the counts never became exact");
        ended
    });
    ended.expect("the instance ran through the broker's stop without an error");
    assert_eq!(changelog_counts(&bootstrap, &app, PARTITIONS), expected);
    let outputs: BTreeSet<String> = read_topic(&bootstrap, &output)
        .into_iter()
        .filter_map(|(_, value, _)| value)
        .collect();
    let inputs: usize = expected.values().map(|&count| count as usize).sum();
    assert_eq!(
        outputs.len(),
        inputs,
        "input records with an output, of {inputs}"
    );
}
