//! Topologies: described as Kafka Streams describes the same shapes, and run on the real
//! broker, where forwarding is depth first and a record that fails in a child commits
//! nothing, in its parents' stores and outputs either.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use statestore_operator_stores::Utf8;
use statestore_tasks::topology::{
    Context, Processor, Record, TopicName, Topology, TopologyBuilder,
};
use statestore_tasks::{
    Application, ErrorAction, ProcessingGuarantee, ReadFrom, ReadSource, StoreSpec, TasksConfig,
};
use support::failing::{PARTITIONS, produce_pairs};
use support::*;

/// A processor of strings that does nothing: the shapes' nodes.
struct Noop;

impl Processor for Noop {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        _: &mut Context<'_, String, String>,
        _: Record<String, String>,
    ) -> store_api::Result<()> {
        Ok(())
    }
}

fn store(name: &str) -> StoreSpec {
    StoreSpec::new(name, "memory")
}

/// The shapes of tasks/tests/topology/Describe.java, built here.
fn shape(name: &str) -> TopologyBuilder {
    let mut t = TopologyBuilder::new();
    match name {
        "rekey" => {
            t.add_source::<String, String, Utf8, Utf8>("lines", ["text"])
                .add_processor("split", || Noop, ["lines"])
                .add_sink::<String, String, Utf8, Utf8>(
                    "to-words",
                    TopicName::repartition("words"),
                    ["split"],
                )
                .add_source::<String, String, Utf8, Utf8>(
                    "words",
                    [TopicName::repartition("words")],
                )
                .add_processor("count", || Noop, ["words"])
                .add_store(store("counts"), ["count"])
                .add_sink::<String, String, Utf8, Utf8>("out", "counts", ["count"]);
        }
        "shapes" => {
            t.add_source::<String, String, Utf8, Utf8>("orders", ["orders"])
                .add_processor("validate", || Noop, ["orders"])
                .add_processor("audit", || Noop, ["orders"])
                .add_processor("enrich", || Noop, ["validate", "audit"])
                .add_sink::<String, String, Utf8, Utf8>("enriched", "enriched-orders", ["enrich"])
                .add_global_store(
                    store("customers"),
                    "customers-source",
                    "customers",
                    "customers-keeper",
                )
                .add_source::<String, String, Utf8, Utf8>("payments", ["payments"])
                .add_processor("settle", || Noop, ["payments"])
                .add_store(store("balances"), ["settle", "validate"])
                .add_source::<String, String, Utf8, Utf8>("clicks", ["clicks"])
                .add_processor("sessionize", || Noop, ["clicks"])
                .add_processor("flag", || Noop, ["sessionize"])
                .add_sink::<String, String, Utf8, Utf8>("flagged", "flags", ["flag"])
                .add_sink::<String, String, Utf8, Utf8>("per-user", "sessions-out", ["sessionize"])
                .add_store(store("sessions"), ["sessionize"])
                .add_store(store("visits"), ["sessionize"]);
        }
        _ => panic!("no shape {name}"),
    }
    t
}

