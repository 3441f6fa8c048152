//! Broker answers a test chooses, through the fault proxy of the test support crate, against
//! the real broker: retriable errors of every API the runtime sends, during processing, a
//! restore and a standby's catch-up, stop no instance and leave counts and outputs exact; a
//! Produce answer dropped after the write counts nothing twice; a fatal error (of an output,
//! of a restore) reaches the error policy with its cause; a blackholed instance loses its
//! tasks to the other and rejoins when the blackhole lifts. Under exactly-once outputs, the
//! transactional producer's retriable errors stop no instance and leave each input with
//! exactly one committed output, and a fatal one reaches the policy naming its API.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use statestore_tasks::{
    Application, ProcessingGuarantee, ProcessorContext, ProcessorPool, TasksConfig,
};
use statestore_test_support::FaultProxy;
use statestore_test_support::proxy::{ApiKey, Fault, Injection, ResponseError};
use support::*;

const PARTITIONS: u32 = 4;

/// How long an armed fault may take to fire.
const FIRE_TIMEOUT: Duration = Duration::from_secs(60);

/// An application instance polling on a thread of its own, counting words and sending one
/// output per input record.
struct Instance {
    name: String,
    stop: Arc<AtomicBool>,
    tasks: Arc<Mutex<Vec<u32>>>,
    /// How its run ended, once it did.
    ended: Arc<Mutex<Option<String>>>,
    handle: JoinHandle<store_api::Result<()>>,
}

impl Instance {
    fn start(name: &str, config: TasksConfig, output: &str) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(Mutex::new(None));
        let (stop2, tasks2, ended2) = (stop.clone(), tasks.clone(), ended.clone());
        let output = output.to_owned();
        let handle = thread::spawn(move || {
            let mut app = Application::new(config)?;
            let mut pool = ProcessorPool::new(|_| {
                let output = output.clone();
                move |ctx: &mut ProcessorContext<'_>| {
                    count_word(ctx)?;
                    let at = format!("{}:{}", ctx.partition(), ctx.offset());
                    ctx.send(&output, ctx.key(), Some(at.as_bytes()));
                    Ok(())
                }
            });
            let polled = (|| -> store_api::Result<()> {
                while !stop2.load(Ordering::Relaxed) {
                    app.poll_tasks(Duration::from_millis(50), &mut pool)?;
                    *tasks2.lock() = app.active_tasks().iter().map(|t| t.partition).collect();
                }
                Ok(())
            })();
            let closed = app.close();
            let result = polled.and(closed);
            *ended2.lock() = Some(format!("{result:?}"));
            result
        });
        Instance {
            name: name.to_owned(),
            stop,
            tasks,
            ended,
            handle,
        }
    }

    fn running(&self) -> bool {
        !self.handle.is_finished()
    }

    /// Fails the test, naming how the instance ended, if it did.
    fn assert_running(&self) {
        assert!(
            self.running(),
            "instance {} stopped: {}",
            self.name,
            self.ended.lock().as_deref().unwrap_or("?")
        );
    }

    fn tasks(&self) -> usize {
        self.tasks.lock().len()
    }

    /// Stops the instance and returns how its run ended.
    fn stop(self) -> store_api::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("instance thread")
    }
}

/// Topics and names of one test.
struct Setup {
    broker: String,
    proxy: FaultProxy,
    app: String,
    input: String,
    output: String,
}

impl Setup {
    fn new(test: &str) -> Option<Setup> {
        let broker = bootstrap(test)?;
        let proxy = FaultProxy::start(&broker).expect("the proxy");
        let (app, input, output) = (unique("pf"), unique("pf-in"), unique("pf-out"));
        create_topic(&broker, &input, 4);
        create_topic(&broker, &output, 4);
        create_changelog(&broker, &app, PARTITIONS);
        Some(Setup {
            broker,
            proxy,
            app,
            input,
            output,
        })
    }

