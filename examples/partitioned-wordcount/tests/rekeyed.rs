//! The re-keyed word count (`run --rekey`: lines with no key split into words, re-keyed by
//! word through a repartition topic, counted, each word's new count sent to an output topic)
//! against the real broker, its two instances killed with SIGKILL at random moments while
//! lines flow: the stores' changelogs hold exact counts and, read `read_committed`, the
//! output topic holds for each word the counts its guarantee promises.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP`; without it the tests print one SKIP line and pass.

mod support;
use support::instances::{Feeder, Instance, assert_exact, create_topics, wait_complete, watch};
use support::outputs::read_committed;
use support::{BIN, output, unique};

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::Message;
use rdkafka::message::Headers;

/// The tests run one at a time: each loads the machine's two cores on its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const SESSION_TIMEOUT_MS: u64 = 6_000;

/// The input topic, the application and the output topic of one test, created (the
/// repartition topic is the application's to create).
struct Names {
    topic: String,
    app: String,
    output: String,
}

impl Names {
    fn create(bootstrap: &str, prefix: &str) -> Names {
        let names = Names {
            topic: unique(&format!("{prefix}-lines")),
            app: unique(prefix),
            output: unique(&format!("{prefix}-out")),
        };
        create_topics(bootstrap, &names.topic, &names.app, 1);
        statestore_tasks::create_topic(bootstrap, &names.output, 4).expect("output");
        names
    }
}

/// Each word's counts in a `read_committed` read of the whole output topic, in the order
/// read (a word's records share a partition: they are keyed by it).
fn outputs(bootstrap: &str, topic: &str) -> BTreeMap<String, Vec<u64>> {
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    read_committed(bootstrap, topic, |message| {
        let reserved = message.headers().is_some_and(|headers| {
            headers
                .iter()
                .any(|header| header.key.starts_with("__statestore."))
        });
        assert!(!reserved, "statestore's headers stay at the source");
        let word = std::str::from_utf8(message.key().expect("key")).expect("utf-8");
        let count: [u8; 8] = message
            .payload()
            .expect("value")
            .try_into()
            .expect("8 bytes");
        counts
            .entry(word.to_owned())
            .or_default()
            .push(u64::from_be_bytes(count));
    });
    counts
}

/// Each word's count in lines `0..lines`, computed without Kafka.
fn expected(lines: u64) -> BTreeMap<String, u64> {
    let text = output(&["expected", "--lines", &lines.to_string()]);
    text.lines()
        .map(|line| {
            let (word, count) = line.split_once('\t').expect("word<TAB>count");
            (word.to_owned(), count.parse().expect("count"))
        })
        .collect()
}

/// The offset, index, input topic index and task of an upstream header (LEB128 varints, then
/// the task id).
fn upstream_header(bytes: &[u8]) -> (u64, u64, u64, &str) {
    let mut rest = bytes;
    let mut varint = || {
        let mut value = 0u64;
        for (i, &byte) in rest.iter().enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                rest = &rest[i + 1..];
                return value;
            }
        }
        panic!("a cut varint in {bytes:?}")
    };
    let (offset, index, topic) = (varint(), varint(), varint());
    (
        offset,
        index,
        topic,
        std::str::from_utf8(rest).expect("task id"),
    )
}

/// A number from the clock, for the random moments of the kills.
fn random_below(bound: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) % bound
}

