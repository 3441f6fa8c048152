//! One task: the stores of one input partition, their input position, commit and close.
//!
//! # Exactly-once state, store by store
//! Every store of a task holds, under the reserved key [`POSITION_KEY`], the input offset up to
//! which its content is complete (the next offset to process). The key is written in the same
//! `LoggedStore` commit as the state it vouches for, so a store's position and its data always
//! agree, whatever happens between commits.
//!
//! Each store has its own changelog, so a task with several stores commits them one after the
//! other, and a crash in between leaves them at different positions. The task then resumes at
//! the smallest position, and while it replays records below a store's own position it drops
//! that store's writes: every store applies every input record exactly once. The limit: during
//! that replay, a store that is ahead is read in its later state, so a processor that copies
//! values from one store into another can copy a value from the future; processors whose writes
//! to a store depend only on that store and the record (counts, aggregates) are exact.

use std::sync::Arc;

use statestore_changelog::{
    KafkaLog, LoggedStore, RestoreListener, RestoreOutcome, StateDirectory, TaskDirectory, TaskId,
};
use store_api::{Error, KeyValueStore, Result};

use crate::config::TasksConfig;

/// The key under which each store keeps its input position (8 bytes, big-endian). It sorts
/// before any key that does not start with NUL, and [`TaskStore`](crate::TaskStore) hides it.
pub const POSITION_KEY: &[u8] = b"\0statestore.task.position";

/// A store of a task, with the position its content is complete up to.
pub(crate) struct Slot {
    pub name: String,
    pub store: LoggedStore,
    /// The input offset this store's committed content is complete up to; its writes for
    /// records below it are dropped.
    pub position: u64,
    pub restored: RestoreOutcome,
}

/// The open stores of one task.
pub(crate) struct Task {
    pub id: TaskId,
    /// Declared before the directory, so the stores close before the directory is released.
    pub slots: Vec<Slot>,
    /// The next input offset to process, once known.
    pub next_offset: Option<u64>,
    /// The offset committed with the stores (and to the group) last.
    pub committed_offset: Option<u64>,
    /// A processor failed in the middle of a record: the buffered writes may hold part of it,
    /// so they are never committed.
    pub poisoned: bool,
    _dir: TaskDirectory,
}

impl Task {
    /// Opens and restores every store of task `id`, logged to partition `id.partition` of
    /// their changelog topics (which have `partitions` partitions).
    pub fn open(
        state: &StateDirectory,
        config: &TasksConfig,
        id: TaskId,
        partitions: u32,
        listener: &mut dyn RestoreListener,
    ) -> Result<Task> {
        let dir = state.task(id)?;
        let mut slots = Vec::with_capacity(config.stores.len());
        for spec in &config.stores {
            let factory = statestore::factory(&spec.backend)
                .ok_or_else(|| Error::invalid(format!("unknown backend {:?}", spec.backend)))?;
            let inner = dir.open_store(factory, &spec.name, &spec.options)?;
            let log = KafkaLog::open(config.changelog_config(spec, partitions), id.partition)?;
            let checkpoint = Arc::clone(dir.checkpoint());
            let store = LoggedStore::open_with_listener(
                inner,
                Arc::new(log),
                checkpoint,
                spec.logged.clone(),
                listener,
            )?;
            let position = read_position(&store)?.unwrap_or(0);
            let restored = store.restored();
            slots.push(Slot {
                name: spec.name.clone(),
                store,
                position,
                restored,
            });
        }
        let resume = slots.iter().map(|slot| slot.position).min().unwrap_or(0);
        Ok(Task {
            id,
            slots,
            next_offset: (resume > 0).then_some(resume),
            committed_offset: (resume > 0).then_some(resume),
            poisoned: false,
            _dir: dir,
        })
    }

    /// The outcome of each store's restore.
    pub fn restored(&self) -> Vec<(String, RestoreOutcome)> {
        self.slots
            .iter()
            .map(|slot| (slot.name.clone(), slot.restored))
            .collect()
    }

    /// Commits every store with the position `next_offset` (when it advanced), one store
    /// after the other. Returns the offset now committed in every store, if any.
    pub fn commit(&mut self) -> Result<Option<u64>> {
        if self.poisoned {
            return Err(Error::invalid(format!(
                "task {} is not committed: its processor failed in the middle of a record",
                self.id
            )));
        }
        let Some(next) = self.next_offset else {
            return Ok(None);
        };
        for slot in &mut self.slots {
            if next > slot.position {
                slot.store.put(POSITION_KEY, &next.to_be_bytes())?;
            }
            slot.store.commit()?;
            slot.position = slot.position.max(next);
        }
        self.committed_offset = Some(next);
        Ok(Some(next))
    }

    /// Commits and closes every store, keeping their files.
    pub fn close(mut self) -> Result<Option<u64>> {
        let committed = self.commit();
        if committed.is_err() {
            self.abandon();
            return committed;
        }
        for slot in &self.slots {
            slot.store.close()?;
        }
        committed
    }

    /// Closes every store without committing: its buffered writes are dropped. For a task
    /// lost to another instance, which may already be writing to the changelog.
    pub fn abandon(&self) {
        for slot in &self.slots {
            if let Err(err) = slot.store.abandon() {
                tracing::warn!(task = %self.id, store = slot.name, %err, "abandoning a store");
            }
        }
    }
}

/// The position stored in `store`, if any.
fn read_position(store: &LoggedStore) -> Result<Option<u64>> {
    let Some(bytes) = store.get(POSITION_KEY)? else {
        return Ok(None);
    };
    let array: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
        Error::Corruption(format!(
            "the task position in store {store:?} has {} bytes, not 8",
            bytes.len()
        ))
    })?;
    Ok(Some(u64::from_be_bytes(array)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use statestore::memory::{Config, MemoryStore};
    use statestore_changelog::{Changelog, Checkpoint, LoggedStore, LoggedStoreConfig, MemoryLog};
    use store_api::{ErrorKind, KeyValueStore};

    /// A lost task's buffered writes must never reach the changelog: another instance may
    /// already be writing to it.
    #[test]
    fn abandoning_a_store_drops_its_buffered_writes() {
        let dir = tempfile::tempdir().expect("dir");
        let log = MemoryLog::new("app-counts-changelog", 0);
        let checkpoint = Arc::new(Checkpoint::open(dir.path().join(".checkpoint")).expect("cp"));
        let store = LoggedStore::open(
            Arc::new(MemoryStore::new(Config::default())),
            Arc::new(log.clone()),
            checkpoint,
            LoggedStoreConfig::default(),
        )
        .expect("open");
        store.put(b"kept", b"1").expect("put");
        store.commit().expect("commit");
        store.put(b"dropped", b"2").expect("put");
        store.abandon().expect("abandon");
        assert_eq!(
            store.get(b"kept").expect_err("closed").kind(),
            ErrorKind::Closed
        );
        store.abandon().expect("abandoning twice");
        drop(store);
        let logged: Vec<Vec<u8>> = log
            .read(0, 100)
            .expect("read")
            .into_iter()
            .map(|record| record.op.key().to_vec())
            .collect();
        assert!(logged.contains(&b"kept".to_vec()), "{logged:?}");
        assert!(!logged.contains(&b"dropped".to_vec()), "{logged:?}");
    }
}
