//! partitioned-wordcount: a word count sharded over the partitions of a Kafka topic, run as
//! several instances of one consumer group. Kill any instance with `kill -9` at any moment: the
//! survivors take its tasks over, restore them from the changelog topics, and the final counts
//! equal those of one uninterrupted instance.
//!
//! ```text
//! partitioned-wordcount produce --bootstrap 127.0.0.1:19092 --topic words --lines 100000
//! partitioned-wordcount run --bootstrap 127.0.0.1:19092 --topic words --state-dir /tmp/pw1 &
//! partitioned-wordcount run --bootstrap 127.0.0.1:19092 --topic words --state-dir /tmp/pw2 &
//! partitioned-wordcount counts --bootstrap 127.0.0.1:19092     # from the changelog topics
//! partitioned-wordcount expected --lines 100000                # what they must equal
//! ```
//!
//! `produce --unkeyed-lines` writes each line as one record with no key, and `run --rekey`
//! counts them as a topology that splits the lines and re-keys the words through a
//! repartition topic (see the `rekey` module).
//!
//! With `run --serve 127.0.0.1:8081`, an instance answers `GET /count/<word>` for any word,
//! forwarding to the instance that owns it (see the `serve` module). Words are partitioned
//! with Kafka's default, murmur2, by the producer (`produce --partitioner`) and by the
//! queries (`run --key-partitioner`): the two must agree.

mod client;
mod local;
mod rekey;
mod serve;
mod text;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use statestore_changelog::{
    Changelog, CheckpointPolicy, CommitReader, EPOCH_KEY, KafkaConfig, KafkaLog, SnapshotConfig,
    TaskId,
};
use statestore_tasks::{
    Application, AssignmentStrategy, KeyPartitioner, POSITION_KEY, ProcessingGuarantee,
    ProcessorContext, ProcessorPool, StoreHandle, StoreSpec, TaskEventKind, TaskKv, TaskStore,
    TasksConfig, parse_property,
};
use store_api::{BatchOp, Error, Result};

use client::ClientArgs;

/// The stores: word counts, and counts per first letter (a second store, so a crash between
/// the commits of one task's two stores is part of what the example survives).
const STORES: [&str; 2] = ["counts", "letters"];