    /// Instance `name`'s configuration: through the proxy, its clients named
    /// `<app>-<name>-<instance id>-<role>`.
    fn config(&self, name: &str, dir: &Path) -> TasksConfig {
        TasksConfig {
            client_id: Some(format!("{}-{name}", self.app)),
            num_standby_replicas: 1,
            request_timeout_ms: 8_000,
            ..config(self.proxy.bootstrap(), &self.app, &self.input, dir)
        }
    }

    fn start(&self, name: &str, dir: &Path) -> Instance {
        Instance::start(name, self.config(name, dir), &self.output)
    }

    /// Instance `name` under exactly-once outputs: its transactional producer (client id
    /// `...-producer-transactional`) connects through the proxy too.
    fn start_exactly_once(&self, name: &str, dir: &Path) -> Instance {
        let config = TasksConfig {
            processing_guarantee: ProcessingGuarantee::ExactlyOnceV2,
            // A transaction per commit: short intervals meet the transactional APIs often.
            commit_interval_ms: 200,
            // How long a commit waits for the transaction coordinator before it gives up:
            // short, so that errors outlasting librdkafka's retries reach the runtime soon.
            transaction_timeout_ms: 2_000,
            ..self.config(name, dir)
        };
        Instance::start(name, config, &self.output)
    }

    /// Produces batches of input from record `next` on, while waiting for `armed` to fire
    /// (the transactional APIs are met only by commits that carry records); returns where
    /// the input stopped.
    fn produce_until_fired(
        &self,
        next: u64,
        armed: &[(String, Injection)],
        instances: &[&Instance],
        expected: &mut BTreeMap<String, u64>,
    ) -> u64 {
        let spent = |(_, injection): &(String, Injection)| injection.wait(Duration::ZERO);
        let deadline = Instant::now() + FIRE_TIMEOUT;
        self.produce_while(next, instances, expected, || {
            !armed.iter().all(spent) && Instant::now() < deadline
        })
    }

    /// Produces batches of input from record `next` on while `more()` and every instance
    /// runs; returns where the input stopped.
    fn produce_while(
        &self,
        mut next: u64,
        instances: &[&Instance],
        expected: &mut BTreeMap<String, u64>,
        mut more: impl FnMut() -> bool,
    ) -> u64 {
        while more() && instances.iter().all(|i| i.running()) {
            self.produce(next..next + 200, expected);
            next += 200;
            thread::sleep(Duration::from_millis(300));
        }
        next
    }