/// What Kafka Streams 4.4's `Topology.describe()` prints for shape `name`.
fn kafka_streams_describes(name: &str) -> String {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/topology/Describe.java");
    let out = Command::new("java")
        .args([
            "-cp",
            &statestore_test_support::kafka_classpath(),
            source,
            name,
        ])
        .output()
        .expect("running java");
    assert!(
        out.status.success(),
        "Describe.java {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The same shapes give Kafka Streams' grouping into sub-topologies (through parents and
/// shared stores, a global store's group numbered among them), its node order and its text.
#[test]
fn topologies_are_described_as_kafka_streams_describes_them() {
    // Kafka Streams' jars come with the broker's.
    if statestore_test_support::kafka_bootstrap("topologies_are_described_as_kafka_streams")
        .is_none()
    {
        return;
    }
    for name in ["rekey", "shapes"] {
        let topology = shape(name).build().expect("builds");
        assert_eq!(
            topology.describe().to_string(),
            kafka_streams_describes(name),
            "shape {name}"
        );
    }
    let shapes = shape("shapes").build().expect("builds");
    let ids: Vec<(u32, usize)> = shapes
        .subtopologies()
        .iter()
        .map(|sub| (sub.id, sub.nodes.len()))
        .collect();
    assert_eq!(ids, [(0, 7), (2, 5)]);
    assert_eq!(shapes.global_stores()[0].id, 1);
}

const POISON: &str = "poison";

/// Counts each word in store `counts` and forwards `<word>|direct:<count>`.
struct Count;

impl Processor for Count {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        record: Record<String, String>,
    ) -> store_api::Result<()> {
        let word = record.key.clone().unwrap_or_default();
        let counts = ctx.store("counts")?;
        let count = counts.get(word.as_bytes())?.map_or(0, |v| decode(&v)) + 1;
        counts.put(word.as_bytes(), &count.to_be_bytes())?;
        ctx.forward(record.with_value(Some(format!("{word}|direct:{count}"))))
    }
}

/// Forwards `<word>|direct:<n>` as `<word>|via:<n>`.
struct Via;

impl Processor for Via {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        record: Record<String, String>,
    ) -> store_api::Result<()> {
        let value = record
            .value
            .as_deref()
            .unwrap_or_default()
            .replace("|direct:", "|via:");
        ctx.forward(record.with_value(Some(value)))
    }
}

/// Panics on the poison word, after its ancestors wrote and forwarded.
struct Check;

impl Processor for Check {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        _: &mut Context<'_, String, String>,
        record: Record<String, String>,
    ) -> store_api::Result<()> {
        assert_ne!(
            record.key.as_deref(),
            Some(POISON),
            "the check met {POISON}"
        );
        Ok(())
    }
}

/// words -> count -> via -> (via-out, check) and count -> direct-out: every input's
/// outputs come depth first (`via:<n>` from the grandchild sink, then `direct:<n>` from
/// the child sink), and the poison record, which panics in `check` after `count` wrote
/// its count and `via-out` its output, is skipped with none of either.
#[test]
fn forwarding_is_depth_first_and_a_child_that_panics_commits_nothing_of_its_record() {
    forwarding(ProcessingGuarantee::AtLeastOnce);
}

/// The same under `exactly_once_v2` on two stream threads, the outputs read
/// `read_committed`: what the poison record's processing sent before its child panicked is
/// never committed.
#[test]
fn under_exactly_once_a_child_that_panics_commits_nothing_of_its_record() {
    forwarding(ProcessingGuarantee::ExactlyOnceV2);
}