/// Two instances under `guarantee`, one processing on one thread and the other on two, are
/// killed with SIGKILL at random moments over several rounds while lines flow, each started
/// again on its state directory at once (static members: they get their tasks back without
/// waiting for a session to end, so most kills find them processing); then the input is
/// drained until every word's outputs reach its count, and the instances stop. Returns the
/// names, the lines fed and each word's outputs.
fn killed_at_random(
    bootstrap: &str,
    prefix: &str,
    guarantee: &str,
) -> (Names, u64, BTreeMap<String, Vec<u64>>) {
    let started = Instant::now();
    let names = Names::create(bootstrap, prefix);
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let ids = [format!("{}-a", names.app), format!("{}-b", names.app)];
    let start = |i: usize| {
        let args = [
            "--rekey",
            "--processing-guarantee",
            guarantee,
            "--output-topic",
            &names.output,
            "--threads",
            ["1", "2"][i],
            "--group-instance-id",
            &ids[i],
            "--commit-interval-ms",
            "1000",
        ];
        Instance::start_with(
            ["a", "b"][i],
            Command::new(BIN),
            bootstrap,
            (&names.topic, &names.app),
            dirs[i].path(),
            SESSION_TIMEOUT_MS,
            &args,
        )
    };
    let feeder = Feeder::start_with(bootstrap, &names.topic, &["--unkeyed-lines"]);
    let mut instances = [start(0), start(1)];
    for instance in &mut instances {
        instance.wait_for(Duration::from_secs(120), |l| l.starts_with("first record"));
    }
    for round in 0..8 {
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
    let lines = feeder.stop();
    wait_complete(
        bootstrap,
        (&names.topic, &names.app),
        Duration::from_secs(180),
        &mut [a, b],
    );
    // The lines are in the upstream tasks' state; the words may still be on their way
    // through the repartition topic, and under exactly_once_v2 an output counts once its
    // transaction commits.
    let want = expected(lines);
    let deadline = Instant::now() + Duration::from_secs(180);
    let seen = loop {
        let seen = outputs(bootstrap, &names.output);
        let behind = want
            .iter()
            .filter(|&(word, n)| !seen.get(word).is_some_and(|counts| counts.contains(n)))
            .count();
        if behind == 0 {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "{behind} words short of their count in the outputs after {lines} lines"
        );
        watch(Duration::from_secs(1), &mut [a, b]);
    };
    eprintln!("{lines} lines counted in {:?}", started.elapsed());
    for instance in instances {
        instance.stop();
    }
    assert_exact(bootstrap, &names.app, lines);
    (names, lines, seen)
}

/// What the outputs of a word hold that they should not, for a word counted `n` times.
#[derive(Debug, Default)]
struct Wrong {
    /// Counts of `1..=n` with no output.
    missing: Vec<u64>,
    /// Counts with several outputs.
    repeated: Vec<u64>,
    /// Counts outside `1..=n`.
    outside: Vec<u64>,
}

/// The words whose outputs are not their counts `1..=n` each once, `n` being the word's
/// count in lines `0..lines`.
fn wrong_counts(lines: u64, outputs: &BTreeMap<String, Vec<u64>>) -> BTreeMap<String, Wrong> {
    let mut wrong = BTreeMap::new();
    for (word, &n) in &expected(lines) {
        let mut counts = outputs.get(word).cloned().unwrap_or_default();
        counts.sort_unstable();
        let found = Wrong {
            missing: (1..=n)
                .filter(|c| counts.binary_search(c).is_err())
                .collect(),
            repeated: counts
                .windows(2)
                .filter(|pair| pair[0] == pair[1])
                .map(|pair| pair[1])
                .collect(),
            outside: counts
                .iter()
                .copied()
                .filter(|&c| c == 0 || c > n)
                .collect(),
        };
        if !(found.missing.is_empty() && found.repeated.is_empty() && found.outside.is_empty()) {
            wrong.insert(word.clone(), found);
        }
    }
    wrong
}

/// Under `exactly_once_v2` the repartition records are written in the upstream record's
/// transaction and read `read_committed`: every count is exact and each word's outputs are
/// its counts `1..=n`, each once. Under `at_least_once` this test fails (outputs sent
/// before a kill are sent again).
#[test]
fn kill_9_at_random_moments_counts_each_rekeyed_word_exactly_once() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "kill_9_at_random_moments_counts_each_rekeyed_word_exactly_once",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let (_, lines, outputs) = killed_at_random(&bootstrap, "rk-eos", "exactly_once_v2");
    let wrong = wrong_counts(lines, &outputs);
    assert!(
        wrong.is_empty(),
        "{} words whose outputs are not 1..=n once each: {wrong:?}",
        wrong.len()
    );
    let total: usize = outputs.values().map(Vec::len).sum();
    eprintln!("{lines} lines: {total} outputs, each word's counts 1..=n once");
}

/// Under `at_least_once`, without transactions: an upstream task replaying its input after a
/// kill sends its repartition records again, and the downstream task drops those its
/// committed state already applied (their upstream header is at or before the last it
/// applied from that upstream), so every count stays exact. The output topic is at least
/// once: each word's outputs cover its counts `1..=n`, none outside it, and a count sent
/// before a kill may be sent again. Without the dropping this test fails (counts above `n`,
/// and the changelogs' counts are not exact).
#[test]
fn kill_9_at_random_moments_under_at_least_once_keeps_rekeyed_counts_exact() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "kill_9_at_random_moments_under_at_least_once_keeps_rekeyed_counts_exact",
    ) else {
        return;
    };
    let _alone = one_at_a_time();
    let (names, lines, outputs) = killed_at_random(&bootstrap, "rk-alo", "at_least_once");
    let wrong = wrong_counts(lines, &outputs);
    let broken: Vec<_> = wrong
        .iter()
        .filter(|(_, w)| !(w.missing.is_empty() && w.outside.is_empty()))
        .collect();
    assert!(
        broken.is_empty(),
        "{} words whose outputs miss counts of 1..=n or hold others: {broken:?}",
        broken.len()
    );
    let total: usize = outputs.values().map(Vec::len).sum();
    let repeated: usize = wrong.values().map(|w| w.repeated.len()).sum();
    eprintln!(
        "{lines} lines: {total} outputs covering each word's counts 1..=n, {repeated} of them \
         sent again (at least once)"
    );
    let repartition = format!("{}-words-by-word-repartition", names.app);
    let (mut records, mut stamped, mut header_bytes, mut record_bytes) = (0, 0, 0, 0);
    read_committed(&bootstrap, &repartition, |message| {
        records += 1;
        let (key, value) = (message.key().map_or(0, <[u8]>::len), message.payload_len());
        // Kafka's record format: each header a varint name length, the name, a varint value
        // length and the value (one byte each for these lengths).
        let headers: usize = message.headers().map_or(0, |headers| {
            headers
                .iter()
                .map(|h| 2 + h.key.len() + h.value.map_or(0, <[u8]>::len))
                .sum()
        });
        stamped += usize::from(headers > 0);
        if let Some(upstream) = message.headers().and_then(|headers| {
            headers
                .iter()
                .find(|h| h.key == "__statestore.upstream")
                .and_then(|h| h.value)
        }) {
            let (_, index, topic, task) = upstream_header(upstream);
            // Counted anew for each line: its 8 words are indexes 0..8.
            assert!(index < 8, "index {index}: not counted per input record");
            assert_eq!(topic, 0, "the upstream's one input topic");
            assert!(task.starts_with("0_"), "upstream task {task}");
        }
        header_bytes += headers;
        record_bytes += key + value + headers;
    });
    assert!(
        records > 0 && stamped == records,
        "{stamped} of {records} stamped"
    );
    eprintln!(
        "repartition records left unpurged: {records}, header {:.1} bytes per record of {:.1} \
         bytes of key, value and headers",
        header_bytes as f64 / records as f64,
        record_bytes as f64 / records as f64
    );
}
