//! [`MemoryLog`]: a changelog held in memory, for tests.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use store_api::{BatchOp, Result};

use crate::record::{Framing, RecordKind, check_append, marker_op};
use crate::{Changelog, ChangelogRecord};

/// The largest record a [`MemoryLog`] accepts unless told otherwise: 16 MiB of key and value,
/// the file log's default too.
pub const DEFAULT_MEMORY_MAX_RECORD_LEN: usize = 16 << 20;

/// A changelog partition kept in memory: nothing survives the process, and `sync` does
/// nothing.
///
/// The handle is cheap to clone and every clone shares the same records, so a test
/// "reopens" the log by cloning a handle it kept, and a store restored from a clone sees
/// what the original wrote. Offsets start at 0 and are never removed, so the record at
/// offset `n` is the `n`-th appended.
///
/// ```
/// use statestore_changelog::{Changelog, MemoryLog};
/// use store_api::BatchOp;
///
/// let log = MemoryLog::new("app-counts-changelog", 0);
/// let reopened = log.clone();
/// log.append(&[BatchOp::Delete { key: b"k".to_vec() }])?;
/// assert_eq!(reopened.end_offset()?, 1);
/// # Ok::<(), store_api::Error>(())
/// ```
#[derive(Debug)]
pub struct MemoryLog {
    shared: Arc<Shared>,
    /// The writer epoch this handle stamps on its appends; clones start with the same one.
    epoch: AtomicU64,
}

impl Clone for MemoryLog {
    fn clone(&self) -> Self {
        MemoryLog {
            shared: Arc::clone(&self.shared),
            epoch: AtomicU64::new(self.epoch.load(Ordering::Relaxed)),
        }
    }
}

#[derive(Debug)]
struct Shared {
    topic: String,
    partition: u32,
    max_record_len: usize,
    records: RwLock<Vec<(BatchOp, RecordKind, u64)>>,
}

impl MemoryLog {
    /// An empty log of `partition` of `topic` that accepts records of up to
    /// [`DEFAULT_MEMORY_MAX_RECORD_LEN`] bytes.
    pub fn new(topic: &str, partition: u32) -> Self {
        Self::with_max_record_len(topic, partition, DEFAULT_MEMORY_MAX_RECORD_LEN)
    }

    /// An empty log of `partition` of `topic` that accepts records of up to `max_record_len`
    /// bytes of key and value.
    pub fn with_max_record_len(topic: &str, partition: u32, max_record_len: usize) -> Self {
        MemoryLog {
            shared: Arc::new(Shared {
                topic: topic.to_string(),
                partition,
                max_record_len,
                records: RwLock::new(Vec::new()),
            }),
            epoch: AtomicU64::new(0),
        }
    }

    /// The number of records held.
    pub fn len(&self) -> usize {
        self.shared.records.read().len()
    }

    /// True when nothing was appended yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Changelog for MemoryLog {
    fn topic(&self) -> &str {
        &self.shared.topic
    }

    fn partition(&self) -> u32 {
        self.shared.partition
    }

    fn max_record_len(&self) -> usize {
        self.shared.max_record_len
    }

    fn append_framed(&self, ops: &[BatchOp], framing: Framing) -> Result<Range<u64>> {
        check_append(ops, self.shared.max_record_len)?;
        let kind = match framing {
            Framing::Unframed => RecordKind::Unframed,
            Framing::Open | Framing::Commit => RecordKind::Framed,
        };
        let epoch = self.epoch.load(Ordering::Relaxed);
        let mut records = self.shared.records.write();
        let start = records.len() as u64;
        records.extend(ops.iter().map(|op| (op.clone(), kind, epoch)));
        if framing == Framing::Commit {
            records.push((marker_op(), RecordKind::CommitMarker, epoch));
        }
        Ok(start..records.len() as u64)
    }

    fn set_writer_epoch(&self, epoch: u64) -> Result<()> {
        self.epoch.store(epoch, Ordering::Relaxed);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn read(&self, from: u64, max_records: usize) -> Result<Vec<ChangelogRecord>> {
        let records = self.shared.records.read();
        let start = usize::try_from(from).map_or(records.len(), |from| from.min(records.len()));
        let end = start.saturating_add(max_records).min(records.len());
        Ok(records[start..end]
            .iter()
            .zip(from..)
            .map(|((op, kind, epoch), offset)| ChangelogRecord {
                offset,
                op: op.clone(),
                kind: *kind,
                epoch: *epoch,
            })
            .collect())
    }

    fn start_offset(&self) -> Result<u64> {
        Ok(0)
    }

    fn end_offset(&self) -> Result<u64> {
        Ok(self.shared.records.read().len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_records_and_reads_clamp() {
        let log = MemoryLog::new("t", 3);
        let put = BatchOp::Put {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        };
        assert_eq!(
            log.clone().append(&[put.clone(), put.clone()]).unwrap(),
            0..2
        );
        assert_eq!(log.read(1, usize::MAX).unwrap().len(), 1);
        assert!(log.read(u64::MAX, 10).unwrap().is_empty());
        assert_eq!((log.len(), log.partition()), (2, 3));
    }
}
