//! Where a task's changelogs come from: Kafka's topics through the instance's clients, or
//! logs held in memory ([`MemoryChangelogs`]) for the test driver. A task opens its stores
//! through a [`ChangelogOpener`] alone, so both open the same way.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use statestore_changelog::{Changelog, KafkaClients, KafkaConfig, MemoryLog};
use store_api::Result;

/// Opens the changelog partitions of a task's stores.
pub trait ChangelogOpener {
    /// Partition `partition` of the changelog `config` describes (its topic is
    /// [`KafkaConfig::topic`]).
    ///
    /// # Errors
    /// Whatever opening the log fails with (for Kafka: creating or describing its topic).
    fn open_changelog(&self, config: KafkaConfig, partition: u32) -> Result<Arc<dyn Changelog>>;
}

impl ChangelogOpener for KafkaClients {
    fn open_changelog(&self, config: KafkaConfig, partition: u32) -> Result<Arc<dyn Changelog>> {
        Ok(Arc::new(self.open(config, partition)?))
    }
}

/// Changelogs held in memory, one [`MemoryLog`] per (topic, partition), made at their first
/// opening. Clones share the logs, so a task opened again through a clone (another test
/// driver, after a restart) restores from what the first one committed.
///
/// They also hold what a broker holds beside a task's changelogs: the group's committed
/// offset of each input partition, from which a task without a logged store resumes.
#[derive(Debug, Clone, Default)]
pub struct MemoryChangelogs {
    logs: Arc<Mutex<HashMap<(String, u32), MemoryLog>>>,
    group_offsets: Arc<Mutex<HashMap<(String, u32), u64>>>,
}

impl MemoryChangelogs {
    /// No logs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Commits `next`, the next offset to process, as the group's offset of `partition` of
    /// input topic `topic`.
    pub fn commit_offset(&self, topic: &str, partition: u32, next: u64) {
        self.group_offsets
            .lock()
            .insert((topic.to_owned(), partition), next);
    }

    /// The group's committed offset of `partition` of input topic `topic`, if any.
    pub fn committed_offset(&self, topic: &str, partition: u32) -> Option<u64> {
        self.group_offsets
            .lock()
            .get(&(topic.to_owned(), partition))
            .copied()
    }

    /// The log of `partition` of `topic`, if a task opened it.
    pub fn log(&self, topic: &str, partition: u32) -> Option<MemoryLog> {
        self.logs
            .lock()
            .get(&(topic.to_owned(), partition))
            .cloned()
    }
}

impl ChangelogOpener for MemoryChangelogs {
    fn open_changelog(&self, config: KafkaConfig, partition: u32) -> Result<Arc<dyn Changelog>> {
        let topic = config.topic();
        let mut logs = self.logs.lock();
        let log = logs
            .entry((topic.clone(), partition))
            .or_insert_with(|| MemoryLog::new(&topic, partition));
        Ok(Arc::new(log.clone()))
    }
}
