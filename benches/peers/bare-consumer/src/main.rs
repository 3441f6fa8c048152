//! peers-bare-consumer: the limit of any application built on a librdkafka consumer. It reads
//! every partition of a topic from the start to the end it had when it started, with
//! librdkafka's default consumer settings, and does nothing with the records.
//!
//! ```text
//! peers-bare-consumer --bootstrap 127.0.0.1:19092 --topic words [--stop-on-stdin-eof]
//!     [--set fetch.queue.backoff.ms=0 ...]
//! ```
//!
//! On stderr: `first record at <unix ms> ms` at the first record, then, at the end of the
//! topic, `done <records> records at <unix ms> ms: <records/s> records/s, <µs> µs CPU per record,
//! peak RSS <KiB> KiB` (CPU and rate from the first record to the last). With
//! `--stop-on-stdin-eof` it then waits for its standard input to end, so that a harness can
//! read its CPU and memory from `/proc` before it exits.

use std::io::Read;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:19092")]
    bootstrap: String,
    #[arg(long, default_value = "words")]
    topic: String,
    /// After the end of the topic, wait for stdin to end before exiting.
    #[arg(long)]
    stop_on_stdin_eof: bool,
    /// A librdkafka consumer property set over its default, as `NAME=VALUE` (repeatable).
    #[arg(long = "set", value_parser = parse_property)]
    properties: Vec<(String, String)>,
}

/// `NAME=VALUE` of `--set`.
fn parse_property(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').ok_or("expected NAME=VALUE")?;
    Ok((name.to_owned(), value.to_owned()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match consume(&args) {
        Ok(()) => {
            if args.stop_on_stdin_eof {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn consume(args: &Args) -> Result<(), KafkaError> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.bootstrap)
        .set("group.id", "peers-bare-consumer")
        .set("enable.auto.commit", "false");
    for (name, value) in &args.properties {
        config.set(name, value);
    }
    let consumer: BaseConsumer = config.create()?;
    let timeout = Duration::from_secs(30);
    let metadata = consumer.fetch_metadata(Some(&args.topic), timeout)?;
    let mut assignment = TopicPartitionList::new();
    // The records to read: every partition from its start to its end now.
    let mut remaining = 0i64;
    for topic in metadata.topics() {
        for partition in topic.partitions() {
            let (low, high) = consumer.fetch_watermarks(&args.topic, partition.id(), timeout)?;
            remaining += high - low;
            assignment.add_partition_offset(&args.topic, partition.id(), Offset::Beginning)?;
        }
    }
    consumer.assign(&assignment)?;
    let total = remaining;
    let mut first: Option<(Instant, f64)> = None;
    while remaining > 0 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => {
                if first.is_none() {
                    eprintln!("first record at {} ms", unix_ms());
                    first = Some((Instant::now(), cpu_seconds()));
                }
                remaining -= 1;
            }
            Some(Err(err)) => return Err(err),
            None => {}
        }
    }
    let (elapsed, cpu) = first.map_or((Duration::ZERO, 0.0), |(at, cpu)| {
        (at.elapsed(), cpu_seconds() - cpu)
    });
    let records = total as f64;
    eprintln!(
        "done {total} records at {} ms: {:.0} records/s, {:.3} µs CPU per record, peak RSS {} KiB",
        unix_ms(),
        records / elapsed.as_secs_f64().max(1e-9),
        cpu * 1e6 / records.max(1.0),
        peak_rss_kib()
    );
    Ok(())
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// User plus system CPU of this process so far, from `/proc/self/stat` (0 where there is none).
fn cpu_seconds() -> f64 {
    // Linux reports these in USER_HZ, which is 100 on every architecture it runs on.
    const USER_HZ: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    ticks(11)
        .zip(ticks(12))
        .map_or(0.0, |(u, s)| (u + s) / USER_HZ)
}

/// The process's peak resident memory (`VmHWM`), 0 where `/proc` has none.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}
