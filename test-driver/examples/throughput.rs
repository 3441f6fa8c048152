//! Records per second through the driver: a two-processor topology (parse, then count in one
//! memory store) over one partition, records piped in lists of 10,000 (one commit each).
//! Measures the runtime's processing path (decode at the source, forwarding, the logged
//! store's buffered writes, commits to the memory changelog); not Kafka, not a backend on
//! disk.
//!
//! ```text
//! cargo run --release -p statestore-test-driver --example throughput -- 1000000
//! ```

use std::time::Instant;

use statestore_tasks::operator_stores::Utf8;
use statestore_tasks::topology::{Context, Processor, Record, TopologyBuilder};
use statestore_tasks::{MemoryRecord, StoreSpec, TasksConfig};
use statestore_test_driver::TestDriver;
use store_api::Result;

/// Forwards each record keyed by its value's first word.
struct Parse;

impl Processor for Parse {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        let word = record
            .value
            .as_deref()
            .and_then(|v| v.split(' ').next())
            .map(str::to_owned);
        ctx.forward(record.with_key(word))
    }
}

/// Counts each key in store `counts`.
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
    ) -> Result<()> {
        let key = record.key.unwrap_or_default();
        let counts = ctx.store("counts")?;
        let count = counts
            .get(key.as_bytes())?
            .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap_or_default()));
        counts.put(key.as_bytes(), &(count + 1).to_be_bytes())
    }
}

fn main() -> Result<()> {
    let records: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("in", ["in"])
        .add_processor("parse", || Parse, ["in"])
        .add_processor("count", || Count, ["parse"])
        .add_store(StoreSpec::new("counts", "memory"), ["count"]);
    let topology = builder.build()?;
    let config = topology.configure(TasksConfig {
        application_id: "throughput".to_owned(),
        ..TasksConfig::default()
    })?;
    let driver = TestDriver::new(topology, config)?;
    let input = driver.input("in");
    let started = Instant::now();
    let mut piped = 0;
    while piped < records {
        let list = (piped..records.min(piped + 10_000)).map(|i| {
            let record = MemoryRecord {
                key: Some(i.to_string().into_bytes()),
                value: Some(format!("w{} rest of the line", i % 10_000).into_bytes()),
                timestamp: Some(i64::try_from(i).unwrap_or(i64::MAX)),
                ..MemoryRecord::default()
            };
            (record, None)
        });
        input.pipe_list(list)?;
        piped = records.min(piped + 10_000);
    }
    let elapsed = started.elapsed();
    let counted: u64 = driver
        .store("counts")?
        .entries()?
        .values()
        .map(|v| u64::from_be_bytes(v.as_slice().try_into().unwrap_or_default()))
        .sum();
    assert_eq!(counted, records, "every record counted once");
    println!(
        "{records} records in {elapsed:.2?}: {:.0} records/s",
        records as f64 / elapsed.as_secs_f64()
    );
    driver.close()
}
