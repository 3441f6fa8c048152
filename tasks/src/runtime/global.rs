//! Global stores: every instance keeps the whole of each from its topic, which is the store's
//! log (no changelog of its own, KIP-813's read-only semantics). A store is restored before
//! the tasks start, from its checkpoint under `<state_dir>/<application_id>/global/`, then
//! kept up to date by a thread of its own while the tasks run, on a consumer that is assigned
//! every partition of the topic and joins no group. A record puts its value under its key; a
//! null value deletes the key; a record without a key is skipped (Kafka Streams' global
//! tables). Its readers see the store as the thread last wrote it: a global store is not
//! synchronised with the tasks' inputs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use statestore_changelog::Checkpoint;
use statestore_changelog::kafka_util::{WatchedContext, convert, is_fatal_for_consumer};
use store_api::{Error, KeyValueStore, Result, WriteBatch};

use crate::config::TasksConfig;
use crate::group::client_config::base_config;
use crate::state::global::GlobalReads;
use crate::state::metrics::GLOBAL_RESTORED_RECORDS_TOTAL;
use crate::topology::Topology;

/// How often the updating thread syncs the stores and writes the checkpoint.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);

/// The global stores of an application, restored, and the thread that keeps them.
pub(crate) struct GlobalStores {
    reads: Arc<GlobalReads>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl GlobalStores {
    /// Opens and restores `topology`'s global stores and starts keeping them (`None`: it has
    /// none).
    ///
    /// # Errors
    /// A store that cannot be opened, a topic that cannot be read, or a restore that makes no
    /// progress for the request timeout.
    pub(crate) fn start(config: &TasksConfig, topology: &Topology) -> Result<Option<Self>> {
        if topology.global_stores().is_empty() {
            return Ok(None);
        }
        let dir = global_dir(&config.state_dir, &config.application_id);
        std::fs::create_dir_all(&dir)
            .map_err(|err| Error::io(format!("creating {}", dir.display()), err))?;
        let checkpoint = Checkpoint::open(dir.join(".checkpoint"))?;
        let mut stores = HashMap::new();
        let mut topics = HashMap::new();
        for global in topology.global_stores() {
            let spec = topology
                .global_store_specs()
                .iter()
                .find(|spec| spec.name == global.store)
                .ok_or_else(|| Error::invalid(format!("no spec for {:?}", global.store)))?;
            let store: Arc<dyn KeyValueStore> = Arc::from(statestore::open(
                &spec.backend,
                &dir.join(&spec.name),
                &spec.options,
            )?);
            topics.insert(global.topic.clone(), Arc::clone(&store));
            stores.insert(global.store.clone(), store);
        }
        let mut reader = Reader::new(config, topics, checkpoint)?;
        let started = Instant::now();
        let restored = reader.restore(config.request_timeout())?;
        metrics::counter!(GLOBAL_RESTORED_RECORDS_TOTAL, "application" => config.application_id.clone())
            .increment(restored);
        tracing::info!(
            records = restored,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "global stores restored"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(GlobalReads::new(stores));
        let thread = {
            let (stop, reads) = (Arc::clone(&stop), Arc::clone(&reads));
            std::thread::Builder::new()
                .name("global-stores".into())
                .spawn(move || reader.follow(&stop, &reads))
                .map_err(|err| Error::io("starting the global store thread", err))?
        };
        Ok(Some(GlobalStores {
            reads,
            stop,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// The stores, as their readers see them.
    pub(crate) fn reads(&self) -> Arc<GlobalReads> {
        Arc::clone(&self.reads)
    }

    /// Stops keeping the stores, their last updates synced and checkpointed.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.lock().take()
            && thread.join().is_err()
        {
            tracing::error!("the global store thread panicked");
        }
    }
}

impl Drop for GlobalStores {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The consumer of the global topics and the stores it writes.
struct Reader {
    consumer: BaseConsumer<WatchedContext>,
    /// Each topic's store.
    topics: HashMap<String, Arc<dyn KeyValueStore>>,
    checkpoint: Checkpoint,
    /// The next offset of each partition, as applied.
    next: HashMap<(String, i32), i64>,
}

impl Reader {
    fn new(
        config: &TasksConfig,
        topics: HashMap<String, Arc<dyn KeyValueStore>>,
        checkpoint: Checkpoint,
    ) -> Result<Reader> {
        // The application's group id, as every client of it, though this one joins no group
        // (librdkafka wants one before it takes an assignment): the group's ACL covers it.
        let consumer: BaseConsumer<WatchedContext> = base_config(config)
            .set("group.id", &config.application_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            .set("isolation.level", "read_committed")
            .create_with_context(WatchedContext::default())
            .map_err(|err| convert("creating the global store consumer", err))?;
        let mut assignment = TopicPartitionList::new();
        let mut next = HashMap::new();
        for topic in topics.keys() {
            let metadata = consumer
                .fetch_metadata(Some(topic), config.request_timeout())
                .map_err(|err| convert(&format!("reading the metadata of {topic:?}"), err))?;
            let partitions = metadata
                .topics()
                .first()
                .map(|t| t.partitions().len())
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    Error::invalid(format!("the global store topic {topic:?} does not exist"))
                })?;
            for partition in 0..partitions {
                let partition = i32::try_from(partition).unwrap_or(i32::MAX);
                let from = checkpoint
                    .get(topic, partition.unsigned_abs())
                    .and_then(|offset| i64::try_from(offset).ok());
                let offset = from.map_or(Offset::Beginning, Offset::Offset);
                assignment
                    .add_partition_offset(topic, partition, offset)
                    .map_err(|err| convert("assigning the global topics", err))?;
                next.insert((topic.clone(), partition), from.unwrap_or(0));
            }
        }
        consumer
            .assign(&assignment)
            .map_err(|err| convert("assigning the global topics", err))?;
        Ok(Reader {
            consumer,
            topics,
            checkpoint,
            next,
        })
    }

    /// Reads every partition up to the end it had when the restore began; returns the
    /// records applied.
    fn restore(&mut self, timeout: Duration) -> Result<u64> {
        let mut ends = HashMap::new();
        for (topic, partition) in self.next.keys() {
            let (_, high) = self
                .consumer
                .fetch_watermarks(topic, *partition, timeout)
                .map_err(|err| convert(&format!("reading the end of {topic:?}"), err))?;
            ends.insert((topic.clone(), *partition), high);
        }
        let mut restored = 0;
        let mut progress = Instant::now();
        let behind = |next: &HashMap<(String, i32), i64>, ends: &HashMap<(String, i32), i64>| {
            ends.iter()
                .any(|(at, end)| next.get(at).is_some_and(|next| next < end))
        };
        while behind(&self.next, &ends) {
            let polled = self.poll_batch()?;
            restored += polled.applied;
            if polled.applied > 0 {
                progress = Instant::now();
            }
            if let Some(end) = polled.ended {
                // A transaction's marker may sit at the end: nothing more to read there.
                ends.remove(&end);
            } else if polled.applied == 0 && progress.elapsed() > timeout {
                return Err(Error::invalid(format!(
                    "restoring the global stores made no progress for {timeout:?}"
                )));
            }
        }
        self.sync()?;
        Ok(restored)
    }

    /// Keeps the stores until `stop`; a failure is told to their readers.
    fn follow(mut self, stop: &AtomicBool, reads: &GlobalReads) {
        let mut synced = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if let Err(err) = self.poll_batch() {
                tracing::error!(%err, "the global stores are no longer kept");
                reads.fail(err.to_string());
                return;
            }
            if synced.elapsed() >= CHECKPOINT_INTERVAL {
                if let Err(err) = self.sync() {
                    tracing::warn!(%err, "checkpointing the global stores failed");
                }
                synced = Instant::now();
            }
        }
        if let Err(err) = self.sync() {
            tracing::warn!(%err, "checkpointing the global stores failed");
        }
    }

    /// Applies the records one poll returns, each topic's in one batch.
    fn poll_batch(&mut self) -> Result<Polled> {
        let mut batches: HashMap<String, WriteBatch> = HashMap::new();
        let mut applied = 0;
        let mut wait = Duration::from_millis(100);
        while applied < 10_000 {
            let message = match self.consumer.poll(wait) {
                None => break,
                Some(Ok(message)) => message,
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    self.write(batches)?;
                    let ended = self.topic_of_eof(partition).map(|topic| (topic, partition));
                    return Ok(Polled { applied, ended });
                }
                Some(Err(err)) if is_fatal_for_consumer(&err) => {
                    let why = self.consumer.context().explain(&err);
                    return Err(convert(
                        &format!(
                            "reading the global store topics{}",
                            why.map(|w| format!(" ({w})")).unwrap_or_default()
                        ),
                        err,
                    ));
                }
                Some(Err(err)) => {
                    tracing::debug!(%err, "global store consumer");
                    break;
                }
            };
            wait = Duration::ZERO;
            let topic = message.topic().to_owned();
            self.next
                .insert((topic.clone(), message.partition()), message.offset() + 1);
            let Some(key) = message.key() else { continue };
            let batch = batches.entry(topic).or_default();
            match message.payload() {
                Some(value) => batch.put(key, value),
                None => batch.delete(key),
            };
            applied += 1;
        }
        self.write(batches)?;
        Ok(Polled {
            applied,
            ended: None,
        })
    }

    fn write(&self, batches: HashMap<String, WriteBatch>) -> Result<()> {
        for (topic, batch) in batches {
            if let Some(store) = self.topics.get(&topic) {
                store.write(batch)?;
            }
        }
        Ok(())
    }

    /// The topic of an end-of-partition event, when one global topic has that partition
    /// (with several, the event does not say which: the ends of `restore` decide).
    fn topic_of_eof(&self, partition: i32) -> Option<String> {
        let mut topics = self.next.keys().filter(|(_, p)| *p == partition);
        match (topics.next(), topics.next()) {
            (Some((topic, _)), None) => Some(topic.clone()),
            _ => None,
        }
    }

    /// Syncs the stores, then checkpoints what they hold.
    fn sync(&self) -> Result<()> {
        for store in self.topics.values() {
            store.flush()?;
        }
        for ((topic, partition), next) in &self.next {
            let next = u64::try_from(*next).unwrap_or(0);
            self.checkpoint.set(topic, partition.unsigned_abs(), next)?;
        }
        Ok(())
    }
}

/// What one poll of the global consumer did.
struct Polled {
    /// The records applied.
    applied: u64,
    /// The partition whose end it reached, if it did.
    ended: Option<(String, i32)>,
}

/// The directory of `application_id`'s global stores in `state_dir`.
pub(crate) fn global_dir(state_dir: &Path, application_id: &str) -> std::path::PathBuf {
    state_dir.join(application_id).join("global")
}