fn forwarding(guarantee: ProcessingGuarantee) {
    let Some(bootstrap) = bootstrap("forwarding_is_depth_first") else {
        return;
    };
    let (app, input, output) = (unique("topo"), unique("topo-in"), unique("topo-out"));
    create_topic(&bootstrap, &input, 4);
    create_topic(&bootstrap, &output, 4);
    let mut words: Vec<(String, String)> = (0..3_000).map(|i| (word(i), word(i))).collect();
    words.insert(1_500, (POISON.to_owned(), POISON.to_owned()));
    produce_pairs(&bootstrap, &input, &words);
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for (word, _) in words.iter().filter(|(w, _)| w != POISON) {
        *expected.entry(word.clone()).or_default() += 1;
    }

    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("words", [input.as_str()])
        .add_processor("count", || Count, ["words"])
        .add_store(StoreSpec::new("counts", "redb"), ["count"])
        .add_processor("via", || Via, ["count"])
        .add_sink::<String, String, Utf8, Utf8>("via-out", output.as_str(), ["via"])
        .add_processor("check", || Check, ["via"])
        .add_sink::<String, String, Utf8, Utf8>("direct-out", output.as_str(), ["count"]);
    let topology = builder.build().expect("builds");
    let dir = tempfile::tempdir().expect("dir");
    let config = topology
        .configure(TasksConfig {
            input_topics: Vec::new(),
            stores: Vec::new(),
            processing_error: ErrorAction::Continue,
            processing_guarantee: guarantee,
            stream_threads: if guarantee == ProcessingGuarantee::ExactlyOnceV2 {
                2
            } else {
                1
            },
            ..config(&bootstrap, &app, &input, dir.path())
        })
        .expect("configures");

    let stop = AtomicBool::new(false);
    let counts = thread::scope(|scope| {
        let application = Application::new(config).expect("app");
        let running = scope.spawn(|| application.run_topology(&stop, topology));
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut counts = BTreeMap::new();
        while Instant::now() < deadline && !running.is_finished() {
            counts = changelog_counts(&bootstrap, &app, PARTITIONS);
            if counts == expected {
                break;
            }
            thread::sleep(Duration::from_millis(500));
        }
        stop.store(true, Ordering::Relaxed);
        running.join().expect("run").expect("runs");
        counts
    });
    assert_eq!(counts, expected, "the counts the changelogs hold");

    let values: Vec<String> = match guarantee {
        ProcessingGuarantee::ExactlyOnceV2 => read_committed_values(&bootstrap, &output),
        _ => read_topic(&bootstrap, &output)
            .into_iter()
            .map(|(_, value, _)| value.unwrap_or_default())
            .collect(),
    };
    let mut outputs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for value in values {
        let (word, output) = value.split_once('|').expect("<word>|<output>");
        outputs
            .entry(word.to_owned())
            .or_default()
            .push(output.to_owned());
    }
    assert!(
        !outputs.contains_key(POISON),
        "the poison record's outputs were sent"
    );
    for (word, &n) in &expected {
        let depth_first: Vec<String> = (1..=n)
            .flat_map(|i| [format!("via:{i}"), format!("direct:{i}")])
            .collect();
        assert_eq!(
            outputs.get(word),
            Some(&depth_first),
            "the outputs of {word}"
        );
    }
}

/// Schedules a stream-time punctuator every second in `init` and forwards, at each call, a
/// `tick` record at the punctuation's time; records pass through to its other child.
struct Ticker;

impl Processor for Ticker {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn init(&mut self, ctx: &mut Context<'_, String, String>) -> store_api::Result<()> {
        ctx.schedule(
            "ticks",
            Duration::from_secs(1),
            statestore_tasks::PunctuationType::StreamTime,
        )?;
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        record: Record<String, String>,
    ) -> store_api::Result<()> {
        ctx.forward_to("records", record)
    }

    fn punctuate(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        punctuation: &statestore_tasks::Punctuation<'_>,
    ) -> store_api::Result<()> {
        // Kept with the task's commit, as Kafka Streams' emit-final keeps what it emitted.
        let time = punctuation.time.to_be_bytes();
        ctx.store("last-tick")?.put(b"tick", &time)?;
        let tick = Record::new(
            Some("tick".to_owned()),
            Some(punctuation.time.to_string()),
            punctuation.time,
        );
        ctx.forward_to("ticks", tick)
    }
}

