//! The driver on topologies: a re-keyed word count over 4 partitions, a failing processor
//! under the error handlers, a wall-clock punctuator, a restart restored from the memory
//! changelogs.

use std::collections::BTreeMap;
use std::time::Duration;

use statestore_operator_stores::Utf8;
use statestore_tasks::topology::{
    Context, Processor, Record, TopicName, Topology, TopologyBuilder,
};
use statestore_tasks::{
    ErrorAction, KeyPartitioner, MemoryRecord, Punctuation, PunctuationType, StoreSpec,
    TasksConfig, handlers::DEAD_LETTER_HEADERS,
};
use statestore_test_driver::{MemoryChangelogs, TestDriver};
use store_api::Result;

const PARTITIONS: u32 = 4;

struct Split;

impl Processor for Split {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        line: Record<String, String>,
    ) -> Result<()> {
        for word in line.value.clone().unwrap_or_default().split_whitespace() {
            let word = Some(word.to_owned());
            ctx.forward(Record::new(word.clone(), word, line.timestamp))?;
        }
        Ok(())
    }
}

/// Counts each word in store `counts` and forwards `<word>|<count>`.
struct Count;

fn decode(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().expect("8 bytes"))
}

impl Processor for Count {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        let word = record.key.clone().unwrap_or_default();
        let counts = ctx.store("counts")?;
        let count = counts.get(word.as_bytes())?.map_or(0, |v| decode(&v)) + 1;
        counts.put(word.as_bytes(), &count.to_be_bytes())?;
        ctx.forward(record.with_value(Some(format!("{word}|{count}"))))
    }
}

/// Lines -> split -> repartition `words` -> count (store `counts`) -> `word-counts`.
fn rekey_topology(backend: &str) -> Topology {
    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("lines", ["lines"])
        .add_processor("split", || Split, ["lines"])
        .add_sink::<String, String, Utf8, Utf8>(
            "to-words",
            TopicName::repartition("words"),
            ["split"],
        )
        .add_source::<String, String, Utf8, Utf8>("words", [TopicName::repartition("words")])
        .add_processor("count", || Count, ["words"])
        .add_store(StoreSpec::new("counts", backend), ["count"])
        .add_sink::<String, String, Utf8, Utf8>("out", "word-counts", ["count"]);
    builder.build().expect("builds")
}

fn rekey_driver(changelogs: MemoryChangelogs, dir: &std::path::Path) -> TestDriver {
    rekey_driver_on("memory", changelogs, dir)
}

fn rekey_driver_on(
    backend: &str,
    changelogs: MemoryChangelogs,
    dir: &std::path::Path,
) -> TestDriver {
    let topology = rekey_topology(backend);
    let config = topology
        .configure(TasksConfig {
            application_id: "rekey".to_owned(),
            ..TasksConfig::default()
        })
        .expect("configures");
    TestDriver::builder(topology, config)
        .partitions("lines", PARTITIONS)
        .changelogs(changelogs)
        .state_dir(dir)
        .build()
        .expect("driver")
}

/// `count` lines of three words each among 37, keyed `line-<i>`, and each word's count.
fn word_lines(from: u64, count: u64) -> (Vec<(String, String)>, BTreeMap<String, u64>) {
    let lines: Vec<(String, String)> = (from..from + count)
        .map(|i| {
            let words: Vec<String> = (0..3)
                .map(|j| format!("w{}", (i * 3 + j) * 7 % 37))
                .collect();
            (format!("line-{i}"), words.join(" "))
        })
        .collect();
    let mut expected = BTreeMap::new();
    for word in lines.iter().flat_map(|(_, line)| line.split_whitespace()) {
        *expected.entry(word.to_owned()).or_default() += 1;
    }
    (lines, expected)
}

fn pipe_lines(driver: &TestDriver, lines: &[(String, String)]) {
    let input = driver.input("lines");
    for (i, (key, line)) in lines.iter().enumerate() {
        let timestamp = i64::try_from(i).expect("small");
        input
            .pipe_input(Some(key.as_bytes()), Some(line.as_bytes()), timestamp)
            .expect("piped");
    }
}

