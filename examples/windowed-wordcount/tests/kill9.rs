//! Two instances of `windowed-wordcount` on the real broker, one of them killed with SIGKILL at
//! a random moment of each round and started again on its state directory: every window (or
//! session) is emitted with its exact count, and none before it closed. An instance killed
//! after sending an emission and before committing it sends it again, with the same count
//! (outputs are at least once); nothing else is emitted twice.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use windowed_wordcount::{BURST, Mode, default_base, expected, parse_emitted};

const BIN: &str = env!("CARGO_BIN_EXE_windowed-wordcount");
const PARTITIONS: i32 = 4;

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// One instance, as a child process.
struct Instance {
    child: Child,
}

impl Instance {
    fn start(
        bootstrap: &str,
        app: &str,
        input: &str,
        output: &str,
        mode: &str,
        dir: &Path,
    ) -> Self {
        let child = Command::new(BIN)
            .args([
                "run",
                "--bootstrap",
                bootstrap,
                "--topic",
                input,
                "--output",
                output,
            ])
            .args(["--application-id", app, "--mode", mode])
            .args([
                "--commit-interval-ms",
                "200",
                "--session-timeout-ms",
                "6000",
            ])
            .arg("--stop-on-stdin-eof")
            .arg("--state-dir")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn instance");
        Instance { child }
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// Closes stdin: the instance commits, leaves the group and exits.
    fn stop(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "instance failed: {status}");
    }
}

fn produce(bootstrap: &str, topic: &str, base: i64, from: u64, to: u64, close: bool) {
    let mut command = Command::new(BIN);
    command
        .args(["produce", "--bootstrap", bootstrap, "--topic", topic])
        .args(["--base-ms", &base.to_string()])
        .args(["--from", &from.to_string(), "--to", &to.to_string()]);
    if close {
        command.arg("--close");
    }
    assert!(command.status().expect("produce").success(), "produce");
}

/// Every record of the one-partition topic `topic`: (key, value).
fn read_all(bootstrap: &str, topic: &str) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let (_, end) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let mut records = Vec::new();
    while i64::try_from(records.len()).expect("small") < end {
        match consumer.poll(Duration::from_secs(10)) {
            Some(Ok(message)) => records.push((
                String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
                String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
            )),
            Some(Err(err)) => panic!("reading {topic}: {err}"),
            None => panic!("reading {topic}: {} of {end} records", records.len()),
        }
    }
    records
}

/// The emitted values of each (word, start, end).
fn emitted(bootstrap: &str, topic: &str) -> BTreeMap<(String, i64, i64), Vec<u64>> {
    let mut out: BTreeMap<_, Vec<u64>> = BTreeMap::new();
    for (word, value) in read_all(bootstrap, topic) {
        let (start, end, count) = parse_emitted(&value).expect("start,end,count");
        out.entry((word, start, end)).or_default().push(count);
    }
    out
}

fn emits_each_closed_window_exactly_under_kill9(test: &str, mode: Mode, mode_name: &str) {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(test) else {
        return;
    };
    let app = unique(&format!("ww-{mode_name}"));
    let (input, output) = (format!("{app}-input"), format!("{app}-closed"));
    statestore_tasks::create_topic(&bootstrap, &input, PARTITIONS).expect("input topic");
    statestore_tasks::create_topic(&bootstrap, &output, 1).expect("output topic");
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    let start =
        |i: usize| Instance::start(&bootstrap, &app, &input, &output, mode_name, dirs[i].path());
    let mut instances = [Some(start(0)), Some(start(1))];
    let mut rng = rand::rng();
    let base = default_base();
    let rounds = 4;
    for round in 0..rounds {
        produce(
            &bootstrap,
            &input,
            base,
            round * BURST,
            (round + 1) * BURST,
            false,
        );
        // One of the two dies at a random moment of the round and comes back.
        let victim = rng.random_range(0..2);
        std::thread::sleep(Duration::from_millis(rng.random_range(100..3_000)));
        instances[victim].take().expect("running").kill();
        instances[victim] = Some(start(victim));
    }
    produce(
        &bootstrap,
        &input,
        base,
        rounds * BURST,
        rounds * BURST,
        true,
    );

    let wanted = expected(mode, base, rounds * BURST);
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut found = emitted(&bootstrap, &output);
    while !wanted.keys().all(|key| found.contains_key(key)) {
        assert!(
            Instant::now() < deadline,
            "{} of {} windows emitted within 180 s",
            wanted.keys().filter(|key| found.contains_key(*key)).count(),
            wanted.len()
        );
        std::thread::sleep(Duration::from_secs(1));
        found = emitted(&bootstrap, &output);
    }
    for instance in instances.into_iter().flatten() {
        instance.stop();
    }
    let found = emitted(&bootstrap, &output);
    let mut repeated = 0;
    for (key, counts) in &found {
        let exact = wanted
            .get(key)
            .unwrap_or_else(|| panic!("{key:?} emitted, never closed"));
        assert!(
            counts.iter().all(|count| count == exact),
            "{key:?}: emitted {counts:?}, exact {exact}"
        );
        repeated += counts.len() - 1;
    }
    assert_eq!(found.len(), wanted.len());
    eprintln!(
        "{mode_name}: {} closed, every one exact; {repeated} sent again after a kill",
        wanted.len()
    );
}

#[test]
fn every_minute_window_is_emitted_exactly_under_kill9() {
    emits_each_closed_window_exactly_under_kill9(
        "every_minute_window_is_emitted_exactly_under_kill9",
        Mode::Windows,
        "windows",
    );
}

#[test]
fn every_session_is_emitted_exactly_under_kill9() {
    emits_each_closed_window_exactly_under_kill9(
        "every_session_is_emitted_exactly_under_kill9",
        Mode::Sessions,
        "sessions",
    );
}