/// A processor's punctuator forwards to its children as a record does: the ticks of stream
/// time reach their sink (with the punctuation's time as their timestamp) and the records
/// theirs, each child reached by name.
#[test]
fn a_punctuator_forwards_to_a_named_child() {
    let Some(bootstrap) = bootstrap("a_punctuator_forwards_to_a_named_child") else {
        return;
    };
    let (app, input) = (unique("tick"), unique("tick-in"));
    let (ticks, records) = (unique("tick-ticks"), unique("tick-records"));
    create_topic(&bootstrap, &input, 1);
    create_topic(&bootstrap, &ticks, 1);
    create_topic(&bootstrap, &records, 1);
    let producer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("producer");
    // Stream time goes from BASE to 4.9 s past it (librdkafka takes a timestamp of 0 for
    // "now").
    const BASE: i64 = 1_700_000_000_000;
    for i in 0..50i64 {
        let value = i.to_string();
        send_waiting(
            &producer,
            rdkafka::producer::BaseRecord::to(&input)
                .key(value.as_bytes())
                .payload(value.as_bytes())
                .timestamp(BASE + i * 100),
        );
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("flush");

    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("in", [input.as_str()])
        .add_processor("ticker", || Ticker, ["in"])
        .add_store(StoreSpec::new("last-tick", "memory"), ["ticker"])
        .add_sink::<String, String, Utf8, Utf8>("ticks", ticks.as_str(), ["ticker"])
        .add_sink::<String, String, Utf8, Utf8>("records", records.as_str(), ["ticker"]);
    let topology = builder.build().expect("builds");
    let dir = tempfile::tempdir().expect("dir");
    let config = topology
        .configure(TasksConfig {
            input_topics: Vec::new(),
            stores: Vec::new(),
            ..config(&bootstrap, &app, &input, dir.path())
        })
        .expect("configures");
    let stop = AtomicBool::new(false);
    let (ticked, passed) = thread::scope(|scope| {
        let application = Application::new(config).expect("app");
        let running = scope.spawn(|| application.run_topology(&stop, topology));
        let read = || {
            (
                read_topic(&bootstrap, &ticks),
                read_topic(&bootstrap, &records),
            )
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut seen = read();
        while Instant::now() < deadline && !running.is_finished() && seen.1.len() < 50 {
            thread::sleep(Duration::from_millis(500));
            seen = read();
        }
        stop.store(true, Ordering::Relaxed);
        running.join().expect("run").expect("runs");
        read()
    });
    let ticked: Vec<Option<String>> = ticked.into_iter().map(|(_, value, _)| value).collect();
    let ticks: Vec<Option<String>> = (0..5)
        .map(|i| Some((BASE + i * 1000).to_string()))
        .collect();
    assert_eq!(ticked, ticks, "the ticks");
    let passed: Vec<Option<String>> = passed.into_iter().map(|(_, value, _)| value).collect();
    let inputs: Vec<Option<String>> = (0..50).map(|i| Some(i.to_string())).collect();
    assert_eq!(passed, inputs, "the records");
}

/// Enriches each order (key: the order, value: its customer) with the customer's name from
/// global store `customers` (`unknown` when it has none), remembering the order in store
/// `seen`.
struct Enrich;

impl Processor for Enrich {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        order: Record<String, String>,
    ) -> store_api::Result<()> {
        let customer = order.value.clone().unwrap_or_default();
        let name = ctx
            .global_store("customers")?
            .get(customer.as_bytes())?
            .map_or_else(
                || "unknown".to_owned(),
                |v| String::from_utf8_lossy(&v).into(),
            );
        ctx.store("seen")?
            .put(order.key.as_deref().unwrap_or_default().as_bytes(), b"1")?;
        ctx.forward(order.with_value(Some(format!("{customer}:{name}"))))
    }
}

/// Sends `records` (key, value; a `None` value is a tombstone) to `topic`.
fn send_all(bootstrap: &str, topic: &str, records: &[(String, Option<String>)]) {
    let producer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for (key, value) in records {
        let mut record = rdkafka::producer::BaseRecord::to(topic).key(key.as_bytes());
        if let Some(value) = value {
            record = record.payload(value.as_bytes());
        }
        send_waiting(&producer, record);
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("flush");
}

/// The global store of customers is restored whole before the first order is processed
/// (every order finds its customer, a deleted one is unknown), follows the topic while the
/// application runs (a customer added then is found), is checkpointed when the application
/// stops, and is there again after a restart.
#[test]
fn a_global_store_is_restored_before_the_first_record_and_kept_while_running() {
    let Some(bootstrap) = bootstrap("a_global_store_is_restored_before_the_first_record") else {
        return;
    };
    let (app, orders, customers, output) = (
        unique("global"),
        unique("global-orders"),
        unique("global-customers"),
        unique("global-out"),
    );
    prometheus();
    create_topic(&bootstrap, &orders, 4);
    create_topic(&bootstrap, &customers, 2);
    create_topic(&bootstrap, &output, 4);
    let mut people: Vec<(String, Option<String>)> = (0..100)
        .map(|i| (format!("c{i}"), Some(format!("name-{i}"))))
        .collect();
    people.push(("c5".to_owned(), None));
    send_all(&bootstrap, &customers, &people);
    let placed: Vec<(String, Option<String>)> = (0..400)
        .map(|i| (format!("o{i}"), Some(format!("c{}", i % 100))))
        .collect();
    send_all(&bootstrap, &orders, &placed);

    let topology = || {
        let mut builder = TopologyBuilder::new();
        builder
            .add_global_store(
                StoreSpec::new("customers", "redb"),
                "customers-source",
                &customers,
                "customers-keeper",
            )
            .add_source::<String, String, Utf8, Utf8>("orders", [orders.as_str()])
            .add_processor("enrich", || Enrich, ["orders"])
            .add_store(StoreSpec::new("seen", "redb"), ["enrich"])
            .add_sink::<String, String, Utf8, Utf8>("out", output.as_str(), ["enrich"]);
        builder.build().expect("builds")
    };
    let dir = tempfile::tempdir().expect("dir");
    let configured = |topology: &statestore_tasks::topology::Topology| {
        topology
            .configure(TasksConfig {
                input_topics: Vec::new(),
                stores: Vec::new(),
                ..config(&bootstrap, &app, &orders, dir.path())
            })
            .expect("configures")
    };
    let outputs = || -> BTreeMap<String, String> {
        read_topic(&bootstrap, &output)
            .into_iter()
            .map(|(key, value, _)| (key.unwrap_or_default(), value.unwrap_or_default()))
            .collect()
    };
    // Runs the application until `done` holds (or two minutes pass), with `meanwhile`
    // called every half second.
    let run = |meanwhile: &dyn Fn(u32), done: &dyn Fn() -> bool| {
        let topology = topology();
        let config = configured(&topology);
        let stop = AtomicBool::new(false);
        thread::scope(|scope| {
            let application = Application::new(config).expect("app");
            let queries = application.queries();
            let running = scope.spawn(|| application.run_topology(&stop, topology));
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut round = 0;
            while Instant::now() < deadline && !running.is_finished() && !done() {
                meanwhile(round);
                round += 1;
                thread::sleep(Duration::from_millis(500));
            }
            // What an interactive query reads of the global store.
            let read: Vec<Option<String>> = ["c1", "c5", "c100"]
                .iter()
                .map(|key| {
                    let value = queries
                        .get_global("customers", key.as_bytes())
                        .expect("query");
                    value.map(|v| String::from_utf8_lossy(&v).into_owned())
                })
                .collect();
            assert!(
                queries.get_global("seen", b"o1").is_err(),
                "a task's store is not global"
            );
            stop.store(true, Ordering::Relaxed);
            running.join().expect("run").expect("runs");
            read
        })
    };

    let late = |k: u32| (format!("late-{k}"), Some("c100".to_owned()));
    let queried = run(
        &|round| match round {
            0 => {}
            1 => send_all(
                &bootstrap,
                &customers,
                &[("c100".into(), Some("new".into()))],
            ),
            k => send_all(&bootstrap, &orders, &[late(k)]),
        },
        &|| outputs().values().any(|v| v == "c100:new"),
    );
    let seen = outputs();
    for i in 0..400 {
        let customer = i % 100;
        let expected = if customer == 5 {
            "c5:unknown".to_owned()
        } else {
            format!("c{customer}:name-{customer}")
        };
        assert_eq!(seen.get(&format!("o{i}")), Some(&expected), "order o{i}");
    }
    assert!(
        seen.values().any(|v| v == "c100:new"),
        "a customer added while the application runs is never found"
    );
    let some = |v: &str| Some(v.to_owned());
    assert_eq!(
        queried,
        [some("name-1"), None, some("new")],
        "interactive queries"
    );

    let checkpoint = statestore_changelog::Checkpoint::open(
        dir.path().join(&app).join("global").join(".checkpoint"),
    )
    .expect("checkpoint");
    let held: u64 = (0..2).filter_map(|p| checkpoint.get(&customers, p)).sum();
    assert_eq!(held, 102, "the checkpoint of the customers' topic");
    // Restored before the tasks started: the 101 records there when it started (the
    // customer added later was applied by the thread that keeps the store).
    let restored = || {
        metric_sum(
            &app,
            statestore_tasks::metrics::GLOBAL_RESTORED_RECORDS_TOTAL,
        )
    };
    assert_eq!(
        restored(),
        101.0,
        "records restored before the tasks started"
    );

    // Restarted on its files: the store is there, read from its checkpoint on.
    send_all(
        &bootstrap,
        &orders,
        &[("after".into(), Some("c100".into()))],
    );
    run(&|_| {}, &|| outputs().contains_key("after"));
    assert_eq!(outputs().get("after").map(String::as_str), Some("c100:new"));
    assert_eq!(
        restored(),
        101.0,
        "a restart restores from the checkpoint, not from the start"
    );
}

/// Splits a line into its words, each forwarded keyed by itself.
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
    ) -> store_api::Result<()> {
        let text = line.value.clone().unwrap_or_default();
        for word in text.split_whitespace() {
            let word = Some(word.to_owned());
            ctx.forward(Record::new(word.clone(), word, line.timestamp))?;
        }
        Ok(())
    }
}