#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once at start; boxing `run`'s options buys nothing"
)]
enum Command {
    /// Writes generated lines to the input topic, one record per word, keyed by the word.
    Produce {
        #[arg(long, default_value = "127.0.0.1:19092")]
        bootstrap: String,
        #[arg(long, default_value = "words")]
        topic: String,
        /// Partitions of the input topic when this creates it.
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        /// Lines `from..lines` are written.
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long, default_value_t = 100_000)]
        lines: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Instead of lines of words, write records `from..lines` with distinct keys `k<n>`:
        /// state of one key per record, for failover and restore measurements.
        #[arg(long)]
        distinct_keys: bool,
        /// Instead of one record per word, write each line as one record with no key (its
        /// words separated by spaces), line `n` to partition `n % partitions`: the input of
        /// `run --rekey`.
        #[arg(long, conflicts_with = "distinct_keys")]
        unkeyed_lines: bool,
        /// How keys are partitioned: murmur2 (Kafka's Java default) or crc32 (librdkafka's).
        #[arg(long, default_value = "murmur2", value_parser = parse_partitioner)]
        partitioner: KeyPartitioner,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Runs one instance: counts the words of the partitions the group assigns it.
    Run {
        #[arg(long, default_value = "127.0.0.1:19092")]
        bootstrap: String,
        #[arg(long, default_value = "words")]
        topic: String,
        #[arg(long, default_value = "partitioned-wordcount")]
        application_id: String,
        /// This instance's state directory (one per instance on one machine).
        #[arg(long)]
        state_dir: PathBuf,
        /// A built-in backend, or `fjall` (examples/byo-fjall, registered at start).
        #[arg(long, default_value = "rocksdb")]
        backend: String,
        /// The backend's options for both stores, as JSON (e.g. RocksDB's
        /// `{"memory_budget":{"total_bytes":268435456}}`).
        #[arg(long, value_parser = parse_json)]
        store_options: Option<serde_json::Value>,
        #[arg(long, default_value_t = 1_000)]
        commit_interval_ms: u64,
        #[arg(long, default_value_t = 10_000)]
        session_timeout_ms: u64,
        #[arg(long, default_value_t = 0)]
        num_standby_replicas: u32,
        /// Tasks restored at once (default: the number of CPUs).
        #[arg(long)]
        restore_parallelism: Option<usize>,
        /// Leave the group and exit cleanly when stdin reaches its end.
        #[arg(long)]
        stop_on_stdin_eof: bool,
        /// A task commits as soon as a store buffers this many bytes (default 16 MiB).
        #[arg(long)]
        commit_bytes: Option<usize>,
        /// Kill this process with SIGKILL in its Nth task commit, after the first store's
        /// commit and before the second's (crash tests).
        #[arg(long)]
        kill_between_store_commits: Option<u64>,
        /// The group consumer's max.poll.interval.ms (default Kafka's 300 s).
        #[arg(long)]
        max_poll_interval_ms: Option<u64>,
        /// Sleep this long in the processing of the Nth record, given as `N:MS` (stale-owner
        /// tests: past max.poll.interval.ms the instance loses its tasks while it sleeps).
        #[arg(long, value_parser = parse_stall)]
        stall_in_record: Option<(u64, u64)>,
        /// Answer `GET /count/<word>` over HTTP at this address (port 0: any free port).
        #[arg(long)]
        serve: Option<String>,
        /// The `host:port` other instances reach this one at (default: the address served).
        #[arg(long)]
        advertise: Option<String>,
        /// How the producer partitioned the words: murmur2 or crc32.
        #[arg(long, default_value = "murmur2", value_parser = parse_partitioner)]
        key_partitioner: KeyPartitioner,
        /// Threads that process this instance's tasks (Kafka Streams' num.stream.threads).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Busy CPU work added to each record, in microseconds: a heavier processor, for
        /// measuring how processing threads scale when processing, not the broker, limits.
        #[arg(long, default_value_t = 0)]
        work_us: u64,
        /// Replicas of the changelog topics this creates (-1: the broker's default).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        replication_factor: i32,
        /// min.insync.replicas of the changelog topics this creates (default: the broker's).
        #[arg(long)]
        min_insync_replicas: Option<u32>,
        /// Static membership: a group.instance.id unique in the group and kept across restarts
        /// of this instance, which then gets its tasks back without a rebalance.
        #[arg(long)]
        group_instance_id: Option<String>,
        /// The longest a metadata, topic or produce request waits (default 30 s).
        #[arg(long)]
        request_timeout_ms: Option<u64>,
        /// at_least_once or exactly_once_v2 (one Kafka transaction per commit).
        #[arg(long, default_value = "at_least_once", value_parser = parse_guarantee)]
        processing_guarantee: ProcessingGuarantee,
        /// range (eager: a rebalance closes and reopens every task), roundrobin, or
        /// cooperative-sticky (only the moving tasks are revoked, as in Kafka Streams).
        #[arg(long, default_value = "range", value_parser = parse_assignment)]
        assignment_strategy: AssignmentStrategy,
        /// Send one record per input record to this topic: key the word, value
        /// `<partition>:<offset>` of the input record.
        #[arg(long)]
        output_topic: Option<String>,
        /// Under exactly_once_v2, abort the transaction of the Nth commit after its records
        /// were sent, before it commits (abort tests).
        #[arg(long)]
        abort_in_commit: Option<u64>,
        /// Checkpoint every commit (default: every 64 MiB committed), so that a store opened
        /// again replays nothing its files hold.
        #[arg(long)]
        checkpoint_every_commit: bool,
        /// Under exactly_once_v2, the brokers abort a transaction left open this long.
        #[arg(long, default_value_t = 10_000)]
        transaction_timeout_ms: u64,
        /// Once this many records are processed, print the rate and the CPU per record since
        /// the first batch, then close (throughput measurements, see `throughput.sh`).
        #[arg(long)]
        stop_after_records: Option<u64>,
        /// Count unkeyed lines (`produce --unkeyed-lines`) as a topology that re-keys the
        /// words through repartition topic `words-by-word`; with `--output-topic`, each
        /// word's new count goes there (8 bytes, big-endian). `--serve` and `--work-us` are
        /// not offered in this mode.
        #[arg(long, conflicts_with_all = ["serve", "work_us"])]
        rekey: bool,
        /// With `--rekey` under at_least_once: no upstream headers on the repartition
        /// records and no dropping of those sent again (Kafka Streams' at least once across
        /// the repartition), to measure what the headers cost.
        #[arg(long, requires = "rekey")]
        no_repartition_dedup: bool,
        #[command(flatten)]
        client: ClientArgs,
        /// Snapshots of every store in an object store, `file:///absolute/dir` or
        /// `s3://bucket/prefix`: a store with an empty disk loads the newest one and replays
        /// only the changelog after it (docs/durability.md, "Snapshots").
        #[arg(long)]
        snapshot_url: Option<String>,
        /// Each store snapshots itself after every N commits that wrote (0: never by itself).
        #[arg(long, default_value_t = 0, requires = "snapshot_url")]
        snapshot_every_commits: u64,
        /// Each store snapshots itself at its first commit this many milliseconds after its
        /// last snapshot (0: never by itself).
        #[arg(long, default_value_t = 0, requires = "snapshot_url")]
        snapshot_every_ms: u64,
        /// Snapshots kept per changelog partition.
        #[arg(long, default_value_t = statestore_changelog::DEFAULT_SNAPSHOTS_KEPT,
              requires = "snapshot_url")]
        snapshot_keep: usize,
        /// An option of the object store, `KEY=VALUE` as `object_store` names it (repeatable),
        /// e.g. `aws_endpoint=http://127.0.0.1:9000`.
        #[arg(long, value_parser = parse_property, requires = "snapshot_url")]
        snapshot_option: Vec<(String, String)>,
    },
    /// Prints `word<TAB>count` for every word, summed over the changelog topics' partitions.
    Counts {
        #[arg(long, default_value = "127.0.0.1:19092")]
        bootstrap: String,
        #[arg(long, default_value = "partitioned-wordcount")]
        application_id: String,
        #[arg(long, default_value_t = 4)]
        partitions: u32,
        /// The store to print: counts or letters.
        #[arg(long, default_value = "counts")]
        store: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Restores the 4 tasks' stores from changelogs in local files instead of Kafka topics, one
    /// task after another and then `parallelism` at a time, and prints both times: what
    /// restoring in parallel gains when the log keeps up.
    LocalRestore {
        /// The changelogs and the restored stores go under it (it is emptied of them after).
        #[arg(long)]
        dir: PathBuf,
        /// Distinct keys over the 4 tasks, one changelog record each.
        #[arg(long, default_value_t = 400_000)]
        keys: u64,
        #[arg(long, default_value = "rocksdb")]
        backend: String,
        #[arg(long, default_value_t = 4)]
        parallelism: usize,
    },
    /// Prints what `counts` must print after `produce --lines <lines>`, computed without Kafka.
    Expected {
        #[arg(long, default_value_t = 100_000)]
        lines: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long, default_value = "counts")]
        store: String,
    },
}

