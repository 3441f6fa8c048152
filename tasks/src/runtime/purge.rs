//! Purging repartition topics, as Kafka Streams does: after a commit, at most every
//! [`repartition_purge_interval_ms`](crate::TasksConfig::repartition_purge_interval_ms), the
//! records of each repartition partition below what its task committed are deleted
//! (DeleteRecords), on a thread of its own so that no poll waits for the brokers. A failed
//! purge is logged and done at the next one, which covers the same records; it is never
//! fatal.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};
use statestore_changelog::kafka_util::{block_on, convert};
use store_api::{Error, Result};

use crate::config::TasksConfig;
use crate::group::client_config::base_config;

/// The offsets to delete below: (topic, partition) -> the first offset kept.
pub(crate) type Below = BTreeMap<(String, u32), u64>;

/// The purging thread of an application with repartition topics.
pub(crate) struct Purger {
    requests: Option<mpsc::Sender<Below>>,
    thread: Option<JoinHandle<()>>,
    interval: Duration,
    last: Option<Instant>,
}

impl Purger {
    /// A purger for `config`'s repartition topics; `None` when it has none.
    ///
    /// # Errors
    /// `InvalidArgument` for a client property librdkafka refuses.
    pub(crate) fn start(config: &TasksConfig) -> Result<Option<Purger>> {
        if config.repartition_topics.is_empty() {
            return Ok(None);
        }
        let admin: AdminClient<DefaultClientContext> = base_config(config)
            .create()
            .map_err(|err| convert("creating the repartition purger's admin client", err))?;
        let timeout = config.request_timeout();
        let (requests, received) = mpsc::channel::<Below>();
        let thread = std::thread::Builder::new()
            .name("repartition-purge".into())
            .spawn(move || {
                while let Ok(mut below) = received.recv() {
                    // Only the newest request matters: it covers the ones before it.
                    while let Ok(newer) = received.try_recv() {
                        below.extend(newer);
                    }
                    if let Err(err) = purge(&admin, &below, timeout) {
                        tracing::warn!(%err, "purging the repartition topics failed; retried at the next purge");
                    }
                }
            })
            .map_err(|err| Error::io("starting the repartition purger", err))?;
        Ok(Some(Purger {
            requests: Some(requests),
            thread: Some(thread),
            interval: config.repartition_purge_interval(),
            last: None,
        }))
    }

    /// Asks for the records below `below` to be deleted, unless the last request was less
    /// than the purge interval ago.
    pub(crate) fn maybe_purge(&mut self, below: impl FnOnce() -> Below) {
        if self.last.is_some_and(|last| last.elapsed() < self.interval) {
            return;
        }
        self.last = Some(Instant::now());
        let below = below();
        if let (false, Some(requests)) = (below.is_empty(), &self.requests) {
            let _ = requests.send(below);
        }
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        // The thread ends with the channel, after the purge under way.
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn purge(
    admin: &AdminClient<DefaultClientContext>,
    below: &Below,
    timeout: Duration,
) -> Result<()> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), &offset) in below {
        let partition = i32::try_from(*partition).unwrap_or(i32::MAX);
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .map_err(|err| convert("purging the repartition topics", err))?;
    }
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let deleted = block_on(admin.delete_records(&tpl, &options), timeout + timeout)
        .ok_or_else(|| Error::Timeout(format!("DeleteRecords took longer than {timeout:?}")))?
        .map_err(|err| convert("purging the repartition topics (DeleteRecords)", err))?;
    for element in deleted.elements() {
        if let Err(err) = element.error() {
            tracing::debug!(topic = element.topic(), partition = element.partition(), %err, "a repartition partition was not purged");
        }
    }
    Ok(())
}
