//! Processors that fail, against the real broker: a panic in the middle of a record commits
//! no part of it and loses no output of another record, on one thread and on two; a poison
//! record is failed, skipped or sent to the dead-letter topic as the handler answers, and a
//! skipped record counts nowhere; `replace_thread` starts a failed task again from its last
//! commit while the instance keeps running; failing records (panics and errors, skipped and
//! dead-lettered) are rolled back alone, under `at_least_once` and `exactly_once_v2`: none of
//! their writes or outputs counts, the handler is asked once for each, and no other record is
//! processed twice.
//!
//! The word count here writes its count, then sends one output naming its input record
//! (`<partition>:<offset>`), then fails on the record keyed `poison` (while failing is on).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use statestore_operator_stores::Json;
use statestore_tasks::handlers::DEAD_LETTER_HEADERS;
use statestore_tasks::{
    AppState, Application, ErrorAction, ProcessingGuarantee, ProcessorContext, TasksConfig,
    UncaughtErrorPolicy,
};
use support::failing::*;
use support::*;

const POISON: &str = "poison";

/// A word count on topics of its own, holding `n` records (key = a word, value = its index
/// as JSON) with the poison record in the middle, and an output topic.
struct Setup {
    bootstrap: String,
    app: String,
    input: String,
    output: String,
    dir: tempfile::TempDir,
    /// Every input record's `<partition>:<offset>`.
    records: BTreeSet<String>,
    /// Where the poison record is.
    poison: String,
    /// The counts of every word but the poison one.
    expected: BTreeMap<String, u64>,
}

impl Setup {
    fn new(bootstrap: &str, name: &str, n: u64) -> Setup {
        let (app, input, output) = (
            unique(name),
            unique(&format!("{name}-in")),
            unique(&format!("{name}-out")),
        );
        create_topic(bootstrap, &input, 4);
        create_topic(bootstrap, &output, 4);
        let mut words: Vec<(String, String)> = (0..n).map(|i| (word(i), i.to_string())).collect();
        words.insert(
            words.len() / 2,
            (POISON.to_owned(), "\"not a number\"".to_owned()),
        );
        let mut expected = BTreeMap::new();
        for (word, _) in &words {
            if word != POISON {
                *expected.entry(word.clone()).or_insert(0) += 1;
            }
        }
        let placed = produce_pairs(bootstrap, &input, &words);
        let poison = placed
            .iter()
            .zip(&words)
            .find(|(_, (word, _))| word == POISON)
            .map(|(at, _)| at.clone())
            .expect("poison produced");
        Setup {
            bootstrap: bootstrap.to_owned(),
            app,
            input,
            output,
            dir: tempfile::tempdir().expect("dir"),
            records: placed.into_iter().collect(),
            poison,
            expected,
        }
    }

    fn config(&self, threads: usize) -> TasksConfig {
        TasksConfig {
            stream_threads: threads,
            ..config(&self.bootstrap, &self.app, &self.input, self.dir.path())
        }
    }

    /// The counts held by the changelogs (the poison word left out), once they equal
    /// `expected` or after `timeout`.
    fn wait_counts(
        &self,
        expected: &BTreeMap<String, u64>,
        timeout: Duration,
    ) -> BTreeMap<String, u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let counts = changelog_counts(&self.bootstrap, &self.app, PARTITIONS);
            if &counts == expected || Instant::now() > deadline {
                return counts;
            }
            thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Counts the word, sends `<partition>:<offset>` to `output`, then, while `failing` is on,
/// fails on the poison record: with a panic when `panics`, else with the error of decoding its
/// value (a deserialization failure).
fn word_count<'a>(
    output: &'a str,
    failing: &'a AtomicBool,
    panics: bool,
) -> impl Fn(&mut ProcessorContext<'_>) -> store_api::Result<()> + Send + Sync + Clone + 'a {
    move |ctx| {
        count_word(ctx)?;
        let at = format!("{}:{}", ctx.partition(), ctx.offset());
        ctx.send(output, ctx.key(), Some(at.as_bytes()));
        if ctx.key() == Some(POISON.as_bytes()) && failing.load(Ordering::Relaxed) {
            if panics {
                panic!("the processor met {POISON}");
            }
            ctx.value_as::<u64, Json>()?;
        }
        Ok(())
    }
}

/// Runs `config` until `done` says so (or two minutes passed) or it fails; returns how it
/// ended. With one stream thread it polls with `poll`, with several it runs `run_tasks`.
fn run_until(
    config: TasksConfig,
    processor: impl Fn(&mut ProcessorContext<'_>) -> store_api::Result<()> + Send + Sync + Clone,
    done: impl Fn() -> bool + Sync,
) -> store_api::Result<()> {
    let stop = AtomicBool::new(false);
    let threads = config.stream_threads;
    let app = Application::new(config)?;
    thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !done() && !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(200));
            }
            stop.store(true, Ordering::Relaxed);
        });
        // One thread: `poll`, a record at a time with one processor; several: `run_tasks`,
        // in batches spread over the threads.
        let ended = if threads == 1 {
            poll_until(app, &stop, processor)
        } else {
            app.run_tasks(&stop, |_| processor.clone())
        };
        stop.store(true, Ordering::Relaxed);
        watcher.join().expect("watcher");
        ended
    })
}

