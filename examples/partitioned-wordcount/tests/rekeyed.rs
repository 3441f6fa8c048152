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

/// For each word counted `n` times in lines `0..lines`, what the outputs of the word hold
/// that they should not: the counts of `1..=n` missing, and those outside it or repeated.
fn wrong_counts(
    lines: u64,
    outputs: &BTreeMap<String, Vec<u64>>,
) -> BTreeMap<String, (Vec<u64>, Vec<u64>)> {
    let mut wrong = BTreeMap::new();
    for (word, &n) in &expected(lines) {
        let mut counts = outputs.get(word).cloned().unwrap_or_default();
        counts.sort_unstable();
        let missing: Vec<u64> = (1..=n)
            .filter(|c| counts.binary_search(c).is_err())
            .collect();
        let extra: Vec<u64> = counts
            .windows(2)
            .filter(|pair| pair[0] == pair[1])
            .map(|pair| pair[1])
            .chain(counts.iter().copied().filter(|&c| c == 0 || c > n))
            .collect();
        if !missing.is_empty() || !extra.is_empty() {
            wrong.insert(word.clone(), (missing, extra));
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
        "{} words with counts (missing, extra or repeated) outside 1..=n: {wrong:?}",
        wrong.len()
    );
    let total: usize = outputs.values().map(Vec::len).sum();
    eprintln!("{lines} lines: {total} outputs, each word's counts 1..=n once");
}