/// Lines keyed by their number -> split -> re-keyed by word through the repartition topic
/// `<app>-words-repartition`, which the application creates with the input's partition count
/// -> counted per word: the counts are exact and each count is output once, in order, under
/// `guarantee`.
/// Lines of `input` split into words, re-keyed through repartition topic `words` and counted
/// in store `counts` (redb), each count sent to `output` when given as `<word>|direct:<n>`.
fn rekey_topology(input: &str, output: Option<&str>) -> Topology {
    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("lines", [input])
        .add_processor("split", || Split, ["lines"])
        .add_sink::<String, String, Utf8, Utf8>(
            "to-words",
            TopicName::repartition("words"),
            ["split"],
        )
        .add_source::<String, String, Utf8, Utf8>("words", [TopicName::repartition("words")])
        .add_processor("count", || Count, ["words"])
        .add_store(StoreSpec::new("counts", "redb"), ["count"]);
    if let Some(output) = output {
        builder.add_sink::<String, String, Utf8, Utf8>("out", output, ["count"]);
    }
    builder.build().expect("builds")
}

/// `count` lines of three words each, keyed `line-<i>`, and how often each word occurs.
fn word_lines(count: u64) -> (Vec<(String, String)>, BTreeMap<String, u64>) {
    let lines: Vec<(String, String)> = (0..count)
        .map(|i| {
            let words: Vec<String> = (0..3).map(|j| word(i * 3 + j)).collect();
            (format!("line-{i}"), words.join(" "))
        })
        .collect();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for (_, line) in &lines {
        for word in line.split_whitespace() {
            *expected.entry(word.to_owned()).or_default() += 1;
        }
    }
    (lines, expected)
}

