//! A broker with SASL and the StandardAuthorizer (a cluster of the test's own, started through
//! `scripts/broker.sh` with `STATESTORE_BROKER_SECURITY=sasl`): an application authenticated
//! with SCRAM-SHA-512 processes every record and commits; a wrong password, a group the
//! principal may not read and an input topic it may describe but not read each end the run
//! with an error naming the cause within seconds, never a hang or a timeout.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP` like every Kafka test (without it the test prints one
//! SKIP line and passes), and Java for the broker and Apache Kafka's ACL tool.

mod support;
mod tls;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use statestore_tasks::{Application, TasksConfig};
use statestore_test_support::Cluster;
use support::{bootstrap, config, count_word, send_waiting, unique, word};

const PARTITIONS: i32 = 4;
const RECORDS: u64 = 2_000;
/// The goal is 5 s; the bound leaves room for a loaded machine, and the time is printed.
const CLEAR_ERROR_WITHIN: Duration = Duration::from_secs(15);

/// SASL properties of `user` with `mechanism` and `password`.
fn sasl(mechanism: &str, user: &str, password: &str) -> BTreeMap<String, String> {
    [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", mechanism),
        ("sasl.username", user),
        ("sasl.password", password),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect()
}

fn admin() -> BTreeMap<String, String> {
    sasl("PLAIN", "admin", "admin-secret")
}

/// A word count as `properties`' principal on a new input topic holding [`RECORDS`] records.
fn application(bootstrap: &str, dir: &Path, properties: BTreeMap<String, String>) -> TasksConfig {
    let input = unique("secured-input");
    statestore_tasks::create_topic_with(bootstrap, &admin(), &input, PARTITIONS)
        .expect("input topic");
    let mut producer = ClientConfig::new();
    for (key, value) in admin() {
        producer.set(key, value);
    }
    let producer: BaseProducer = producer
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for i in 0..RECORDS {
        let word = word(i);
        send_waiting(
            &producer,
            BaseRecord::to(&input)
                .key(word.as_bytes())
                .payload(word.as_bytes()),
        );
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    TasksConfig {
        properties,
        ..config(bootstrap, &unique("secured"), &input, dir)
    }
}

/// Runs `config` until it processed `until` records or failed, for at most `timeout`.
fn run(config: TasksConfig, until: u64, timeout: Duration) -> store_api::Result<u64> {
    let processed = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&processed);
    let mut processor = move |ctx: &mut statestore_tasks::ProcessorContext<'_>| {
        counted.fetch_add(1, Ordering::Relaxed);
        count_word(ctx)
    };
    let mut app = Application::new(config)?;
    let deadline = Instant::now() + timeout;
    while processed.load(Ordering::Relaxed) < until && Instant::now() < deadline {
        app.poll(Duration::from_millis(50), &mut processor)?;
    }
    app.close()?;
    Ok(processed.load(Ordering::Relaxed))
}

/// Runs `config`, which must fail, and returns its error's text and how long it took.
fn fails(config: TasksConfig) -> (String, Duration) {
    let started = Instant::now();
    let err = run(config, u64::MAX, Duration::from_secs(60)).expect_err("the run failed");
    (err.to_string(), started.elapsed())
}

/// Adds an ACL with Apache Kafka's own tool, as the admin: `args` after `--add`.
fn add_acl(bootstrap: &str, dir: &Path, args: &[&str]) {
    // Java's client takes its SASL credentials as a JAAS line.
    let properties = dir.join("admin.properties");
    std::fs::write(
        &properties,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=\
         org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"admin\" password=\"admin-secret\";\n",
    )
    .expect("admin properties");
    let classpath = statestore_test_support::kafka_classpath();
    let out = Command::new("java")
        .args(["-cp", &classpath, "org.apache.kafka.tools.AclCommand"])
        .args(["--bootstrap-server", bootstrap, "--command-config"])
        .arg(&properties)
        .arg("--add")
        .args(args)
        .output()
        .expect("running kafka's AclCommand");
    assert!(
        out.status.success(),
        "AclCommand {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_clear(case: &str, (message, took): &(String, Duration), names: &[&str]) {
    eprintln!("{case}: failed after {took:?}: {message}");
    assert!(
        *took < CLEAR_ERROR_WITHIN,
        "{case}: the error took {took:?}: {message}"
    );
    for name in names {
        assert!(message.contains(name), "{case}: {name:?} not in {message}");
    }
}

#[test]
fn secured_clients_work_and_every_refusal_is_a_clear_error_in_seconds() {
    if bootstrap("secured_clients_work_and_every_refusal_is_a_clear_error_in_seconds").is_none() {
        return;
    }
    let cluster = Cluster::start_sasl(1);
    let bootstrap = cluster.bootstrap().to_owned();
    let dir = tempfile::tempdir().expect("dir");

    let scram = sasl("SCRAM-SHA-512", "alice", "alice-secret");
    let config = application(&bootstrap, dir.path(), scram.clone());
    let processed = run(config, RECORDS, Duration::from_secs(120)).expect("a SCRAM run");
    assert_eq!(processed, RECORDS, "records processed over SCRAM-SHA-512");

    let wrong = sasl("SCRAM-SHA-512", "alice", "not-the-password");
    let failed = fails(application(&bootstrap, &dir.path().join("w"), wrong));
    assert_clear("a wrong password", &failed, &["Authentication"]);

    // An ACL naming only the admin closes the group to alice.
    let config = application(&bootstrap, &dir.path().join("g"), scram.clone());
    let group = config.application_id.clone();
    add_acl(
        &bootstrap,
        dir.path(),
        &[
            "--allow-principal",
            "User:admin",
            "--operation",
            "Read",
            "--group",
            &group,
        ],
    );
    let failed = fails(config);
    assert_clear("the group's READ missing", &failed, &["GroupAuthorization"]);

    // Alice may describe the input topic, not read it.
    let config = application(&bootstrap, &dir.path().join("t"), scram);
    let input = config.input_topics[0].clone();
    add_acl(
        &bootstrap,
        dir.path(),
        &[
            "--allow-principal",
            "User:admin",
            "--operation",
            "Read",
            "--topic",
            &input,
        ],
    );
    add_acl(
        &bootstrap,
        dir.path(),
        &[
            "--allow-principal",
            "User:alice",
            "--operation",
            "Describe",
            "--topic",
            &input,
        ],
    );
    let failed = fails(config);
    assert_clear(
        "the input topic's READ missing",
        &failed,
        &["TopicAuthorization", "Fetch"],
    );
}