fn main() -> ExitCode {
    client::init_logging();
    match run(Args::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Produce {
            bootstrap,
            topic,
            partitions,
            from,
            lines,
            seed,
            distinct_keys,
            unkeyed_lines,
            partitioner,
            client,
        } => {
            let shape = match (distinct_keys, unkeyed_lines) {
                (true, _) => Shape::DistinctKeys,
                (_, true) => Shape::UnkeyedLines,
                _ => Shape::Words,
            };
            produce(
                (&bootstrap, &client.properties()?),
                &topic,
                partitions,
                from..lines,
                (seed, shape),
                partitioner,
            )
        }
        Command::Run {
            bootstrap,
            topic,
            application_id,
            state_dir,
            backend,
            store_options,
            commit_interval_ms,
            session_timeout_ms,
            num_standby_replicas,
            restore_parallelism,
            stop_on_stdin_eof,
            commit_bytes,
            kill_between_store_commits,
            max_poll_interval_ms,
            stall_in_record,
            serve: serve_at,
            advertise,
            key_partitioner,
            threads,
            work_us,
            replication_factor,
            min_insync_replicas,
            group_instance_id,
            request_timeout_ms,
            processing_guarantee,
            assignment_strategy,
            output_topic,
            abort_in_commit,
            checkpoint_every_commit,
            transaction_timeout_ms,
            stop_after_records,
            rekey,
            no_repartition_dedup,
            client,
            snapshot_url,
            snapshot_every_commits,
            snapshot_every_ms,
            snapshot_keep,
            snapshot_option,
        } => {
            if let Some(nth) = abort_in_commit {
                fail::cfg(
                    "transaction-before-commit",
                    &format!("{}*off->1*return", nth - 1),
                )
                .map_err(Error::invalid)?;
            }
            if let Some((nth, ms)) = stall_in_record {
                fail::cfg("process-record", &format!("{}*off->1*sleep({ms})", nth - 1))
                    .map_err(Error::invalid)?;
            }
            if let Some(nth) = kill_between_store_commits {
                kill_in_nth_commit(nth)?;
            }
            // A backend from outside the workspace, resolved by name like the built-ins.
            byo_fjall::register().map_err(Error::from)?;
            let defaults = TasksConfig::default();
            let mut stores: Vec<StoreSpec> = STORES
                .iter()
                .map(|s| StoreSpec::new(*s, &backend))
                .collect();
            for store in &mut stores {
                if let Some(options) = &store_options {
                    store.options = options.clone();
                }
                if let Some(bytes) = commit_bytes {
                    store.logged.commit_bytes = bytes;
                }
                if checkpoint_every_commit {
                    store.logged.checkpoint_policy = CheckpointPolicy::EveryCommit;
                }
            }
            let config = TasksConfig {
                application_id,
                state_dir,
                bootstrap_servers: bootstrap,
                input_topics: vec![topic],
                stores,
                max_poll_interval_ms: max_poll_interval_ms.unwrap_or(defaults.max_poll_interval_ms),
                commit_interval_ms,
                session_timeout_ms,
                heartbeat_interval_ms: (session_timeout_ms / 4).max(1),
                num_standby_replicas,
                restore_parallelism: restore_parallelism.unwrap_or(defaults.restore_parallelism),
                key_partitioner,
                stream_threads: threads,
                replication_factor,
                min_insync_replicas,
                group_instance_id,
                request_timeout_ms: request_timeout_ms.unwrap_or(defaults.request_timeout_ms),
                processing_guarantee,
                assignment_strategy,
                transaction_timeout_ms,
                repartition_dedup: !no_repartition_dedup,
                properties: client.properties()?,
                // Checked with the rest of the configuration by `Application::new`.
                snapshots: snapshot_url.map(|url| SnapshotConfig {
                    url,
                    options: snapshot_option.into_iter().collect(),
                    keep: snapshot_keep,
                    every_commits: snapshot_every_commits,
                    every_ms: snapshot_every_ms,
                }),
                ..defaults
            };
            let server = serve_at.as_deref().map(serve::bind).transpose()?;
            let config = TasksConfig {
                application_server: advertise.or_else(|| Some(server.as_ref()?.1.clone())),
                ..config
            };
            if rekey {
                return rekeyed(
                    config,
                    (stop_on_stdin_eof, stop_after_records),
                    output_topic,
                );
            }
            let work = Duration::from_micros(work_us);
            instance(
                config,
                (stop_on_stdin_eof, stop_after_records),
                server.map(|(server, _)| server),
                (work, output_topic),
            )
        }
        Command::Counts {
            bootstrap,
            application_id,
            partitions,
            store,
            client,
        } => print(&changelog_counts(
            (&bootstrap, &client.properties()?),
            &application_id,
            &store,
            partitions,
        )?),
        Command::LocalRestore {
            dir,
            keys,
            backend,
            parallelism,
        } => local::run(&dir, keys, &backend, parallelism),
        Command::Expected { lines, seed, store } => {
            let mut counts = BTreeMap::new();
            for line in 0..lines {
                for word in text::line(seed, line) {
                    *counts.entry(key_of(&store, word).to_owned()).or_insert(0) += 1;
                }
            }
            print(&counts)
        }
    }
}