fn rekeyed(guarantee: ProcessingGuarantee) {
    let Some(bootstrap) = bootstrap("a_repartition_topic_rekeys_words") else {
        return;
    };
    let (app, input, output) = (unique("rekey"), unique("rekey-in"), unique("rekey-out"));
    create_topic(&bootstrap, &input, 4);
    create_topic(&bootstrap, &output, 4);
    let (lines, expected) = word_lines(1_000);
    produce_pairs(&bootstrap, &input, &lines);

    let topology = rekey_topology(&input, Some(&output));
    assert_eq!(topology.subtopologies().len(), 2);
    let dir = tempfile::tempdir().expect("dir");
    let config = topology
        .configure(TasksConfig {
            input_topics: Vec::new(),
            stores: Vec::new(),
            processing_guarantee: guarantee,
            repartition_purge_interval_ms: 100,
            ..config(&bootstrap, &app, &input, dir.path())
        })
        .expect("configures");
    let repartition = format!("{app}-words-repartition");
    assert_eq!(
        config.repartition_topics,
        std::slice::from_ref(&repartition)
    );

    let stop = AtomicBool::new(false);
    let counts = thread::scope(|scope| {
        let application = Application::new(config).expect("app");
        let queries = application.queries();
        let running = scope.spawn(|| application.run_topology(&stop, topology));
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut counts = BTreeMap::new();
        let mut purged = 0;
        // Until the counts are exact and the repartition records they come from purged.
        while Instant::now() < deadline && !running.is_finished() {
            counts = changelog_counts(&bootstrap, &app, PARTITIONS);
            purged = low_watermarks(&bootstrap, &repartition);
            if counts == expected && purged >= 3_000 {
                break;
            }
            thread::sleep(Duration::from_millis(500));
        }
        // A query of a word reaches the counting task of the word's partition.
        for (word, &n) in &expected {
            let read = queries
                .get("counts", word.as_bytes(), ReadFrom::Active)
                .expect("a local read");
            let value = read.value.map(|value| decode(&value));
            assert_eq!(value, Some(n), "the query of {word}");
        }
        stop.store(true, Ordering::Relaxed);
        running.join().expect("run").expect("runs");
        (counts, purged)
    });
    let (counts, purged) = counts;
    assert_eq!(counts, expected, "the counts the changelogs hold");
    // Each sub-topology makes its own tasks: the store lives in the counting tasks `1_<p>`,
    // the splitting tasks `0_<p>` hold none.
    let tasks = dir.path().join(&app);
    for partition in 0..PARTITIONS {
        let counting = tasks
            .join(format!("1_{partition}"))
            .join("redb")
            .join("counts");
        assert!(counting.is_dir(), "{} is missing", counting.display());
        let splitting = tasks.join(format!("0_{partition}")).join("redb");
        assert!(!splitting.exists(), "{} holds a store", splitting.display());
    }
    // The 3,000 words' records, below what the tasks committed (with exactly-once, the
    // transaction markers between them too).
    assert!(
        purged >= 3_000,
        "the repartition topic's low watermarks sum to {purged}"
    );

    let values: Vec<String> = match guarantee {
        ProcessingGuarantee::ExactlyOnceV2 => read_committed_values(&bootstrap, &output),
        _ => read_topic(&bootstrap, &output)
            .into_iter()
            .map(|(_, value, _)| value.unwrap_or_default())
            .collect(),
    };
    let mut outputs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for value in values {
        let (word, output) = value.split_once('|').expect("<word>|<output>");
        outputs
            .entry(word.to_owned())
            .or_default()
            .push(output.to_owned());
    }
    for (word, &n) in &expected {
        let each: Vec<String> = (1..=n).map(|i| format!("direct:{i}")).collect();
        assert_eq!(outputs.get(word), Some(&each), "the outputs of {word}");
    }
}

