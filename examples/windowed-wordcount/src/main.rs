//! `windowed-wordcount`: counts words per one-minute window or per session on Kafka and emits
//! each window or session once, when it closes.
//!
//! ```sh
//! export BROKER=127.0.0.1:19092
//! windowed-wordcount produce --bootstrap $BROKER --topic words --to 20000 --close
//! windowed-wordcount run --bootstrap $BROKER --topic words --output closed --state-dir /tmp/ww1 &
//! windowed-wordcount run --bootstrap $BROKER --topic words --output closed --state-dir /tmp/ww2 &
//! ```

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Parser, Subcommand};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use statestore_tasks::{Application, TasksConfig};
use statestore_tasks::{Error, Result};
use tracing_subscriber::EnvFilter;
use windowed_wordcount::{CLOSER, Mode, WindowedCounts, default_base, stores, timestamp, word};

#[derive(Parser)]
#[command(about = "Word counts per window or session on Kafka, emitted once when they close")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The librdkafka properties of every client a command creates (security, tuning).
#[derive(Debug, Clone, Default, clap::Args)]
struct ClientArgs {
    /// A librdkafka property, `KEY=VALUE` (repeatable); it overrides the same key of
    /// `--client-config`.
    #[arg(long, value_parser = statestore_tasks::parse_property)]
    property: Vec<(String, String)>,
    /// A file of librdkafka properties in Kafka's `client.properties` form (see
    /// docs/security.md).
    #[arg(long)]
    client_config: Option<PathBuf>,
}

impl ClientArgs {
    fn properties(&self) -> Result<BTreeMap<String, String>> {
        let mut properties = match &self.client_config {
            Some(path) => statestore_tasks::read_client_properties(path)?,
            None => BTreeMap::new(),
        };
        properties.extend(self.property.iter().cloned());
        Ok(properties)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Runs one instance until stdin ends (with --stop-on-stdin-eof) or it is killed.
    Run {
        #[arg(long)]
        bootstrap: String,
        #[arg(long)]
        topic: String,
        /// Where closed windows or sessions go.
        #[arg(long)]
        output: String,
        #[arg(long, default_value = "windowed-wordcount")]
        application_id: String,
        #[arg(long)]
        state_dir: PathBuf,
        #[arg(long, value_enum, default_value = "windows")]
        mode: Mode,
        #[arg(long, default_value = "redb")]
        backend: String,
        #[arg(long, default_value_t = 1_000)]
        commit_interval_ms: u64,
        #[arg(long, default_value_t = 10_000)]
        session_timeout_ms: u64,
        #[arg(long, default_value_t = 0)]
        num_standby_replicas: u32,
        /// Leave the group and exit cleanly when stdin reaches its end.
        #[arg(long)]
        stop_on_stdin_eof: bool,
        /// Replicas of the changelog topics this creates (-1: the broker's default).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        replication_factor: i32,
        /// min.insync.replicas of the changelog topics this creates (default: the broker's).
        #[arg(long)]
        min_insync_replicas: Option<u32>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Produces records `from..to` (word, timestamp) keyed by word.
    Produce {
        #[arg(long)]
        bootstrap: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long)]
        to: u64,
        /// The first record's timestamp, in milliseconds since the epoch (default: a minute
        /// boundary two days ago).
        #[arg(long)]
        base_ms: Option<i64>,
        /// Then one record per partition a day later, which closes every window.
        #[arg(long)]
        close: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    // Logs on stderr at RUST_LOG's levels (default warn), librdkafka's reports among them.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match Cli::parse().command {
        Command::Run {
            bootstrap,
            topic,
            output,
            application_id,
            state_dir,
            mode,
            backend,
            commit_interval_ms,
            session_timeout_ms,
            num_standby_replicas,
            stop_on_stdin_eof,
            replication_factor,
            min_insync_replicas,
            client,
        } => {
            let config = TasksConfig {
                application_id,
                state_dir,
                bootstrap_servers: bootstrap,
                input_topics: vec![topic],
                stores: stores(mode, &backend),
                commit_interval_ms,
                session_timeout_ms,
                heartbeat_interval_ms: (session_timeout_ms / 4).max(100),
                num_standby_replicas,
                replication_factor,
                min_insync_replicas,
                properties: client.properties()?,
                ..TasksConfig::default()
            };
            run(config, mode, &output, stop_on_stdin_eof)?;
        }
        Command::Produce {
            bootstrap,
            topic,
            from,
            to,
            base_ms,
            close,
            client,
        } => {
            let base = base_ms.unwrap_or_else(default_base);
            let properties = client.properties()?;
            produce(&bootstrap, &properties, &topic, base, from..to, close)?;
        }
    }
    Ok(())
}

fn run(config: TasksConfig, mode: Mode, output: &str, stop_on_stdin_eof: bool) -> Result<()> {
    let processor = WindowedCounts::new(&config, mode, output)?;
    let stop = Arc::new(AtomicBool::new(false));
    if stop_on_stdin_eof {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            stop.store(true, Ordering::Relaxed);
        });
    }
    let app = Application::new(config)?;
    eprintln!("started");
    app.run_processor(&stop, processor)
}

fn produce(
    bootstrap: &str,
    properties: &BTreeMap<String, String>,
    topic: &str,
    base: i64,
    records: std::ops::Range<u64>,
    close: bool,
) -> Result<()> {
    let kafka = |err: rdkafka::error::KafkaError| Error::Backend {
        backend: "kafka",
        source: Box::new(err),
    };
    let mut client = ClientConfig::new();
    for (key, value) in properties {
        client.set(key, value);
    }
    let producer: BaseProducer = client
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .map_err(kafka)?;
    let send = |record: BaseRecord<'_, [u8], [u8]>| -> Result<()> {
        let mut record = record;
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((rdkafka::error::KafkaError::MessageProduction(_), back)) => {
                    producer.poll(Duration::from_millis(10));
                    record = back;
                }
                Err((err, _)) => return Err(kafka(err)),
            }
        }
    };
    let end = records.end;
    for i in records {
        let word = word(i);
        send(
            BaseRecord::to(topic)
                .key(word.as_bytes())
                .payload(word.as_bytes())
                .timestamp(timestamp(base, i)),
        )?;
    }
    if close {
        let partitions = producer
            .client()
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map_err(kafka)?
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len());
        let far = timestamp(base, end) + 24 * 3_600_000;
        for partition in 0..partitions {
            let partition = i32::try_from(partition).unwrap_or(i32::MAX);
            send(
                BaseRecord::to(topic)
                    .key(CLOSER)
                    .payload(CLOSER)
                    .partition(partition)
                    .timestamp(far),
            )?;
        }
    }
    producer.flush(Duration::from_secs(30)).map_err(kafka)?;
    Ok(())
}