    /// Each of the `inputs` input records has exactly one output in a `read_committed` read
    /// of the output topic.
    fn assert_committed_outputs_once(&self, inputs: u64) {
        let outputs = read_committed_values(&self.broker, &self.output);
        let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
        for output in &outputs {
            *seen.entry(output.as_str()).or_insert(0) += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
        assert!(
            twice.is_empty(),
            "committed outputs seen more than once: {twice:?}"
        );
        assert_eq!(
            seen.len() as u64,
            inputs,
            "input records with a committed output, of {inputs}"
        );
    }

    /// Produces records `range` straight to the broker and adds their counts to `expected`.
    fn produce(&self, range: std::ops::Range<u64>, expected: &mut BTreeMap<String, u64>) {
        for (word, count) in produce(&self.broker, &self.input, PARTITIONS, range) {
            *expected.entry(word).or_insert(0) += count;
        }
    }

    /// Waits until the changelogs hold `expected` while every instance runs.
    fn assert_counts(&self, expected: &BTreeMap<String, u64>, instances: &[&Instance]) {
        let exact = wait_until(Duration::from_secs(90), || {
            instances.iter().any(|i| !i.running())
                || changelog_counts(&self.broker, &self.app, PARTITIONS) == *expected
        });
        for instance in instances {
            instance.assert_running();
        }
        assert!(exact, "the counts never became exact");
    }

    /// Every input record has an output; returns how many outputs there are.
    fn assert_outputs(&self, inputs: u64) -> usize {
        let outputs: Vec<String> = read_topic(&self.broker, &self.output)
            .into_iter()
            .filter_map(|(_, value, _)| value)
            .collect();
        let distinct: BTreeSet<&String> = outputs.iter().collect();
        assert_eq!(
            distinct.len() as u64,
            inputs,
            "input records with an output, of {inputs}"
        );
        outputs.len()
    }

    /// Arms `times` answers of each error for each API, for clients whose id holds every
    /// one of `clients`.
    fn arm(
        &self,
        faults: &[(ApiKey, &[ResponseError])],
        times: u32,
        clients: &[&str],
    ) -> Vec<(String, Injection)> {
        let mut armed = Vec::new();
        for &(api, errors) in faults {
            for &error in errors {
                let mut fault = Fault::error(api, error).times(times);
                for client in clients {
                    fault = fault.client(client);
                }
                let injection = self.proxy.inject(fault).expect("a fault the proxy answers");
                armed.push((format!("{api:?} {error:?} x{times} {clients:?}"), injection));
            }
        }
        armed
    }
}

/// Waits until every injection is spent while every instance runs; fails naming an instance
/// that stopped, or the faults that never fired.
fn assert_fired(armed: &[(String, Injection)], instances: &[&Instance]) {
    let spent = |(_, injection): &(String, Injection)| injection.wait(Duration::ZERO);
    wait_until(FIRE_TIMEOUT, || {
        armed.iter().all(spent) || instances.iter().any(|i| !i.running())
    });
    for instance in instances {
        instance.assert_running();
    }
    let unfired: Vec<&str> = armed
        .iter()
        .filter(|armed| !spent(armed))
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(unfired.is_empty(), "faults that never fired: {unfired:?}");
}

use ResponseError as E;

/// The group's APIs, met at each rebalance.
const GROUP: &[(ApiKey, &[ResponseError])] = &[
    (
        ApiKey::JoinGroup,
        &[E::CoordinatorLoadInProgress, E::CoordinatorNotAvailable],
    ),
    (
        ApiKey::SyncGroup,
        &[E::CoordinatorNotAvailable, E::NotCoordinator],
    ),
    (
        ApiKey::OffsetFetch,
        &[E::CoordinatorLoadInProgress, E::NotCoordinator],
    ),
];

/// The APIs met while processing.
const PROCESSING: &[(ApiKey, &[ResponseError])] = &[
    (
        ApiKey::Produce,
        &[
            E::NotLeaderOrFollower,
            E::RequestTimedOut,
            E::NotEnoughReplicas,
        ],
    ),
    (
        ApiKey::Fetch,
        &[E::NotLeaderOrFollower, E::UnknownTopicOrPartition],
    ),
    (
        ApiKey::OffsetCommit,
        &[
            E::CoordinatorNotAvailable,
            E::NotCoordinator,
            E::CoordinatorLoadInProgress,
        ],
    ),
    (
        ApiKey::Heartbeat,
        &[E::CoordinatorNotAvailable, E::NotCoordinator],
    ),
    (ApiKey::ListOffsets, &[E::NotLeaderOrFollower]),
    (ApiKey::Metadata, &[E::LeaderNotAvailable]),
];

/// The APIs of a changelog's reader: restores and standby catch-ups.
const READER: &[(ApiKey, &[ResponseError])] = &[
    (
        ApiKey::ListOffsets,
        &[E::NotLeaderOrFollower, E::UnknownTopicOrPartition],
    ),
    (ApiKey::Fetch, &[E::NotLeaderOrFollower]),
    (ApiKey::Metadata, &[E::LeaderNotAvailable]),
];

/// The transactional producer's first requests: the transaction coordinator's address
/// (FindCoordinator with the transaction key type) and its producer id and epoch.
const TRANSACTIONS_INIT: &[(ApiKey, &[ResponseError])] = &[
    (ApiKey::FindCoordinator, &[E::CoordinatorNotAvailable]),
    (
        ApiKey::InitProducerId,
        &[
            E::CoordinatorLoadInProgress,
            E::NotCoordinator,
            E::ConcurrentTransactions,
        ],
    ),
];

/// The transactional APIs of each commit (librdkafka adds the consumed offsets with
/// AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator).
const TRANSACTIONS: &[(ApiKey, &[ResponseError])] = &[
    (
        ApiKey::AddPartitionsToTxn,
        &[
            E::ConcurrentTransactions,
            E::CoordinatorNotAvailable,
            E::NotCoordinator,
            E::CoordinatorLoadInProgress,
        ],
    ),
    (
        ApiKey::AddOffsetsToTxn,
        &[
            E::ConcurrentTransactions,
            E::CoordinatorNotAvailable,
            E::NotCoordinator,
            E::CoordinatorLoadInProgress,
        ],
    ),
    (
        ApiKey::TxnOffsetCommit,
        &[
            E::CoordinatorNotAvailable,
            E::NotCoordinator,
            E::CoordinatorLoadInProgress,
        ],
    ),
    (
        ApiKey::EndTxn,
        &[
            E::ConcurrentTransactions,
            E::CoordinatorNotAvailable,
            E::NotCoordinator,
            E::CoordinatorLoadInProgress,
        ],
    ),
];

#[test]
fn retriable_transactional_errors_never_stop_an_instance() {
    let Some(setup) = Setup::new("retriable_transactional_errors_never_stop_an_instance") else {
        return;
    };
    // Kafka's protocol marks each retriable but CONCURRENT_TRANSACTIONS, which Kafka's own
    // producer and librdkafka retry all the same on each API it is tried on here: the
    // coordinator still completes the previous transaction.
    for (api, errors) in TRANSACTIONS_INIT.iter().chain(TRANSACTIONS) {
        for error in *errors {
            assert!(
                error.is_retriable() || *error == E::ConcurrentTransactions,
                "{api:?} {error:?} is not retriable"
            );
        }
    }
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let mut expected = BTreeMap::new();
    setup.produce(0..1_000, &mut expected);

    // Each instance's transactional producer finds its coordinator and gets its producer id
    // through the errors as the instance starts.
    let mut armed = setup.arm(TRANSACTIONS_INIT, 1, &["-transactional"]);
    let a = setup.start_exactly_once("a", dir_a.path());
    let b = setup.start_exactly_once("b", dir_b.path());
    assert!(
        wait_until(FIRE_TIMEOUT, || (a.tasks() == 2 && b.tasks() == 2)
            || !a.running()
            || !b.running()),
        "A and B never took 2 tasks each"
    );

    // Then commits meet each API's errors twice while input flows: librdkafka retries them
    // within the commit.
    armed.extend(setup.arm(TRANSACTIONS, 2, &["-transactional"]));
    let next = setup.produce_until_fired(1_000, &armed, &[&a, &b], &mut expected);
    assert_fired(&armed, &[&a, &b]);
    setup.assert_counts(&expected, &[&a, &b]);

    // Then every EndTxn of A fails for longer than a commit waits: the commit gives up with
    // a retriable error, which the runtime answers by dropping the transaction (its producer
    // too, so a new one's InitProducerId aborts it) and taking every task back to its last
    // commit, A going on.
    let producers = setup.proxy.requests(ApiKey::InitProducerId);
    let a_only = format!("{}-a-", setup.app);
    let outlasting = setup
        .proxy
        .inject(
            Fault::error(ApiKey::EndTxn, E::CoordinatorLoadInProgress)
                .probability(1.0, 1)
                .client(&a_only)
                .client("-transactional"),
        )
        .expect("a fault");
    let until = Instant::now() + Duration::from_secs(5);
    let inputs = setup.produce_while(next, &[&a, &b], &mut expected, || Instant::now() < until);
    setup.proxy.clear();
    assert!(outlasting.fired() > 0, "no EndTxn of A met the errors");
    // The new producer starts with the first record after the revival, whose restore waits
    // until the brokers time the given-up transaction out (it holds the changelogs' last
    // stable offsets back).
    assert!(
        wait_until(FIRE_TIMEOUT, || setup
            .proxy
            .requests(ApiKey::InitProducerId)
            > producers
            || !a.running()),
        "no commit of A gave up: its producer was never replaced ({} EndTxn answered, {} \
         InitProducerId requests before, {} after)",
        outlasting.fired(),
        producers,
        setup.proxy.requests(ApiKey::InitProducerId)
    );
    a.assert_running();
    setup.assert_counts(&expected, &[&a, &b]);
    a.stop().expect("A ran through the errors");
    b.stop().expect("B ran through the errors");
    setup.assert_committed_outputs_once(inputs);
}

#[test]
fn a_fatal_transactional_error_reaches_the_policy_naming_its_api() {
    let Some(setup) = Setup::new("a_fatal_transactional_error_reaches_the_policy_naming_its_api")
    else {
        return;
    };
    let dir = tempdir();
    let a = setup.start_exactly_once("a", dir.path());
    assert!(wait_until(FIRE_TIMEOUT, || a.tasks() == 4 || !a.running()));
    let fatal = setup
        .proxy
        .inject(
            Fault::error(
                ApiKey::AddPartitionsToTxn,
                E::TransactionalIdAuthorizationFailed,
            )
            .client("-transactional"),
        )
        .expect("a fault");
    setup.produce(0..500, &mut BTreeMap::new());
    assert!(fatal.wait(FIRE_TIMEOUT), "the fault never fired");
    // The default policy (`shutdown_client`) stops the instance with the error.
    assert!(
        wait_until(Duration::from_secs(30), || !a.running()),
        "the instance went on after a fatal error"
    );
    let message = format!("{}", a.stop().expect_err("a fatal error"));
    assert!(
        message.contains("TransactionalIdAuthorizationFailed")
            && message.contains("AddPartitionsToTxn"),
        "{message}"
    );
}

#[test]
fn retriable_errors_of_every_api_never_stop_an_instance() {
    let Some(setup) = Setup::new("retriable_errors_of_every_api_never_stop_an_instance") else {
        return;
    };
    let (dir_a, dir_b, dir_b2) = (tempdir(), tempdir(), tempdir());
    let mut expected = BTreeMap::new();
    setup.produce(0..2_000, &mut expected);

    // A starts alone, then B joins: two rebalances, through the group's errors.
    let group = setup.arm(GROUP, 2, &[]);
    let a = setup.start("a", dir_a.path());
    assert!(
        wait_until(FIRE_TIMEOUT, || a.tasks() == 4 || !a.running()),
        "A never took its 4 tasks (running: {})",
        a.running()
    );
    let b = setup.start("b", dir_b.path());
    assert_fired(&group, &[&a, &b]);

    let processing = setup.arm(PROCESSING, 3, &[]);
    setup.produce(2_000..4_000, &mut expected);
    assert_fired(&processing, &[&a, &b]);
    setup.assert_counts(&expected, &[&a, &b]);

    // B comes back with an empty state directory: it rejoins (a rebalance through the
    // group's errors) and restores its tasks from the changelogs through its restore
    // consumer's errors, while both instances process through the processing errors.
    b.stop().expect("B ran through the errors");
    let restore_b = format!("{}-b-", setup.app);
    let mut restore = setup.arm(READER, 3, &[&restore_b, "-restore-consumer"]);
    restore.extend(setup.arm(GROUP, 1, &[]));
    restore.extend(setup.arm(PROCESSING, 2, &[]));
    let b = setup.start("b", dir_b2.path());
    setup.produce(4_000..5_000, &mut expected);
    assert_fired(&restore, &[&a, &b]);
    setup.assert_counts(&expected, &[&a, &b]);

    // A's restore consumer now only catches its standby copies up.
    let standby_a = format!("{}-a-", setup.app);
    let mut standby = setup.arm(READER, 3, &[&standby_a, "-restore-consumer"]);
    standby.extend(setup.arm(PROCESSING, 2, &[]));
    setup.produce(5_000..7_000, &mut expected);
    assert_fired(&standby, &[&a, &b]);
    setup.assert_counts(&expected, &[&a, &b]);

    a.stop().expect("A ran through the errors");
    b.stop().expect("B ran through the errors");
    setup.assert_outputs(7_000);
}

#[test]
fn a_dropped_produce_answer_counts_nothing_twice() {
    let Some(setup) = Setup::new("a_dropped_produce_answer_counts_nothing_twice") else {
        return;
    };
    let dir = tempdir();
    let mut expected = BTreeMap::new();
    let a = setup.start("a", dir.path());
    assert!(wait_until(FIRE_TIMEOUT, || a.tasks() == 4 || !a.running()));
    let dropped = setup
        .proxy
        .inject(
            Fault::drop_connection(ApiKey::Produce)
                .times(3)
                .client("-producer"),
        )
        .expect("a fault");
    setup.produce(0..3_000, &mut expected);
    assert_fired(&[("dropped Produce answers".to_owned(), dropped)], &[&a]);
    setup.assert_counts(&expected, &[&a]);
    a.stop()
        .expect("the instance ran through the dropped answers");
    let outputs = setup.assert_outputs(3_000);
    assert_eq!(outputs, 3_000, "an output was written twice");
}

/// A Produce refused for good reaches the policy naming the API and the code, whether
/// librdkafka refused the record when it was queued or in its delivery report.
#[test]
fn a_fatal_error_reaches_the_policy_with_its_cause() {
    let Some(setup) = Setup::new("a_fatal_error_reaches_the_policy_with_its_cause") else {
        return;
    };
    let dir = tempdir();
    let a = setup.start("a", dir.path());
    assert!(wait_until(FIRE_TIMEOUT, || a.tasks() == 4 || !a.running()));
    let fatal = setup
        .proxy
        .inject(Fault::error(ApiKey::Produce, E::TopicAuthorizationFailed).client("-producer"))
        .expect("a fault");
    setup.produce(0..500, &mut BTreeMap::new());
    assert!(fatal.wait(FIRE_TIMEOUT), "the fault never fired");
    // The default policy (`shutdown_client`) stops the instance with the error.
    assert!(
        wait_until(Duration::from_secs(30), || !a.running()),
        "the instance went on after a fatal error"
    );
    let err = a.stop().expect_err("a fatal error");
    // The contract, whichever path the error surfaced on (refused while queueing, or in a
    // delivery report): it reaches the policy naming the cause, the API and the output topic.
    let message = format!("{err:#}");
    for part in ["TopicAuthorizationFailed", "Produce", setup.output.as_str()] {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
}

/// A Fetch the broker refuses for good (the input topic's READ ACL missing) ends the run with
/// an error naming the API and the cause, within seconds: a poll loop that logged it as
/// transient would leave the instance running with its tasks assigned and nothing processed.
#[test]
fn a_refused_fetch_reaches_the_policy_with_its_cause() {
    let Some(setup) = Setup::new("a_refused_fetch_reaches_the_policy_with_its_cause") else {
        return;
    };
    let dir = tempdir();
    let a = setup.start("a", dir.path());
    assert!(wait_until(FIRE_TIMEOUT, || a.tasks() == 4 || !a.running()));
    let refused = setup
        .proxy
        .inject(
            Fault::error(ApiKey::Fetch, E::TopicAuthorizationFailed)
                .probability(1.0, 0)
                .client("-consumer"),
        )
        .expect("a fault");
    setup.produce(0..100, &mut BTreeMap::new());
    assert!(refused.wait(FIRE_TIMEOUT), "the fault never fired");
    let fired = std::time::Instant::now();
    assert!(
        wait_until(Duration::from_secs(30), || !a.running()),
        "the instance went on after a refused fetch"
    );
    eprintln!("stopped {:?} after the refused fetch", fired.elapsed());
    let message = format!("{}", a.stop().expect_err("a fatal error"));
    assert!(
        message.contains("TopicAuthorizationFailed") && message.contains("Fetch"),
        "{message}"
    );
}

/// An authorization failure lasts (an ACL refuses the topic), so every ListOffsets of the
/// restore consumers is refused. With a single refused answer, about 1 run in 10 on a loaded
/// machine saw every watermark query of the instance succeed all the same: the refused answer
/// never reached a caller of librdkafka's query.
#[test]
fn a_fatal_error_of_a_restore_reaches_the_policy_with_its_cause() {
    let Some(setup) = Setup::new("a_fatal_error_of_a_restore_reaches_the_policy_with_its_cause")
    else {
        return;
    };
    let fatal = setup
        .proxy
        .inject(
            Fault::error(ApiKey::ListOffsets, E::TopicAuthorizationFailed)
                .probability(1.0, 0)
                .client("-restore-consumer"),
        )
        .expect("a fault");
    let dir = tempdir();
    let a = setup.start("a", dir.path());
    assert!(fatal.wait(FIRE_TIMEOUT), "the fault never fired");
    assert!(
        wait_until(Duration::from_secs(30), || !a.running()),
        "the instance went on after a fatal error"
    );
    let message = format!("{}", a.stop().expect_err("a fatal error"));
    assert!(
        message.contains("TopicAuthorizationFailed") && message.contains("ListOffsets"),
        "{message}"
    );
}

/// librdkafka starts fetching a newly assigned partition only once the group coordinator
/// answered its committed offset, and never does when that answer is an error it does not
/// retry: the instance assigns such a task's partitions again, at the task's position. (An
/// authorisation error would end the run: it lasts, see
/// `a_refused_fetch_reaches_the_policy_with_its_cause`.)
#[test]
fn partitions_whose_committed_offset_query_failed_are_fetched_all_the_same() {
    let Some(setup) =
        Setup::new("partitions_whose_committed_offset_query_failed_are_fetched_all_the_same")
    else {
        return;
    };
    let mut expected = BTreeMap::new();
    setup.produce(0..1_000, &mut expected);
    // The instance's own query of the group's offsets at the assignment (which falls back to
    // the tasks' positions), then librdkafka's.
    let refused = setup
        .proxy
        .inject(
            Fault::error(ApiKey::OffsetFetch, E::UnknownServerError)
                .times(2)
                .client("-consumer"),
        )
        .expect("a fault");
    let dir = tempdir();
    let config = TasksConfig {
        request_timeout_ms: 3_000,
        num_standby_replicas: 0,
        ..setup.config("a", dir.path())
    };
    let a = Instance::start("a", config, &setup.output);
    assert_fired(&[("refused OffsetFetch".to_owned(), refused)], &[&a]);
    setup.assert_counts(&expected, &[&a]);
    a.stop()
        .expect("the instance ran through the refused queries");
    setup.assert_outputs(1_000);
}

#[test]
fn a_blackholed_instance_loses_its_tasks_and_rejoins() {
    let Some(setup) = Setup::new("a_blackholed_instance_loses_its_tasks_and_rejoins") else {
        return;
    };
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let mut expected = BTreeMap::new();
    setup.produce(0..1_000, &mut expected);
    let a = setup.start("a", dir_a.path());
    assert!(wait_until(FIRE_TIMEOUT, || a.tasks() == 4 || !a.running()));
    let b = setup.start("b", dir_b.path());
    assert!(wait_until(FIRE_TIMEOUT, || a.tasks() == 2 && b.tasks() == 2));
    setup.assert_counts(&expected, &[&a, &b]);

    setup.proxy.blackhole(&format!("{}-b-", setup.app));
    assert!(
        wait_until(FIRE_TIMEOUT, || a.tasks() == 4 || !a.running()),
        "A never took B's tasks over"
    );
    setup.produce(1_000..2_000, &mut expected);
    setup.assert_counts(&expected, &[&a, &b]);

    setup.proxy.lift();
    assert!(
        wait_until(Duration::from_secs(90), || b.tasks() > 0 || !b.running()),
        "B never rejoined"
    );
    setup.produce(2_000..3_000, &mut expected);
    setup.assert_counts(&expected, &[&a, &b]);
    a.stop().expect("A ran through B's blackhole");
    b.stop().expect("B ran through its blackhole");
    setup.assert_outputs(3_000);
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a state directory")
}