/// The librdkafka clients in this process (each runs one thread named `rdk:main`) and the
/// process's threads, from `/proc` (0 and 0 where there is none).
fn threads() -> (usize, usize) {
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    let names: Vec<String> = entries
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("comm")).ok())
        .collect();
    let clients = names
        .iter()
        .filter(|name| name.trim() == "rdk:main")
        .count();
    (clients, names.len())
}

/// Makes the `task-between-store-commits` fail point kill this process with SIGKILL the
/// `nth` time it is reached: a crash with one store of a task committed and the other not.
fn kill_in_nth_commit(nth: u64) -> Result<()> {
    let reached = std::sync::atomic::AtomicU64::new(0);
    fail::cfg_callback("task-between-store-commits", move || {
        if reached.fetch_add(1, Ordering::SeqCst) + 1 == nth {
            eprintln!("killing myself between two store commits");
            let me = rustix::process::getpid();
            let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
        }
    })
    .map_err(Error::invalid)
}

/// The key a word is counted under in `store`: the word, or its first letter.
fn key_of<'w>(store: &str, word: &'w str) -> &'w str {
    match store {
        "letters" => word
            .chars()
            .next()
            .map_or("", |first| &word[..first.len_utf8()]),
        _ => word,
    }
}

/// What `produce` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One record per word, keyed by the word.
    Words,
    /// One record per line, keyed `k<line>`.
    DistinctKeys,
    /// One record per line with no key, its words as the value.
    UnkeyedLines,
}

