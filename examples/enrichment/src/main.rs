//! `enrichment`: a stream of orders joined against a global table of customers, the enriched
//! orders written to an output topic and kept in a store of their own. Every instance keeps
//! all the customers (a global store, restored before the first order and kept up to date
//! while it runs); the orders are partitioned among the instances.
//!
//! ```sh
//! export BROKER=127.0.0.1:19092
//! enrichment produce --bootstrap $BROKER --customers customers --orders orders --count 1000
//! enrichment run --bootstrap $BROKER --customers customers --orders orders \
//!     --output enriched --state-dir /tmp/enrichment1
//! ```
//!
//! An order is keyed by its id and names its customer (`c<n>`); a customer is keyed by its id
//! with its name as value (a null value deletes it). An enriched order is keyed by the order,
//! valued `<customer>:<name>`, `<name>` being `unknown` for a customer the table does not
//! have.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Parser, Subcommand};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use statestore_tasks::operator_stores::Utf8;
use statestore_tasks::topology::{Context, Processor, Record, TopologyBuilder};
use statestore_tasks::{Application, Result, StoreSpec, TasksConfig};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(about = "Orders enriched with their customer from a global store on Kafka")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one instance until stdin ends (with --stop-on-stdin-eof) or it is killed.
    Run {
        #[arg(long)]
        bootstrap: String,
        #[arg(long)]
        customers: String,
        #[arg(long)]
        orders: String,
        #[arg(long)]
        output: String,
        #[arg(long, default_value = "enrichment")]
        application_id: String,
        #[arg(long)]
        state_dir: PathBuf,
        #[arg(long, default_value_t = 1_000)]
        commit_interval_ms: u64,
        /// Leave the group and exit cleanly when stdin reaches its end.
        #[arg(long)]
        stop_on_stdin_eof: bool,
        /// Prints the topology as Kafka Streams describes one, and exits.
        #[arg(long)]
        describe: bool,
    },
    /// Produces customers `c0..c<count/10>` (named `name-<n>`) and orders `o0..o<count>`,
    /// order `o<i>` for customer `c<i % (count/10)>`.
    Produce {
        #[arg(long)]
        bootstrap: String,
        #[arg(long)]
        customers: String,
        #[arg(long)]
        orders: String,
        #[arg(long)]
        count: u64,
    },
}

/// Joins each order with its customer from global store `customers`, keeps the enriched
/// order in store `enriched` and forwards it.
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
    ) -> Result<()> {
        let customer = order.value.clone().unwrap_or_default();
        let name = ctx
            .global_store("customers")?
            .get(customer.as_bytes())?
            .map_or_else(
                || "unknown".to_owned(),
                |v| String::from_utf8_lossy(&v).into(),
            );
        let enriched = format!("{customer}:{name}");
        let id = order.key.clone().unwrap_or_default();
        ctx.store("enriched")?
            .put(id.as_bytes(), enriched.as_bytes())?;
        ctx.forward(order.with_value(Some(enriched)))
    }
}

fn topology(
    customers: &str,
    orders: &str,
    output: &str,
) -> Result<statestore_tasks::topology::Topology> {
    let mut builder = TopologyBuilder::new();
    builder
        .add_global_store(
            StoreSpec::new("customers", "redb"),
            "customers-source",
            customers,
            "customers-keeper",
        )
        .add_source::<String, String, Utf8, Utf8>("orders", [orders])
        .add_processor("enrich", || Enrich, ["orders"])
        .add_store(StoreSpec::new("enriched", "redb"), ["enrich"])
        .add_sink::<String, String, Utf8, Utf8>("enriched", output, ["enrich"]);
    Ok(builder.build()?)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match Cli::parse().command {
        Command::Run {
            bootstrap,
            customers,
            orders,
            output,
            application_id,
            state_dir,
            commit_interval_ms,
            stop_on_stdin_eof,
            describe,
        } => {
            let topology = topology(&customers, &orders, &output)?;
            if describe {
                print!("{}", topology.describe());
                return Ok(());
            }
            let config = topology.configure(TasksConfig {
                application_id,
                state_dir,
                bootstrap_servers: bootstrap,
                commit_interval_ms,
                ..TasksConfig::default()
            })?;
            let stop = Arc::new(AtomicBool::new(false));
            if stop_on_stdin_eof {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let _ = std::io::stdin().read_to_end(&mut Vec::new());
                    stop.store(true, Ordering::Relaxed);
                });
            }
            eprintln!("running");
            Application::new(config)?.run_topology(&stop, topology)?;
        }
        Command::Produce {
            bootstrap,
            customers,
            orders,
            count,
        } => {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("enable.idempotence", "true")
                .create()?;
            let people = (count / 10).max(1);
            for c in 0..people {
                let (key, name) = (format!("c{c}"), format!("name-{c}"));
                send(
                    &producer,
                    BaseRecord::to(&customers).key(&key).payload(&name),
                );
            }
            for i in 0..count {
                let (key, customer) = (format!("o{i}"), format!("c{}", i % people));
                send(
                    &producer,
                    BaseRecord::to(&orders).key(&key).payload(&customer),
                );
            }
            producer.flush(Duration::from_secs(30))?;
        }
    }
    Ok(())
}

/// Queues `record`, serving delivery reports while the producer's queue is full.
fn send(producer: &BaseProducer, mut record: BaseRecord<'_, String, String>) {
    while let Err((_, back)) = producer.send(record) {
        producer.poll(Duration::from_millis(10));
        record = back;
    }
}