/// The sum of `topic`'s low watermarks: how many of its records were deleted.
fn low_watermarks(bootstrap: &str, topic: &str) -> i64 {
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("consumer");
    (0..i32::try_from(PARTITIONS).expect("few"))
        .map(|partition| {
            rdkafka::consumer::Consumer::fetch_watermarks(
                &consumer,
                topic,
                partition,
                Duration::from_secs(10),
            )
            .map_or(0, |(low, _)| low)
        })
        .sum()
}

#[test]
fn a_repartition_topic_rekeys_words_between_two_subtopologies() {
    rekeyed(ProcessingGuarantee::AtLeastOnce);
}

#[test]
fn a_repartition_topic_rekeys_words_exactly_once() {
    rekeyed(ProcessingGuarantee::ExactlyOnceV2);
}

/// With a standby replica, each of two instances keeps copies of the other's counting tasks
/// `1_<p>`, and a query of any
/// word on either instance reads its count, from the active task on one and from the standby
/// copy on the other.
#[test]
fn standby_copies_of_a_subtopologys_tasks_answer_queries() {
    let Some(bootstrap) = bootstrap("standby_copies_of_a_subtopologys_tasks_answer_queries") else {
        return;
    };
    let (app, input) = (unique("rekey-standby"), unique("rekey-standby-in"));
    create_topic(&bootstrap, &input, 4);
    let (lines, expected) = word_lines(500);
    produce_pairs(&bootstrap, &input, &lines);
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    let stop = AtomicBool::new(false);
    let (standby_reads, copies) = thread::scope(|scope| {
        let mut queries = Vec::new();
        let mut running = Vec::new();
        for dir in &dirs {
            let topology = rekey_topology(&input, None);
            let config = topology
                .configure(TasksConfig {
                    input_topics: Vec::new(),
                    stores: Vec::new(),
                    num_standby_replicas: 1,
                    ..config(&bootstrap, &app, &input, dir.path())
                })
                .expect("configures");
            let application = Application::new(config).expect("app");
            queries.push(application.queries());
            let stop = &stop;
            running.push(scope.spawn(move || application.run_topology(stop, topology)));
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut standby_reads = 0;
        // Until every word reads its count on both instances, once from a standby copy.
        while Instant::now() < deadline && running.iter().all(|r| !r.is_finished()) {
            standby_reads = 0;
            let mut exact = true;
            for (word, &n) in &expected {
                for handle in &queries {
                    match handle.get("counts", word.as_bytes(), ReadFrom::ActiveOrStandby) {
                        Ok(read) if read.value.as_deref().map(decode) == Some(n) => {
                            standby_reads += usize::from(read.source != ReadSource::Active);
                        }
                        _ => exact = false,
                    }
                }
            }
            if exact && standby_reads == expected.len() {
                break;
            }
            thread::sleep(Duration::from_millis(500));
        }
        // The copies' directories, while both instances hold them.
        let copies: Vec<String> = dirs
            .iter()
            .flat_map(|dir| std::fs::read_dir(dir.path().join(&app)).expect("state dir"))
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.contains('_'))
            .collect();
        stop.store(true, Ordering::Relaxed);
        for run in running {
            run.join().expect("run").expect("runs");
        }
        (standby_reads, copies)
    });
    assert_eq!(
        standby_reads,
        expected.len(),
        "each word read from a standby copy on one instance"
    );
    // Each instance holds its own tasks 1_<p> and copies of the other's.
    let counting = copies.iter().filter(|name| name.starts_with("1_")).count();
    assert_eq!(counting, 8, "task directories {copies:?}");
}

/// A repartition topic that exists with another partition count than the inputs' is a clear
/// error when the application starts, naming both counts.
#[test]
fn a_repartition_topic_with_another_partition_count_is_an_error() {
    let Some(bootstrap) = bootstrap("a_repartition_topic_with_another_partition_count") else {
        return;
    };
    let (app, input) = (unique("rekey-count"), unique("rekey-count-in"));
    create_topic(&bootstrap, &input, 4);
    create_topic(&bootstrap, &format!("{app}-words-repartition"), 3);
    let topology = rekey_topology(&input, None);
    let dir = tempfile::tempdir().expect("dir");
    let config = topology
        .configure(TasksConfig {
            input_topics: Vec::new(),
            stores: Vec::new(),
            ..config(&bootstrap, &app, &input, dir.path())
        })
        .expect("configures");
    let err = match Application::new(config) {
        Ok(_) => panic!("started with a repartition topic of 3 partitions"),
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains("-words-repartition has 3 partitions") && err.contains("has 4"),
        "{err}"
    );
}