fn produce(
    (bootstrap, properties): (&str, &BTreeMap<String, String>),
    topic: &str,
    partitions: i32,
    lines: std::ops::Range<u64>,
    (seed, shape): (u64, Shape),
    partitioner: KeyPartitioner,
) -> Result<()> {
    statestore_tasks::create_topic_with(bootstrap, properties, topic, partitions)?;
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    let producer: BaseProducer = config
        .set("bootstrap.servers", bootstrap)
        // Named, not left to librdkafka's default: queries hash words the same way.
        .set("partitioner", partitioner.librdkafka_name())
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .map_err(|err| Error::backend("kafka", err))?;
    let mut records = 0u64;
    let spread = u64::from(partitions.max(1).unsigned_abs());
    for line in lines.clone() {
        if shape == Shape::UnkeyedLines {
            let text = text::line(seed, line).join(" ");
            let partition =
                i32::try_from(line % spread).map_err(|err| Error::invalid(err.to_string()))?;
            let record = BaseRecord::<str, str>::to(topic)
                .payload(&text)
                .partition(partition);
            send(&producer, record);
            records += 1;
            continue;
        }
        let distinct = [format!("k{line}")];
        let words: Vec<&str> = if shape == Shape::DistinctKeys {
            distinct.iter().map(String::as_str).collect()
        } else {
            text::line(seed, line)
        };
        for word in words {
            // Keyed by word, so the partitioner sends a word to one partition always, as a
            // repartition by word would.
            send(
                &producer,
                BaseRecord::<str, str>::to(topic).key(word).payload(word),
            );
            records += 1;
        }
    }
    producer
        .flush(Duration::from_secs(300))
        .map_err(|err| Error::backend("kafka", err))?;
    eprintln!(
        "produced lines {}..{} ({records} records) to {topic}",
        lines.start, lines.end
    );
    Ok(())
}

/// Queues `record`, serving delivery reports while the producer's queue is full.
fn send(producer: &BaseProducer, mut record: BaseRecord<'_, str, str>) {
    while let Err((_, back)) = producer.send(record) {
        producer.poll(Duration::from_millis(5));
        record = back;
    }
}

/// `murmur2` or `crc32`.
fn parse_partitioner(text: &str) -> std::result::Result<KeyPartitioner, String> {
    match text {
        "murmur2" => Ok(KeyPartitioner::Murmur2),
        "crc32" => Ok(KeyPartitioner::Crc32),
        _ => Err("expected murmur2 or crc32".into()),
    }
}