/// Each word's counts in the order `word-counts` received them.
fn outputs_by_word(driver: &TestDriver) -> BTreeMap<String, Vec<u64>> {
    let mut by_word: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for read in driver.output("word-counts").read_records() {
        let value = String::from_utf8(read.record.value.expect("value")).expect("utf-8");
        let (word, count) = value.split_once('|').expect("word|count");
        let key = String::from_utf8(read.record.key.expect("key")).expect("utf-8");
        assert_eq!(key, word);
        by_word
            .entry(key)
            .or_default()
            .push(count.parse().expect("count"));
    }
    by_word
}

fn stored_counts(driver: &TestDriver) -> BTreeMap<String, u64> {
    let store = driver.store("counts").expect("store");
    let entries = store.entries().expect("entries");
    entries
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).expect("utf-8"), decode(&v)))
        .collect()
}

#[test]
fn a_rekeyed_word_count_over_four_partitions_counts_exactly_and_in_order() {
    rekeyed_word_count_on("memory");
}

#[test]
fn the_rekeyed_word_count_runs_on_redb() {
    rekeyed_word_count_on("redb");
}

fn rekeyed_word_count_on(backend: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let driver = rekey_driver_on(backend, MemoryChangelogs::new(), dir.path());
    let (lines, expected) = word_lines(0, 1_000);
    pipe_lines(&driver, &lines);

    let by_word = outputs_by_word(&driver);
    assert_eq!(by_word.len(), expected.len());
    for (word, counts) in &by_word {
        let n = expected[word];
        assert_eq!(counts, &(1..=n).collect::<Vec<_>>(), "counts of {word}");
    }
    assert_eq!(stored_counts(&driver), expected);
    // Each word is counted in the partition of its key, and every partition counts some.
    let store = driver.store("counts").expect("store");
    assert_eq!(store.partitions(), (0..PARTITIONS).collect::<Vec<_>>());
    for (word, &n) in &expected {
        let partition = KeyPartitioner::Murmur2
            .partition(word.as_bytes(), PARTITIONS)
            .expect("a partition");
        let held = store.get_in(partition, word.as_bytes()).expect("get");
        assert_eq!(
            held.map(|v| decode(&v)),
            Some(n),
            "{word} in partition {partition}"
        );
        for other in (0..PARTITIONS).filter(|&p| p != partition) {
            assert_eq!(store.get_in(other, word.as_bytes()).expect("get"), None);
        }
    }
    drop(store);
    driver.close().expect("closes");
}

#[test]
fn a_driver_on_the_same_changelogs_restores_the_committed_counts_into_an_empty_state_directory() {
    let changelogs = MemoryChangelogs::new();
    let (first, mut expected) = word_lines(0, 300);
    {
        let dir = tempfile::tempdir().expect("dir");
        let driver = rekey_driver(changelogs.clone(), dir.path());
        pipe_lines(&driver, &first);
        // Dropped without a close, as in a crash: what each pipe committed (a commit
        // interval of 0) is all there is.
        drop(driver);
    }
    let dir = tempfile::tempdir().expect("an empty state directory");
    let driver = rekey_driver(changelogs, dir.path());
    assert_eq!(stored_counts(&driver), expected, "restored");
    let (more, added) = word_lines(300, 100);
    pipe_lines(&driver, &more);
    for (word, n) in added {
        *expected.entry(word).or_default() += n;
    }
    assert_eq!(
        stored_counts(&driver),
        expected,
        "counted on from the restored counts"
    );
    driver.close().expect("closes");
}

/// Writes `seen:<value>` to store `seen`, forwards the value, and panics on `boom` after
/// writing.
struct Faulty;

impl Processor for Faulty {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        let value = record.value.clone().unwrap_or_default();
        ctx.store("seen")?
            .put(format!("seen:{value}").as_bytes(), b"1")?;
        ctx.forward(record.clone())?;
        assert_ne!(value, "boom", "the processor refuses boom");
        Ok(())
    }
}

fn faulty_driver(action: ErrorAction) -> TestDriver {
    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("in", ["in"])
        .add_processor("faulty", || Faulty, ["in"])
        .add_store(StoreSpec::new("seen", "memory"), ["faulty"])
        .add_sink::<String, String, Utf8, Utf8>("out", "out", ["faulty"]);
    let topology = builder.build().expect("builds");
    let config = topology
        .configure(TasksConfig {
            application_id: "faulty".to_owned(),
            processing_error: action,
            dead_letter_topic: Some("dlq".to_owned()),
            ..TasksConfig::default()
        })
        .expect("configures");
    TestDriver::new(topology, config).expect("driver")
}

