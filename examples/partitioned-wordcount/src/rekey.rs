//! `run --rekey`: the word count over lines that have no key (`produce --unkeyed-lines`), as
//! a topology of two sub-topologies joined by a repartition topic, Kafka Streams'
//! `flatMapValues` + `groupBy` + `count`:
//!
//! ```text
//! lines --> split --> words-by-word (repartition, keyed by word) --> count [counts, letters] --> output
//! ```
//!
//! `split` forwards one record per word, keyed and valued by the word; `count` counts it in
//! both stores, as the one-processor mode does, and forwards the word's new count (8 bytes,
//! big-endian: Kafka's `LongSerde`) to the output topic when one is given.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use statestore_tasks::operator_stores::{BigEndian, Utf8};
use statestore_tasks::topology::{
    Context, Processor, Record, TopicName, Topology, TopologyBuilder,
};
use statestore_tasks::{Application, Result, StoreHandle, TaskKv, TasksConfig};

use crate::{STORES, count_word, unix_ms};

/// The repartition topic: `<application_id>-words-by-word-repartition` on the brokers.
pub const REPARTITION: &str = "words-by-word";

/// Prints `first record of <task> at <ms> ms` once per task, as the one-processor mode does
/// (what the tests and the peers benchmark wait for after a start): `split` runs in the tasks
/// `0_<p>` of the first sub-topology, `count` in the tasks `1_<p>` of the second.
struct First(bool);

impl First {
    fn report<K, V>(&mut self, ctx: &Context<'_, K, V>) {
        if std::mem::take(&mut self.0) {
            eprintln!("first record of {} at {} ms", ctx.task_id(), unix_ms());
        }
    }
}

/// Forwards one record per word of a line, keyed and valued by the word.
struct Split(First);

impl Processor for Split {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, String>,
        line: Record<String, String>,
    ) -> Result<()> {
        self.0.report(ctx);
        for word in line.value.as_deref().unwrap_or_default().split_whitespace() {
            let (key, value) = (Some(word.to_owned()), Some(word.to_owned()));
            ctx.forward(Record::new(key, value, line.timestamp))?;
        }
        Ok(())
    }
}

/// Counts each word in both stores and forwards its new count in `counts`.
struct Count {
    first: First,
    handles: Vec<StoreHandle<TaskKv>>,
    /// Words counted by this process (`--stop-after-records`).
    counted: Arc<AtomicU64>,
}

impl Processor for Count {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = u64;

    fn process(
        &mut self,
        ctx: &mut Context<'_, String, u64>,
        word: Record<String, String>,
    ) -> Result<()> {
        self.first.report(ctx);
        let text = word.key.clone().unwrap_or_default();
        let count = count_word(&text, self.handles.iter().map(|h| ctx.store_of(h)))?;
        self.counted.fetch_add(1, Ordering::Relaxed);
        ctx.forward(word.with_value(Some(count)))
    }
}

/// The re-keyed count's topology over `config.stores` (taken from it), reading `config`'s
/// one input topic and writing `output` when given.
fn topology(
    config: &mut TasksConfig,
    output: Option<&str>,
    counted: &Arc<AtomicU64>,
) -> Result<Topology> {
    let handles = STORES
        .iter()
        .map(|name| StoreHandle::new(config, name))
        .collect::<Result<Vec<StoreHandle<TaskKv>>>>()?;
    let lines = std::mem::take(&mut config.input_topics);
    let counted = Arc::clone(counted);
    let mut builder = TopologyBuilder::new();
    builder
        .add_source::<String, String, Utf8, Utf8>("lines", lines)
        .add_processor("split", || Split(First(true)), ["lines"])
        .add_sink::<String, String, Utf8, Utf8>(
            "to-words",
            TopicName::repartition(REPARTITION),
            ["split"],
        )
        .add_source::<String, String, Utf8, Utf8>("words", [TopicName::repartition(REPARTITION)])
        .add_processor(
            "count",
            move || Count {
                first: First(true),
                handles: handles.clone(),
                counted: Arc::clone(&counted),
            },
            ["words"],
        );
    for store in std::mem::take(&mut config.stores) {
        builder.add_store(store, ["count"]);
    }
    if let Some(output) = output {
        builder.add_sink::<String, u64, Utf8, BigEndian>("out", output, ["count"]);
    }
    Ok(builder.build()?)
}

/// Runs one instance of the re-keyed count until `stop` is set; `counted` counts the words
/// it counts.
///
/// # Errors
/// As [`Application::run_topology`].
pub fn run(
    mut config: TasksConfig,
    output: Option<&str>,
    stop: &AtomicBool,
    counted: &Arc<AtomicU64>,
) -> Result<()> {
    let topology = topology(&mut config, output, counted)?;
    let config = topology.configure(config)?;
    let app = Application::new(config)?;
    eprintln!("started: pid {} (re-keyed)", std::process::id());
    app.run_topology(stop, topology)?;
    eprintln!(
        "closed after counting {} words",
        counted.load(Ordering::Relaxed)
    );
    Ok(())
}