/// `at_least_once` or `exactly_once_v2`, as in a configuration file.
fn parse_guarantee(text: &str) -> std::result::Result<ProcessingGuarantee, String> {
    match text {
        "at_least_once" => Ok(ProcessingGuarantee::AtLeastOnce),
        "exactly_once_v2" => Ok(ProcessingGuarantee::ExactlyOnceV2),
        _ => Err("expected at_least_once or exactly_once_v2".into()),
    }
}

fn parse_assignment(text: &str) -> std::result::Result<AssignmentStrategy, String> {
    match text {
        "range" => Ok(AssignmentStrategy::Range),
        "roundrobin" => Ok(AssignmentStrategy::Roundrobin),
        "cooperative-sticky" => Ok(AssignmentStrategy::CooperativeSticky),
        _ => Err("expected range, roundrobin or cooperative-sticky".into()),
    }
}

/// The JSON of `--store-options`.
fn parse_json(text: &str) -> std::result::Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|err| err.to_string())
}

/// `N:MS` of `--stall-in-record`.
fn parse_stall(text: &str) -> std::result::Result<(u64, u64), String> {
    let (nth, ms) = text.split_once(':').ok_or("expected N:MS")?;
    let nth: u64 = nth.parse().map_err(|err| format!("N: {err}"))?;
    let ms: u64 = ms.parse().map_err(|err| format!("MS: {err}"))?;
    if nth == 0 {
        return Err("N counts from 1".into());
    }
    Ok((nth, ms))
}

/// Counts a record's word in both stores, reached through their handles (`stores`, in the
/// order of [`STORES`]).
fn count(ctx: &mut ProcessorContext<'_>, stores: &[StoreHandle<TaskKv>]) -> Result<()> {
    let word = String::from_utf8_lossy(ctx.key().unwrap_or_default());
    count_word(&word, stores.iter().map(|handle| ctx.store_of(handle)))?;
    Ok(())
}

/// Counts `word` once more in each of `stores` (those of [`STORES`], in its order) and
/// returns its new count in the first.
fn count_word<'s>(
    word: &str,
    stores: impl IntoIterator<Item = Result<TaskStore<'s>>>,
) -> Result<u64> {
    fail::fail_point!("process-record");
    let mut first = None;
    for (store, handle) in STORES.iter().zip(stores) {
        let (key, handle) = (key_of(store, word), handle?);
        let count = match handle.get(key.as_bytes())? {
            Some(bytes) => decode(&bytes)?,
            None => 0,
        } + 1;
        handle.put(key.as_bytes(), &count.to_be_bytes())?;
        first.get_or_insert(count);
    }
    Ok(first.unwrap_or(0))
}

/// A flag set when stdin reaches its end (with `on_stdin_eof`), never otherwise.
fn stop_flag(on_stdin_eof: bool) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    if on_stdin_eof {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            stop.store(true, Ordering::Relaxed);
        });
    }
    stop
}