/// Polls `app` with `processor` until `stop` is set or a poll fails, then closes it.
fn poll_until(
    mut app: Application,
    stop: &AtomicBool,
    mut processor: impl FnMut(&mut ProcessorContext<'_>) -> store_api::Result<()>,
) -> store_api::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        if let Err(err) = app.poll(Duration::from_millis(100), &mut processor) {
            let _ = app.close();
            return Err(err);
        }
    }
    app.close()
}

/// A processor that panics in the middle of the poison record, on `threads` threads: the
/// instance stops with the panic, and after a restart every word is counted exactly once
/// (the poison one too: its first, panicked write was never committed) and every input record
/// has its output (none was lost with the batch the panic interrupted).
fn a_panic_mid_record_commits_none_of_it(threads: usize) {
    let Some(bootstrap) = bootstrap("a_panic_mid_record_commits_none_of_it") else {
        return;
    };
    let setup = Setup::new(&bootstrap, "panics", 4_000);
    let failing = AtomicBool::new(true);
    let processor = word_count(&setup.output, &failing, true);
    let err = run_until(setup.config(threads), processor.clone(), || false)
        .expect_err("the panic stops the instance");
    assert!(err.to_string().contains("panicked"), "{err}");
    // The error names the record it failed on, not only a log line.
    let record = format!("{}/", setup.input);
    for part in [
        "in processing of the record at",
        record.as_str(),
        " offset ",
    ] {
        assert!(err.to_string().contains(part), "{part:?} not in: {err}");
    }

    failing.store(false, Ordering::Relaxed);
    let mut expected = setup.expected.clone();
    expected.insert(POISON.to_owned(), 1);
    let counts = changelog_counts(&bootstrap, &setup.app, PARTITIONS);
    assert!(
        counts.get(POISON).is_none_or(|&n| n == 0),
        "the panicked record's write was committed: {:?}",
        counts.get(POISON)
    );
    let wait = || setup.wait_counts(&expected, Duration::from_secs(1)) == expected;
    run_until(setup.config(threads), processor, wait).expect("the restarted instance ran");
    let counts = setup.wait_counts(&expected, Duration::from_secs(1));
    assert_eq!(counts, expected, "counts after the restart");
    let outputs: BTreeSet<String> = read_topic(&bootstrap, &setup.output)
        .into_iter()
        .filter_map(|(_, value, _)| value)
        .collect();
    let missing: Vec<&String> = setup.records.difference(&outputs).collect();
    assert!(
        missing.is_empty(),
        "{} of {} input records have no output, such as {:?}",
        missing.len(),
        setup.records.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
}

#[test]
fn a_panic_mid_record_commits_none_of_it_on_one_thread() {
    a_panic_mid_record_commits_none_of_it(1);
}

#[test]
fn a_panic_mid_record_commits_none_of_it_on_two_threads() {
    a_panic_mid_record_commits_none_of_it(2);
}

/// The poison record fails to decode: under `continue` and `dead_letter` it is skipped (its
/// word counts nowhere, its output is dropped) and the instance never stops; under
/// `dead_letter` it lands in the dead-letter topic once per failure, with its key, value and
/// the error headers. Under `fail` the instance stops.
#[test]
fn a_poison_record_is_failed_skipped_or_dead_lettered() {
    let Some(bootstrap) = bootstrap("a_poison_record_is_failed_skipped_or_dead_lettered") else {
        return;
    };
    for action in [
        ErrorAction::Fail,
        ErrorAction::Continue,
        ErrorAction::DeadLetter,
    ] {
        let setup = Setup::new(&bootstrap, "poison", 2_000);
        let dead_letters = unique("poison-dlq");
        create_topic(&bootstrap, &dead_letters, 1);
        let failing = AtomicBool::new(true);
        let config = TasksConfig {
            deserialization_error: action,
            dead_letter_topic: Some(dead_letters.clone()),
            ..setup.config(2)
        };
        let processor = word_count(&setup.output, &failing, false);
        if action == ErrorAction::Fail {
            let err = run_until(config, processor, || false).expect_err("fail stops it");
            assert_eq!(err.kind(), store_api::ErrorKind::Corruption, "{err}");
            assert!(err.to_string().contains("decoding a value"), "{err}");
            let counts = changelog_counts(&bootstrap, &setup.app, PARTITIONS);
            assert_eq!(counts.get(POISON), None, "the failed record was committed");
            continue;
        }
        let wait = || setup.wait_counts(&setup.expected, Duration::from_secs(1)) == setup.expected;
        run_until(config, processor, wait).expect("a skip never stops the instance");
        let counts = setup.wait_counts(&setup.expected, Duration::from_secs(1));
        assert_eq!(counts, setup.expected, "{action:?}: counts");
        let outputs: BTreeSet<String> = read_topic(&bootstrap, &setup.output)
            .into_iter()
            .filter_map(|(_, value, _)| value)
            .collect();
        assert!(
            !outputs.contains(&setup.poison),
            "{action:?}: the skipped record's output was sent"
        );
        assert_eq!(
            setup.records.difference(&outputs).count(),
            1,
            "{action:?}: only the skipped record lacks an output"
        );
        let letters = read_topic(&bootstrap, &dead_letters);
        if action == ErrorAction::Continue {
            assert!(
                letters.is_empty(),
                "continue sent dead letters: {letters:?}"
            );
            continue;
        }
        assert!(!letters.is_empty(), "no dead letter");
        for (key, value, headers) in &letters {
            assert_eq!(key.as_deref(), Some(POISON));
            assert_eq!(value.as_deref(), Some("\"not a number\""));
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| panic!("no header {name} in {headers:?}"))
            };
            let [_, message, topic, partition, offset] = DEAD_LETTER_HEADERS.map(header);
            assert!(!message.is_empty());
            assert_eq!(topic, setup.input);
            assert_eq!(format!("{partition}:{offset}"), setup.poison);
        }
    }
}