fn failing_record_is_rolled_back(action: ErrorAction) -> TestDriver {
    let driver = faulty_driver(action);
    let input = driver.input("in");
    input.pipe_input(Some(b"k"), Some(b"a"), 1).expect("a");
    input
        .pipe_record(
            MemoryRecord {
                key: Some(b"k".to_vec()),
                value: Some(b"boom".to_vec()),
                timestamp: Some(2),
                headers: vec![("trace".to_owned(), Some(b"t-1".to_vec()))],
                ..MemoryRecord::default()
            },
            None,
        )
        .expect("the handler goes on");
    input.pipe_input(Some(b"k"), Some(b"b"), 3).expect("b");

    let seen: Vec<Vec<u8>> = driver
        .store("seen")
        .expect("store")
        .entries()
        .expect("entries")
        .into_keys()
        .collect();
    assert_eq!(
        seen,
        [b"seen:a".to_vec(), b"seen:b".to_vec()],
        "boom's write rolled back"
    );
    let out: Vec<_> = driver
        .output("out")
        .read_records()
        .into_iter()
        .map(|r| r.record.value)
        .collect();
    assert_eq!(
        out,
        [Some(b"a".to_vec()), Some(b"b".to_vec())],
        "boom's forward dropped"
    );
    driver
}

#[test]
fn a_panicking_record_is_rolled_back_and_skipped_under_continue() {
    let driver = failing_record_is_rolled_back(ErrorAction::Continue);
    assert!(driver.output("dlq").is_empty());
}

#[test]
fn a_panicking_record_is_rolled_back_and_its_dead_letter_is_readable() {
    let driver = failing_record_is_rolled_back(ErrorAction::DeadLetter);
    let dlq = driver.output("dlq");
    let letter = dlq.read_record().expect("a dead letter");
    assert!(dlq.is_empty());
    assert_eq!(letter.record.value.as_deref(), Some(&b"boom"[..]));
    assert_eq!(letter.record.key.as_deref(), Some(&b"k"[..]));
    let header = |name: &str| {
        letter
            .record
            .headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.clone())
            .map(|v| String::from_utf8(v).expect("utf-8"))
    };
    assert_eq!(
        header("trace").as_deref(),
        Some("t-1"),
        "its own headers kept"
    );
    assert_eq!(header(DEAD_LETTER_HEADERS[0]).as_deref(), Some("panic"));
    assert!(
        header(DEAD_LETTER_HEADERS[1])
            .expect("message")
            .contains("refuses boom")
    );
    assert_eq!(header(DEAD_LETTER_HEADERS[2]).as_deref(), Some("in"));
    assert_eq!(
        header(DEAD_LETTER_HEADERS[4]).as_deref(),
        Some("1"),
        "its offset"
    );
}

#[test]
fn a_failing_record_under_fail_stops_the_task_with_its_error() {
    let driver = faulty_driver(ErrorAction::Fail);
    let err = driver
        .input("in")
        .pipe_input(None, Some(b"boom"), 1)
        .expect_err("fails");
    assert!(err.to_string().contains("refuses boom"), "{err}");
    assert!(driver.output("out").is_empty());
}

/// Counts its wall-clock punctuations in store `ticks` and forwards each count.
struct Ticker;

impl Processor for Ticker {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn init(&mut self, ctx: &mut Context<'_, String, String>) -> Result<()> {
        ctx.schedule(
            "tick",
            Duration::from_secs(10),
            PunctuationType::WallClockTime,
        )?;
        Ok(())
    }

    fn process(
        &mut self,
        _: &mut Context<'_, String, String>,
        _: Record<String, String>,
    ) -> Result<()> {
        Ok(())
    }

    fn punctuate(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        _: &Punctuation<'_>,
    ) -> Result<()> {
        let ticks = ctx.store("ticks")?;
        let n = ticks.get(b"n")?.map_or(0, |v| decode(&v)) + 1;
        ticks.put(b"n", &n.to_be_bytes())?;
        ctx.forward(Record::new(Some("n".to_owned()), Some(n.to_string()), 0))
    }
}

