//! A broker with SASL and the StandardAuthorizer, `allow.everyone.if.no.acl.found=false` (a
//! cluster of the test's own, started through `scripts/broker.sh` with
//! `STATESTORE_BROKER_SECURITY=sasl`): an application authenticated with SCRAM-SHA-512 and
//! given exactly the ACLs Kafka Streams documents processes every record, with two instances,
//! a restart and under `exactly_once_v2`, and the broker denies it nothing; a wrong password,
//! a group the principal may not read and an input topic it may describe but not read each
//! end the run with an error naming the cause within seconds, never a hang or a timeout; an
//! ACL removed from a running application stops it with a clear error, and once restored the
//! application resumes with nothing lost. OAUTHBEARER (module `oauth`) and TLS (module `tls`)
//! on clusters of their own; Kerberos (module `kerberos`) too, built with `--features gssapi`
//! (`cargo test -p statestore-tasks --features gssapi --test secured_kafka kerberos::`).
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP` like every Kafka test (without it the test prints one
//! SKIP line and passes), and Java for the broker and Apache Kafka's ACL tool.

#[cfg(feature = "gssapi")]
mod kerberos;
mod oauth;
mod support;
mod tls;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use statestore_tasks::{Application, ProcessingGuarantee, TasksConfig};
use statestore_test_support::Cluster;
use support::{
    bootstrap, config, count_word, produce_words_with, try_changelog_counts_with, unique,
    wait_until, word,
};

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

/// A SASL cluster of `test`'s own (see [`Cluster::start_sasl`]) and a directory for the
/// test's files, or `None` after `test`'s SKIP line when no broker is configured.
fn sasl_cluster(test: &str) -> Option<(Cluster, tempfile::TempDir)> {
    bootstrap(test)?;
    let cluster = Cluster::start_sasl(1);
    Some((cluster, tempfile::tempdir().expect("dir")))
}

/// A word count as `properties`' principal on a new input topic holding [`RECORDS`] records,
/// its state in `dir`.
fn application(bootstrap: &str, dir: &Path, properties: BTreeMap<String, String>) -> TasksConfig {
    let input = unique("secured-input");
    statestore_tasks::create_topic_with(bootstrap, &admin(), &input, PARTITIONS)
        .expect("input topic");
    produce_words_with(bootstrap, &admin(), &input, RECORDS);
    TasksConfig {
        properties,
        ..config(bootstrap, &unique("secured"), &input, dir)
    }
}

/// An [`application`] with its state in `dir`'s subdirectory `state`, and alice granted the
/// ACLs Kafka Streams documents for it but `withheld` (see [`grant`]).
fn granted(
    bootstrap: &str,
    dir: &Path,
    state: &str,
    properties: BTreeMap<String, String>,
    withheld: Withheld,
) -> TasksConfig {
    let config = application(bootstrap, &dir.join(state), properties);
    grant(bootstrap, dir, &config, withheld);
    config
}

/// Runs `config` until it has processed `until` distinct records (partition, offset), failed,
/// or `timeout` passed, and returns how many distinct records it processed and how many times
/// it processed one already seen.
fn run(config: TasksConfig, until: u64, timeout: Duration) -> store_api::Result<(u64, u64)> {
    let seen = Arc::new(Mutex::new((BTreeSet::new(), 0u64)));
    let seen_by_processor = Arc::clone(&seen);
    let mut processor = move |ctx: &mut statestore_tasks::ProcessorContext<'_>| {
        let mut seen = seen_by_processor.lock().expect("not poisoned");
        if !seen.0.insert((ctx.partition(), ctx.offset())) {
            seen.1 += 1;
        }
        drop(seen);
        count_word(ctx)
    };
    let distinct = || seen.lock().expect("not poisoned").0.len() as u64;
    let mut app = Application::new(config)?;
    let deadline = Instant::now() + timeout;
    while distinct() < until && Instant::now() < deadline {
        app.poll(Duration::from_millis(50), &mut processor)?;
    }
    app.close()?;
    let seen = seen.lock().expect("not poisoned");
    Ok((seen.0.len() as u64, seen.1))
}

/// Runs `config` on its input of [`RECORDS`] records, which it must process once each.
fn assert_once_each(case: &str, config: TasksConfig) {
    let started = Instant::now();
    let (distinct, again) = run(config, RECORDS, Duration::from_secs(120))
        .unwrap_or_else(|err| panic!("{case}: {err}"));
    eprintln!("{case}: {distinct} records in {:?}", started.elapsed());
    assert_eq!(
        (distinct, again),
        (RECORDS, 0),
        "{case}: records processed, and again"
    );
}

/// Runs `config`, which must fail, and returns its error's text and how long it took.
fn fails(config: TasksConfig) -> (String, Duration) {
    let started = Instant::now();
    let err = run(config, u64::MAX, Duration::from_secs(60)).expect_err("the run failed");
    (err.to_string(), started.elapsed())
}

/// Adds an ACL with Apache Kafka's own tool, as the admin: `args` after `--add`.
fn add_acl(bootstrap: &str, dir: &Path, args: &[&str]) {
    acl_command(bootstrap, dir, &[&["--add"], args].concat());
}

/// Removes the ACL `args` describe, as the admin.
fn remove_acl(bootstrap: &str, dir: &Path, args: &[&str]) {
    acl_command(bootstrap, dir, &[&["--remove", "--force"], args].concat());
}

/// The principal of the application under test.
const ALICE: &str = "User:alice";

/// An ACL of the set Kafka Streams documents that a case leaves out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Withheld {
    Nothing,
    /// READ on the group (DESCRIBE on the input topic stays).
    GroupRead,
    /// READ on the input topic, which alice may only describe.
    InputRead,
}

/// READ on the group named by the application id.
fn group_read(group: &str) -> [&str; 6] {
    [
        "--allow-principal",
        ALICE,
        "--operation",
        "Read",
        "--group",
        group,
    ]
}

/// Grants alice the ACLs Kafka Streams documents for `config`'s application, but `withheld`:
/// READ on the input topic and the group; CREATE, READ, WRITE, DESCRIBE and DESCRIBE_CONFIGS
/// on topics prefixed with the application id; WRITE and DESCRIBE on transactional ids
/// prefixed with it.
fn grant(bootstrap: &str, dir: &Path, config: &TasksConfig, withheld: Withheld) {
    let (app, input) = (&config.application_id, &config.input_topics[0]);
    let input_operation = if withheld == Withheld::InputRead {
        "Describe"
    } else {
        "Read"
    };
    let input_acl = [
        "--allow-principal",
        ALICE,
        "--operation",
        input_operation,
        "--topic",
        input,
    ];
    add_acl(bootstrap, dir, &input_acl);
    if withheld != Withheld::GroupRead {
        add_acl(bootstrap, dir, &group_read(app));
    }
    let prefix = format!("{app}-");
    let topics = ["Create", "Read", "Write", "Describe", "DescribeConfigs"];
    add_prefixed_acl(bootstrap, dir, "--topic", &prefix, &topics);
    let transactional_ids = ["Write", "Describe"];
    add_prefixed_acl(
        bootstrap,
        dir,
        "--transactional-id",
        &prefix,
        &transactional_ids,
    );
}

/// Allows alice `operations` on every resource of kind `resource` (`--topic`,
/// `--transactional-id`) whose name starts with `prefix`.
fn add_prefixed_acl(
    bootstrap: &str,
    dir: &Path,
    resource: &str,
    prefix: &str,
    operations: &[&str],
) {
    let mut args = vec![
        "--allow-principal",
        ALICE,
        "--resource-pattern-type",
        "prefixed",
    ];
    args.extend([resource, prefix]);
    for operation in operations {
        args.extend(["--operation", operation]);
    }
    add_acl(bootstrap, dir, &args);
}

/// Runs Apache Kafka's ACL tool with `args`, as the admin over SASL_PLAINTEXT.
fn acl_command(bootstrap: &str, dir: &Path, args: &[&str]) {
    // Java's client takes its SASL credentials as a JAAS line.
    let admin = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=\
         org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"admin\" password=\"admin-secret\";\n";
    acl_command_as(bootstrap, dir, admin, args);
}

/// Runs Apache Kafka's ACL tool with `args` and the client properties `admin` (the text of a
/// `client.properties` file, written into `dir`).
fn acl_command_as(bootstrap: &str, dir: &Path, admin: &str, args: &[&str]) {
    let properties = dir.join("admin.properties");
    std::fs::write(&properties, admin).expect("admin properties");
    let classpath = statestore_test_support::kafka_classpath();
    let out = Command::new("java")
        .args(["-cp", &classpath, "org.apache.kafka.tools.AclCommand"])
        .args(["--bootstrap-server", bootstrap, "--command-config"])
        .arg(&properties)
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
    let Some((cluster, dir)) =
        sasl_cluster("secured_clients_work_and_every_refusal_is_a_clear_error_in_seconds")
    else {
        return;
    };
    let (bootstrap, dir) = (cluster.bootstrap(), dir.path());

    let scram = sasl("SCRAM-SHA-512", "alice", "alice-secret");
    let config = granted(bootstrap, dir, "s", scram.clone(), Withheld::Nothing);
    assert_once_each("SCRAM-SHA-512", config);

    let wrong = sasl("SCRAM-SHA-512", "alice", "not-the-password");
    let failed = fails(application(bootstrap, &dir.join("w"), wrong));
    assert_clear("a wrong password", &failed, &["Authentication"]);

    let config = granted(bootstrap, dir, "g", scram.clone(), Withheld::GroupRead);
    let failed = fails(config);
    assert_clear("the group's READ missing", &failed, &["GroupAuthorization"]);

    let config = granted(bootstrap, dir, "t", scram, Withheld::InputRead);
    let failed = fails(config);
    assert_clear(
        "the input topic's READ missing",
        &failed,
        &["TopicAuthorization", "Fetch"],
    );
}

/// An instance running on a thread of its own until stopped or failed.
struct Instance {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<store_api::Result<()>>,
}

impl Instance {
    fn start(config: TasksConfig) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || Application::new(config)?.run(&flag, count_word));
        Instance { stop, thread }
    }

    /// Panics with the instance's error when it has ended on its own.
    fn assert_running(&mut self) {
        if self.thread.is_finished() {
            let thread = std::mem::replace(&mut self.thread, std::thread::spawn(|| Ok(())));
            let result = thread.join().expect("the instance's thread");
            panic!("the instance ended on its own: {result:?}");
        }
    }

    /// Stops the instance, which must not have failed.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .expect("the instance's thread")
            .expect("the instance ran without an error");
    }

    /// Waits for the instance to fail: its error, and when it came.
    fn failed(self, started: Instant) -> (String, Duration) {
        let deadline = started + Duration::from_secs(120);
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = started.elapsed();
        self.stop.store(true, Ordering::Relaxed);
        let result = self.thread.join().expect("the instance's thread");
        (result.expect_err("the instance failed").to_string(), took)
    }
}

/// Waits until the changelogs of `config`'s application (read as the admin) hold `rounds`
/// times every word of [`application`]'s input, and checks that they hold exactly that.
/// Checks meanwhile that `instances` still run.
fn assert_counted(
    bootstrap: &str,
    config: &TasksConfig,
    rounds: u64,
    instances: &mut [&mut Instance],
) {
    let counts = || {
        try_changelog_counts_with(
            bootstrap,
            &admin(),
            &config.application_id,
            PARTITIONS.unsigned_abs(),
        )
        .unwrap_or_else(|err| {
            eprintln!("reading the changelogs: {err}");
            BTreeMap::new()
        })
    };
    let total = rounds * RECORDS;
    wait_until(Duration::from_secs(120), || {
        for instance in instances.iter_mut() {
            instance.assert_running();
        }
        counts().values().sum::<u64>() >= total
    });
    let mut expected = BTreeMap::new();
    for i in 0..RECORDS {
        *expected.entry(word(i)).or_insert(0) += rounds;
    }
    assert_eq!(
        counts(),
        expected,
        "the counts after {rounds} rounds of input"
    );
}

/// The denials of alice's requests in the broker's authoriser log, from byte `from` on.
fn denials(cluster: &Cluster, from: usize) -> Vec<String> {
    let log = cluster.log(1);
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("Principal = User:alice is Denied"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_documented_acls_are_all_an_application_needs() {
    let Some((cluster, dir)) = sasl_cluster("the_documented_acls_are_all_an_application_needs")
    else {
        return;
    };
    let (bootstrap, dir) = (cluster.bootstrap(), dir.path());
    let scram = sasl("SCRAM-SHA-512", "alice", "alice-secret");
    let config = TasksConfig {
        processing_guarantee: ProcessingGuarantee::ExactlyOnceV2,
        ..granted(bootstrap, dir, "a", scram, Withheld::Nothing)
    };
    let second = TasksConfig {
        state_dir: dir.join("b"),
        ..config.clone()
    };
    let input = config.input_topics[0].clone();

    // Two instances, then one of them restarted while the input grows.
    let mut a = Instance::start(config.clone());
    let mut b = Instance::start(second.clone());
    assert_counted(bootstrap, &config, 1, &mut [&mut a, &mut b]);
    a.stop();
    produce_words_with(bootstrap, &admin(), &input, RECORDS);
    let mut a = Instance::start(config.clone());
    assert_counted(bootstrap, &config, 2, &mut [&mut a, &mut b]);
    let denied = denials(&cluster, 0);
    assert!(denied.is_empty(), "the broker denied alice: {denied:#?}");

    // The group's READ removed from the running application stops both instances.
    remove_acl(bootstrap, dir, &group_read(&config.application_id));
    let removed = Instant::now();
    produce_words_with(bootstrap, &admin(), &input, RECORDS);
    assert_clear(
        "the group's READ removed, instance a",
        &a.failed(removed),
        &["GroupAuthorization"],
    );
    assert_clear(
        "the group's READ removed, instance b",
        &b.failed(removed),
        &["GroupAuthorization"],
    );

    // Restored, the application resumes where its commits left it: nothing lost, nothing
    // counted twice.
    let restored = cluster.log(1).len();
    add_acl(bootstrap, dir, &group_read(&config.application_id));
    let mut a = Instance::start(config.clone());
    let mut b = Instance::start(second);
    assert_counted(bootstrap, &config, 3, &mut [&mut a, &mut b]);
    a.stop();
    b.stop();
    let denied = denials(&cluster, restored);
    assert!(denied.is_empty(), "denied once restored: {denied:#?}");
}