/// Under `replace_thread`, a record whose processing fails a few times and then succeeds is
/// processed once it succeeds, from the task's last commit: every word, the poison one
/// included, is counted exactly once, and the instance never stops.
#[test]
fn replace_thread_starts_a_failed_task_again_from_its_last_commit() {
    let Some(bootstrap) =
        bootstrap("replace_thread_starts_a_failed_task_again_from_its_last_commit")
    else {
        return;
    };
    let setup = Setup::new(&bootstrap, "replace", 2_000);
    let failures = AtomicU32::new(0);
    let failing = AtomicBool::new(true);
    let inner = word_count(&setup.output, &failing, true);
    let processor = |ctx: &mut ProcessorContext<'_>| {
        if ctx.key() == Some(POISON.as_bytes()) && failures.fetch_add(1, Ordering::Relaxed) == 2 {
            failing.store(false, Ordering::Relaxed);
        }
        inner(ctx)
    };
    let mut expected = setup.expected.clone();
    expected.insert(POISON.to_owned(), 1);
    let config = TasksConfig {
        uncaught_error: UncaughtErrorPolicy::ReplaceThread,
        ..setup.config(1)
    };
    let wait = || setup.wait_counts(&expected, Duration::from_secs(1)) == expected;
    run_until(config, processor, wait).expect("replace_thread never stops the instance");
    assert_eq!(
        setup.wait_counts(&expected, Duration::from_secs(1)),
        expected
    );
    assert!(
        failures.load(Ordering::Relaxed) >= 3,
        "the poison record was tried {} times: twice in vain, then once more",
        failures.load(Ordering::Relaxed)
    );
}

/// `poll` drives one processor for every task on the calling thread: with several stream
/// threads configured it says so instead of silently using one.
#[test]
fn poll_refuses_several_stream_threads() {
    let Some(bootstrap) = bootstrap("poll_refuses_several_stream_threads") else {
        return;
    };
    let setup = Setup::new(&bootstrap, "poll-threads", 10);
    let mut app = Application::new(setup.config(2)).expect("application");
    let failing = AtomicBool::new(false);
    let mut processor = word_count(&setup.output, &failing, false);
    let err = app
        .poll(Duration::from_millis(10), &mut processor)
        .expect_err("two threads");
    assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("run_tasks"), "{err}");
    app.close().expect("close");
}