#[test]
fn a_wall_clock_punctuator_fires_when_the_clock_is_advanced() {
    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("in", ["in"])
        .add_processor("ticker", || Ticker, ["in"])
        .add_store(StoreSpec::new("ticks", "memory"), ["ticker"])
        .add_sink::<String, String, Utf8, Utf8>("out", "ticks", ["ticker"]);
    let topology = builder.build().expect("builds");
    let config = topology
        .configure(TasksConfig {
            application_id: "ticker".to_owned(),
            ..TasksConfig::default()
        })
        .expect("configures");
    let driver = TestDriver::builder(topology, config)
        .partitions("in", 2)
        .wall_clock(1_000_000)
        .build()
        .expect("driver");
    let ticks = driver.output("ticks");
    driver
        .advance_wall_clock(Duration::from_secs(1))
        .expect("advanced");
    // The driver's clock moves by these calls alone, not by the time the test takes.
    std::thread::sleep(Duration::from_millis(20));
    driver
        .advance_wall_clock(Duration::from_millis(8_999))
        .expect("advanced");
    assert!(ticks.is_empty(), "not due yet");
    driver
        .advance_wall_clock(Duration::from_millis(1))
        .expect("advanced");
    // One tick per task (partition).
    let values: Vec<_> = ticks
        .read_records()
        .into_iter()
        .map(|r| r.record.value)
        .collect();
    assert_eq!(values, [Some(b"1".to_vec()), Some(b"1".to_vec())]);
    driver
        .advance_wall_clock(Duration::from_secs(10))
        .expect("advanced");
    assert_eq!(ticks.len(), 2);
    let store = driver.store("ticks").expect("store");
    for partition in 0..2 {
        assert_eq!(
            store
                .get_in(partition, b"n")
                .expect("get")
                .map(|v| decode(&v)),
            Some(2)
        );
    }
}

#[test]
fn replace_thread_takes_the_task_back_to_its_last_commit_and_a_record_that_keeps_failing_is_an_error()
 {
    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("in", ["in"])
        .add_processor("faulty", || Faulty, ["in"])
        .add_store(StoreSpec::new("seen", "memory"), ["faulty"])
        .add_sink::<String, String, Utf8, Utf8>("out", "out", ["faulty"]);
    let topology = builder.build().expect("builds");
    let config = topology
        .configure(TasksConfig {
            application_id: "replaced".to_owned(),
            uncaught_error: statestore_tasks::UncaughtErrorPolicy::ReplaceThread,
            ..TasksConfig::default()
        })
        .expect("configures");
    let driver = TestDriver::new(topology, config).expect("driver");
    let input = driver.input("in");
    input
        .pipe_list([(record(b"a"), None), (record(b"b"), None)])
        .expect("a, b");
    let err = input
        .pipe_input(None, Some(b"boom"), 3)
        .expect_err("retried, then given up");
    assert!(
        err.to_string().contains("went back to its last commit"),
        "{err}"
    );
    let seen = driver
        .store("seen")
        .expect("store")
        .entries()
        .expect("entries");
    assert_eq!(
        seen.into_keys().collect::<Vec<_>>(),
        [b"seen:a".to_vec(), b"seen:b".to_vec()]
    );
    // a and b went out once: the rewinds went back to the commit after them.
    assert_eq!(driver.output("out").len(), 2);
}

fn record(value: &[u8]) -> MemoryRecord {
    MemoryRecord {
        value: Some(value.to_vec()),
        timestamp: Some(1),
        ..MemoryRecord::default()
    }
}

#[test]
fn a_driver_closed_and_opened_again_on_its_state_directory_counts_on() {
    let changelogs = MemoryChangelogs::new();
    let dir = tempfile::tempdir().expect("dir");
    let (first, mut expected) = word_lines(0, 200);
    let driver = rekey_driver(changelogs.clone(), dir.path());
    pipe_lines(&driver, &first);
    driver.close().expect("closes");
    let driver = rekey_driver(changelogs, dir.path());
    assert_eq!(stored_counts(&driver), expected, "kept");
    let (more, added) = word_lines(200, 50);
    pipe_lines(&driver, &more);
    for (word, n) in added {
        *expected.entry(word).or_default() += n;
    }
    assert_eq!(stored_counts(&driver), expected);
    // The outputs go on from the counts kept: each word's first output after the restart
    // is one more than its count before it.
    let by_word = outputs_by_word(&driver);
    let (_, before) = word_lines(0, 200);
    for (word, counts) in by_word {
        assert_eq!(
            counts[0],
            before.get(&word).copied().unwrap_or(0) + 1,
            "{word}"
        );
    }
}
