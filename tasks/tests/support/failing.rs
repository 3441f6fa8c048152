//! The failing-records scenario: records that fail (panics and errors, skipped and
//! dead-lettered) among thousands, with the checks that each failing record costs only itself.
//! Shared by `failures` and `failure_aborts` (which aborts transactions on purpose, with the
//! `failpoints` feature, in a process of its own).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use statestore_changelog::EPOCH_KEY;
use statestore_operator_stores::window::{PutOutcome, WindowStore};
use statestore_tasks::{
    Application, ErrorAction, POSITION_KEY, ProcessingGuarantee, ProcessorContext, ReadFrom,
    StoreHandle, StoreKind, StoreSpec, TasksConfig,
};

use super::*;

/// The partitions of the scenarios' input topics.
pub const PARTITIONS: u32 = 4;

/// Produces `(key, value)` records to `topic`, each key to partition [`partition_of`], and
/// returns each record's `<partition>:<offset>`.
pub fn produce_pairs(bootstrap: &str, topic: &str, records: &[(String, String)]) -> Vec<String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    // One partition at a time, in order: the offsets follow from the order of sends.
    let mut next = BTreeMap::new();
    let mut placed = Vec::new();
    for (key, value) in records {
        let partition = partition_of(key, PARTITIONS);
        let offset = next.entry(partition).or_insert(0u64);
        placed.push(format!("{partition}:{offset}"));
        *offset += 1;
        let record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(value.as_bytes())
            .partition(partition);
        send_waiting(&producer, record);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    placed
}

/// What a failing record does to the keys it fails with: how it fails, and the handler's
/// answer. The record's key names both.
pub const FAILING_KINDS: [(&str, bool, ErrorAction); 4] = [
    ("fail-panic-continue", true, ErrorAction::Continue),
    ("fail-error-continue", false, ErrorAction::Continue),
    ("fail-panic-dead", true, ErrorAction::DeadLetter),
    ("fail-error-dead", false, ErrorAction::DeadLetter),
];

/// The failing kind of `key`, if it is a failing record's.
pub fn failing_kind(key: &[u8]) -> Option<(bool, ErrorAction)> {
    let key = std::str::from_utf8(key).ok()?;
    FAILING_KINDS
        .iter()
        .find(|(prefix, _, _)| key.starts_with(prefix))
        .map(|&(_, panics, action)| (panics, action))
}