/// `run --rekey`: the re-keyed count (see the `rekey` module), stopped as `instance` is.
fn rekeyed(
    config: TasksConfig,
    (stop_on_stdin_eof, stop_after_records): (bool, Option<u64>),
    output_topic: Option<String>,
) -> Result<()> {
    let stop = stop_flag(stop_on_stdin_eof);
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    if let Some(target) = stop_after_records {
        // The words counted stand for the records processed: the topology runs the poll
        // loop, so a thread of its own watches them.
        let (stop, counted) = (Arc::clone(&stop), Arc::clone(&counted));
        std::thread::spawn(move || {
            let mut rate = Rate::watching(target);
            while !rate.reached(counted.load(Ordering::Relaxed)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
    rekey::run(config, output_topic.as_deref(), &stop, &counted)
}

fn instance(
    config: TasksConfig,
    (stop_on_stdin_eof, stop_after_records): (bool, Option<u64>),
    server: Option<tiny_http::Server>,
    (work, output_topic): (Duration, Option<String>),
) -> Result<()> {
    let stop = stop_flag(stop_on_stdin_eof);
    let handles = STORES
        .iter()
        .map(|name| StoreHandle::new(&config, name))
        .collect::<Result<Vec<StoreHandle<TaskKv>>>>()?;
    let mut app = Application::new(config)?;
    eprintln!("started: pid {}", std::process::id());
    if let Some(server) = server {
        let queries = app.queries();
        let endpoint = queries.endpoint().ok().flatten().unwrap_or_default();
        eprintln!("serving queries at {endpoint}");
        serve::spawn(server, queries, Arc::clone(&stop));
    }
    let (mut processed, mut last_report) = (0u64, Instant::now());
    // One processor per task: it reports the task's first record, which is when a failover
    // or restart ends for the task.
    let mut pool = ProcessorPool::new(|task: TaskId| {
        let handles = handles.clone();
        let output_topic = output_topic.clone();
        let mut first = true;
        // The output's value, written again for each record: no allocation per record.
        let mut value = String::new();
        move |ctx: &mut ProcessorContext<'_>| {
            if std::mem::take(&mut first) {
                eprintln!("first record of {task} at {} ms", unix_ms());
            }
            if !work.is_zero() {
                let started = Instant::now();
                while started.elapsed() < work {
                    std::hint::spin_loop();
                }
            }
            if let Some(topic) = &output_topic {
                value.clear();
                let _infallible = write!(value, "{}:{}", ctx.partition(), ctx.offset());
                ctx.send(topic, ctx.key(), Some(value.as_bytes()));
            }
            count(ctx, &handles)
        }
    });
    let mut rate = stop_after_records.map(Rate::new);
    while !stop.load(Ordering::Relaxed) {
        match app.poll_tasks(Duration::from_millis(100), &mut pool) {
            Ok(records) => processed += records as u64,
            Err(err) => {
                let _ = app.close();
                return Err(err);
            }
        }
        if let Some(rate) = &mut rate
            && rate.reached(processed)
        {
            break;
        }
        for event in app.take_events() {
            report(&event);
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            let (clients, threads) = threads();
            eprintln!(
                "processed {processed} tasks {:?} standby {:?} kafka clients {clients} threads {threads}",
                app.active_tasks(),
                app.standby_tasks()
            );
            last_report = Instant::now();
        }
    }
    app.close()?;
    eprintln!("closed after processing {processed} records");
    Ok(())
}

/// The processing rate and CPU per record from the end of the first batch that processed
/// records (its records excluded) to the batch that reaches `target` records, and how the
/// polling thread spent that time.
struct Rate {
    target: u64,
    /// Whether the calling thread is the polling thread, whose scheduler times are reported.
    polling: bool,
    /// Records processed, the time, the process's CPU time and the polling thread's
    /// scheduler times at the end of the first batch.
    first: Option<(u64, Instant, Duration, [u64; 2])>,
}

impl Rate {
    fn new(target: u64) -> Rate {
        Rate {
            target,
            polling: true,
            first: None,
        }
    }

    /// A rate read on a thread that does not poll: no scheduler times.
    fn watching(target: u64) -> Rate {
        Rate {
            polling: false,
            ..Rate::new(target)
        }
    }

    /// Prints the rate and returns true once `processed` reached the target.
    fn reached(&mut self, processed: u64) -> bool {
        if processed == 0 {
            return false;
        }
        let Some((at_first, started, cpu, sched)) = self.first else {
            let sched = thread_sched();
            self.first = Some((processed, Instant::now(), local::process_cpu(), sched));
            return false;
        };
        if processed < self.target {
            return false;
        }
        let (records, elapsed) = (processed - at_first, started.elapsed());
        let cpu = local::process_cpu().saturating_sub(cpu);
        let [running, waiting] = thread_sched();
        let share = |ns: u64| ns as f64 / 1e9 / elapsed.as_secs_f64() * 100.0;
        let (running, waiting) = (share(running - sched[0]), share(waiting - sched[1]));
        let polling = if self.polling {
            format!(
                "polling thread {running:.0}% running, {waiting:.0}% waiting for a CPU, {:.0}% \
                 asleep; ",
                (100.0 - running - waiting).max(0.0)
            )
        } else {
            String::new()
        };
        eprintln!(
            "reached {processed} records: {records} in {} ms, {:.0} records/s, {:.3} us CPU per \
             record, {:.2} cores; {polling}peak RSS {:.0} MiB",
            elapsed.as_millis(),
            records as f64 / elapsed.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / records.max(1) as f64,
            cpu.as_secs_f64() / elapsed.as_secs_f64(),
            peak_rss_mib()
        );
        true
    }
}

/// The process's peak resident set size (`VmHWM`) in MiB, 0 where there is none.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        });
    kib.unwrap_or(0.0) / 1024.0
}

/// The calling thread's time on a CPU and waiting for one, in nanoseconds, from
/// `/proc/thread-self/schedstat` (zeros where there is none).
fn thread_sched() -> [u64; 2] {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut fields = text.split_whitespace().map(|f| f.parse().unwrap_or(0));
    [fields.next().unwrap_or(0), fields.next().unwrap_or(0)]
}

fn report(event: &statestore_tasks::TaskEvent) {
    match &event.kind {
        TaskEventKind::Assigned {
            restored,
            next_offset,
            restore_time,
            resumed,
            ..
        } if *resumed => eprintln!(
            "assigned {} at offset {next_offset:?} at {} ms (resumed in {} ms)",
            event.task,
            unix_ms(),
            restore_time.as_millis()
        ),
        TaskEventKind::Assigned {
            restored,
            next_offset,
            restore_time,
            ..
        } => {
            let wiped = restored.iter().any(|(_, outcome)| outcome.wiped);
            let restored: Vec<String> = restored
                .iter()
                .map(|(store, outcome)| {
                    format!("{store}: {} records from {}", outcome.records, outcome.from)
                })
                .collect();
            eprintln!(
                "assigned {} at offset {next_offset:?} at {} ms (restored {}{} in {} ms)",
                event.task,
                unix_ms(),
                restored.join(", "),
                if wiped { ", wiped" } else { "" },
                restore_time.as_millis()
            );
        }
        TaskEventKind::Revoked => eprintln!("revoked {} at {} ms", event.task, unix_ms()),
        TaskEventKind::Lost => eprintln!("lost {}", event.task),
        TaskEventKind::Fenced => eprintln!("fenced {}", event.task),
    }
}

/// The counts of `store` summed over every changelog partition.
fn changelog_counts(
    (bootstrap, properties): (&str, &BTreeMap<String, String>),
    application_id: &str,
    store: &str,
    partitions: u32,
) -> Result<BTreeMap<String, u64>> {
    let topic = format!("{application_id}-{store}-changelog");
    let mut total = BTreeMap::new();
    for partition in 0..partitions {
        let config = KafkaConfig {
            bootstrap_servers: bootstrap.to_owned(),
            properties: properties.clone(),
            ..KafkaConfig::default()
        };
        let log = KafkaLog::open_topic(config, &topic, partition)?;
        // Whole commits only, as a restore replays them: a commit torn by a crash is not state.
        let mut latest: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let end = log.end_offset()?;
        let mut reader = CommitReader::new(&log, log.start_offset()?);
        while reader.position() < end {
            let released = reader.read(1000)?;
            if released.last_read.is_none() {
                break;
            }
            for op in released.ops {
                match op {
                    BatchOp::Put { key, value } => latest.insert(key, Some(value)),
                    BatchOp::Delete { key } => latest.insert(key, None),
                };
            }
        }
        for (key, value) in latest {
            let bookkeeping = key == POSITION_KEY || key == EPOCH_KEY;
            if let (false, Some(value)) = (bookkeeping, value) {
                let word = String::from_utf8_lossy(&key).into_owned();
                *total.entry(word).or_insert(0) += decode(&value)?;
            }
        }
    }
    Ok(total)
}

fn print(counts: &BTreeMap<String, u64>) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = counts
        .iter()
        .try_for_each(|(word, count)| writeln!(out, "{word}\t{count}"))
        .and_then(|()| out.flush());
    match written {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("printing the counts", err))
        }
        _ => Ok(()),
    }
}

/// Milliseconds since the epoch, to line events up across processes.
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

fn decode(bytes: &[u8]) -> Result<u64> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| Error::Corruption(format!("a count of {} bytes", bytes.len())))?;
    Ok(u64::from_be_bytes(array))
}