/// The state listener hears an application's life: rebalancing until the group assigned its
/// tasks, running, then pending shutdown and not running when it closes; and `Error` when a
/// processor failure stops it.
#[test]
fn the_state_listener_hears_running_closing_and_errors() {
    let Some(bootstrap) = bootstrap("the_state_listener_hears_running_closing_and_errors") else {
        return;
    };
    let setup = Setup::new(&bootstrap, "states", 200);
    let heard = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let listen = |app: &Application| {
        let sink = std::sync::Arc::clone(&heard);
        app.set_state_listener(move |new, old| sink.lock().push((old, new)));
    };
    let failing = AtomicBool::new(false);
    let mut processor = word_count(&setup.output, &failing, true);
    let mut app = Application::new(setup.config(1)).expect("application");
    listen(&app);
    assert_eq!(app.state(), AppState::Created);
    let running = wait_until(Duration::from_secs(60), || {
        app.poll(Duration::from_millis(50), &mut processor)
            .expect("poll");
        app.state() == AppState::Running
    });
    assert!(running, "never running: {:?}", heard.lock());
    app.close().expect("close");
    let changes = std::mem::take(&mut *heard.lock());
    assert_eq!(
        changes.first(),
        Some(&(AppState::Created, AppState::Rebalancing))
    );
    assert!(
        changes.contains(&(AppState::Rebalancing, AppState::Running)),
        "{changes:?}"
    );
    assert_eq!(
        changes[changes.len() - 2..],
        [
            (AppState::Running, AppState::PendingShutdown),
            (AppState::PendingShutdown, AppState::NotRunning)
        ],
        "{changes:?}"
    );

    // On topics of its own, the poison record panics: the application goes to Error, then
    // closes.
    drop(app);
    let setup = Setup::new(&bootstrap, "states-error", 200);
    let mut processor = word_count(&setup.output, &failing, true);
    failing.store(true, Ordering::Relaxed);
    let mut app = Application::new(setup.config(1)).expect("application");
    listen(&app);
    let failed = wait_until(Duration::from_secs(60), || {
        app.poll(Duration::from_millis(50), &mut processor).is_err()
    });
    assert!(failed, "the poison record did not stop the application");
    assert_eq!(app.state(), AppState::Error);
    app.close().expect("close");
    assert_eq!(app.state(), AppState::NotRunning);
    let changes = heard.lock().clone();
    assert!(
        changes.iter().any(|&(_, new)| new == AppState::Error),
        "{changes:?}"
    );
}

/// Under `exactly_once_v2` the dead letter of a record that cannot be decoded goes in the
/// transaction that commits the skip: a `read_committed` reader sees it once, with one or two
/// stream threads.
#[test]
fn dead_letters_are_committed_once_under_exactly_once() {
    let Some(bootstrap) = bootstrap("dead_letters_are_committed_once_under_exactly_once") else {
        return;
    };
    for threads in [1, 2] {
        let setup = Setup::new(&bootstrap, "eos-dlq", 2_000);
        let dead_letters = unique("eos-dlq-letters");
        create_topic(&bootstrap, &dead_letters, 1);
        let failing = AtomicBool::new(true);
        let config = TasksConfig {
            deserialization_error: ErrorAction::DeadLetter,
            dead_letter_topic: Some(dead_letters.clone()),
            processing_guarantee: ProcessingGuarantee::ExactlyOnceV2,
            ..setup.config(threads)
        };
        let processor = word_count(&setup.output, &failing, false);
        let wait = || setup.wait_counts(&setup.expected, Duration::from_secs(1)) == setup.expected;
        run_until(config, processor, wait).expect("a dead letter never stops the instance");
        let letters = read_committed_values(&bootstrap, &dead_letters);
        assert_eq!(
            letters,
            vec!["\"not a number\"".to_owned()],
            "{threads} thread(s): the committed dead letters"
        );
    }
}

/// Failing records rolled back alone under `exactly_once_v2` on two threads: see
/// [`failing_records_cost_only_themselves`].
#[test]
fn failing_records_cost_only_themselves_under_exactly_once() {
    failing_records_cost_only_themselves(ProcessingGuarantee::ExactlyOnceV2, 2, 0);
}

/// Failing records rolled back alone under `at_least_once` on two threads.
#[test]
fn failing_records_cost_only_themselves_under_at_least_once() {
    failing_records_cost_only_themselves(ProcessingGuarantee::AtLeastOnce, 2, 0);
}

/// Failing records rolled back alone under both guarantees on one thread, driven by `poll`.
#[test]
fn failing_records_cost_only_themselves_when_polled() {
    for guarantee in [
        ProcessingGuarantee::ExactlyOnceV2,
        ProcessingGuarantee::AtLeastOnce,
    ] {
        failing_records_cost_only_themselves(guarantee, 1, 0);
    }
}