/// A failing record rolled back alone, under `guarantee` on `threads` stream threads (one:
/// driven by `poll`, one record at a time; several: by `run_tasks`, in batches): `n`
/// records of words, among which `2 * FAILING_KINDS.len()` failing ones (panics and errors,
/// answered `Continue` and `DeadLetter`). Every record counts its word in store `counts`,
/// marks itself in stores `seen`, `local` (logging off) and `windows` (a window store, a day
/// ahead for a failing record) and sends `<partition>:<offset>`, and only then does a failing
/// one fail. So each failing record has partial writes in every
/// store and an output when it fails: none of them may reach a changelog, the unlogged store
/// or the output topic. The handler is
/// asked once per failing record and the processor is called once per record: no task goes
/// back to its last commit, none processes anything again. Dead letters: once each. Under
/// `exactly_once_v2` the output, dead-letter and changelog topics are read `read_committed`.
///
/// With `aborts` above 0 the caller has set fail point `transaction-before-commit` to abort
/// that many transactions (`exactly_once_v2`): each sends every task back to its last commit
/// (closed without committing and opened again), so records are processed again, but no
/// failing record is: the copy opened again passes over the records its predecessor skipped,
/// and the handler is still asked once per failing record; outputs and dead letters are still
/// read once each, and the dead-letter metric counts each once.
pub fn failing_records_cost_only_themselves(
    guarantee: ProcessingGuarantee,
    threads: usize,
    aborts: u32,
) {
    let Some(bootstrap) = bootstrap("failing_records_cost_only_themselves") else {
        return;
    };
    prometheus();
    let name = format!("alone-{threads}");
    let (app, input, output, letters_topic) = (
        unique(&name),
        unique(&format!("{name}-in")),
        unique(&format!("{name}-out")),
        unique(&format!("{name}-dlq")),
    );
    create_topic(&bootstrap, &input, 4);
    create_topic(&bootstrap, &output, 4);
    create_topic(&bootstrap, &letters_topic, 1);
    let n = 6_000u64;
    let mut records: Vec<(String, String)> = (0..n).map(|i| (word(i), i.to_string())).collect();
    let failing: Vec<String> = FAILING_KINDS
        .iter()
        .flat_map(|(prefix, _, _)| (0..2).map(move |i| format!("{prefix}-{i}")))
        .collect();
    for (i, key) in failing.iter().enumerate() {
        let at = (i + 1) * records.len() / (failing.len() + 1);
        records.insert(at, (key.clone(), format!("\"{key}\"")));
    }
    let placed = produce_pairs(&bootstrap, &input, &records);
    let mut expected_counts = BTreeMap::new();
    let mut expected_seen = BTreeSet::new();
    let mut expected_letters = Vec::new();
    let mut failed_at = BTreeSet::new();
    for ((key, value), at) in records.iter().zip(&placed) {
        match failing_kind(key.as_bytes()) {
            None => {
                *expected_counts.entry(key.clone()).or_insert(0) += 1;
                expected_seen.insert(at.clone());
            }
            Some((_, action)) => {
                failed_at.insert(at.clone());
                if action == ErrorAction::DeadLetter {
                    expected_letters.push(value.clone());
                }
            }
        }
    }
    expected_letters.sort();

    let dir = tempfile::tempdir().expect("dir");
    let config = TasksConfig {
        stream_threads: threads,
        processing_guarantee: guarantee,
        dead_letter_topic: Some(letters_topic.clone()),
        stores: vec![
            StoreSpec::new("counts", "redb"),
            StoreSpec::new("seen", "memory"),
            StoreSpec::new("local", "memory").with_logging(false),
            StoreSpec::new("windows", "memory").with_kind(StoreKind::Window {
                retention_ms: 3_600_000,
                segment_interval_ms: None,
                retain_duplicates: false,
            }),
        ],
        ..config(&bootstrap, &app, &input, dir.path())
    };
    let windows: StoreHandle<WindowStore> = StoreHandle::new(&config, "windows").expect("handle");
    let handled = std::sync::Arc::new(Mutex::new(Vec::new()));
    let calls: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());
    let processor = |ctx: &mut ProcessorContext<'_>| -> store_api::Result<()> {
        let at = format!("{}:{}", ctx.partition(), ctx.offset());
        *calls.lock().expect("calls").entry(at.clone()).or_insert(0) += 1;
        count_word(ctx)?;
        ctx.store("seen")?.put(at.as_bytes(), b"1")?;
        ctx.store("local")?.put(at.as_bytes(), b"1")?;
        // A failing record's window is a day ahead: were the window store's stream time left
        // there after the roll-back, every later window of its task would be refused as
        // expired, which fails that record.
        let failing = ctx.key().and_then(failing_kind).is_some();
        let start = ctx.timestamp().unwrap_or(0) + if failing { 86_400_000 } else { 0 };
        let written = ctx.store_of(&windows)?.put(at.as_bytes(), b"1", start)?;
        if written != PutOutcome::Written(1) {
            return Err(store_api::Error::invalid(format!(
                "window of {at}: {written:?}"
            )));
        }
        ctx.send(&output, ctx.key(), Some(at.as_bytes()));
        match ctx.key().and_then(failing_kind) {
            Some((true, _)) => panic!("the processor met a failing record at {at}"),
            Some((false, _)) => Err(store_api::Error::invalid(format!("failing at {at}"))),
            None => Ok(()),
        }
    };
    let asked = std::sync::Arc::clone(&handled);
    let handler = move |failure: &statestore_tasks::Failure| {
        let record = failure.record.as_ref().expect("a record");
        asked
            .lock()
            .expect("handled")
            .push(format!("{}:{}", record.partition, record.offset));
        record
            .key
            .as_deref()
            .and_then(failing_kind)
            .map_or(ErrorAction::Fail, |(_, action)| action)
    };
    let wait = || {
        try_changelog_counts(&bootstrap, &app, PARTITIONS).is_ok_and(|c| c == expected_counts)
            && calls.lock().expect("calls").len() == records.len()
    };
    let stop = AtomicBool::new(false);
    let mut application = Application::new(config).expect("application");
    application.set_error_handler(handler);
    let queries = application.queries();
    let local = Mutex::new(BTreeSet::new());
    thread::scope(|scope| {
        scope.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Relaxed) && !wait() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(300));
            }
            // Store `local` is not logged: it is read in the running instance.
            let mut keys = local.lock().expect("local");
            for partition in 0..PARTITIONS {
                let every = (Bound::Unbounded, Bound::Unbounded);
                let Ok(read) = queries.range("local", partition, every, false, ReadFrom::Active)
                else {
                    continue;
                };
                for entry in read.entries {
                    let (key, _) = entry.expect("an entry of store local");
                    keys.insert(String::from_utf8_lossy(&key).into_owned());
                }
            }
            drop(keys);
            stop.store(true, Ordering::Relaxed);
        });
        // One thread: `poll`, a record at a time with one processor for every task; several:
        // `run_tasks`, in batches spread over the threads.
        let ended = if threads == 1 {
            poll_until_stopped(application, &stop, processor)
        } else {
            application.run_tasks(&stop, |_| processor)
        };
        stop.store(true, Ordering::Relaxed);
        ended.expect("failing records never stop the instance");
    });

    let what = format!("{guarantee:?}, {threads} thread(s)");
    let mut handled = handled.lock().expect("handled").clone();
    handled.sort();
    let failed_at: Vec<String> = failed_at.into_iter().collect();
    assert_eq!(
        handled, failed_at,
        "{what}: the handler is asked once per failing record"
    );
    let calls = calls.into_inner().expect("calls");
    assert_eq!(calls.len(), records.len(), "{what}: records processed");
    if aborts > 0 {
        let total: u32 = calls.values().sum();
        assert!(
            total > u32::try_from(records.len()).expect("small"),
            "{what}: no transaction was aborted ({total} calls)"
        );
        eprintln!(
            "{what}, {aborts} aborts: {total} processor calls for {} records",
            records.len()
        );
    }
    let again: Vec<_> = calls
        .iter()
        .filter(|(at, n)| **n != 1 && (aborts == 0 || failed_at.contains(*at)))
        .collect();
    assert!(
        again.is_empty(),
        "{what}: {} records processed more than once, such as {:?}",
        again.len(),
        again.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(
        changelog_counts(&bootstrap, &app, PARTITIONS),
        expected_counts,
        "{what}: the counts hold no write of a failing record"
    );
    let mut seen = BTreeSet::new();
    for partition in 0..PARTITIONS {
        let (model, _) = replay(&bootstrap, &format!("{app}-seen-changelog"), partition);
        seen.extend(
            model
                .keys()
                .filter(|key| key.as_slice() != POSITION_KEY && key.as_slice() != EPOCH_KEY)
                .map(|key| String::from_utf8_lossy(key).into_owned()),
        );
    }
    assert_eq!(
        seen, expected_seen,
        "{what}: store seen holds no write of a failing record"
    );
    assert_eq!(
        local.into_inner().expect("local"),
        expected_seen,
        "{what}: store local (not logged) holds no write of a failing record"
    );
    let mut outputs = if guarantee == ProcessingGuarantee::ExactlyOnceV2 {
        read_committed_values(&bootstrap, &output)
    } else {
        read_topic(&bootstrap, &output)
            .into_iter()
            .filter_map(|(_, value, _)| value)
            .collect()
    };
    outputs.sort();
    let expected_outputs: Vec<String> = expected_seen.into_iter().collect();
    assert_eq!(
        outputs.len(),
        expected_outputs.len(),
        "{what}: one output per record that did not fail"
    );
    assert_eq!(outputs, expected_outputs, "{what}: the outputs");
    let mut letters = read_committed_values(&bootstrap, &letters_topic);
    letters.sort();
    assert_eq!(
        letters, expected_letters,
        "{what}: the dead letters, once each"
    );
    let counted = metric_sum(&app, statestore_tasks::metrics::DEAD_LETTER_RECORDS_TOTAL);
    assert_eq!(
        counted,
        expected_letters.len() as f64,
        "{what}: the dead letters the metric counts"
    );
}

/// Polls `app` with `processor` until `stop` is set or a poll fails, then closes it.
fn poll_until_stopped(
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
