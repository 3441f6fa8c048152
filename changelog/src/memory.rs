//! [`MemoryLog`]: a changelog held in memory, for tests.

use std::ops::Range;
use std::sync::Arc;

use parking_lot::RwLock;
use store_api::limits::{check_key, check_value};
use store_api::{BatchOp, Result};

use crate::{Changelog, ChangelogRecord};

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
#[derive(Debug, Clone)]
pub struct MemoryLog {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    topic: String,
    partition: u32,
    records: RwLock<Vec<BatchOp>>,
}

impl MemoryLog {
    /// An empty log of `partition` of `topic`.
    pub fn new(topic: &str, partition: u32) -> Self {
        MemoryLog {
            shared: Arc::new(Shared {
                topic: topic.to_string(),
                partition,
                records: RwLock::new(Vec::new()),
            }),
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

    fn append(&self, ops: &[BatchOp]) -> Result<Range<u64>> {
        for op in ops {
            check_key(op.key())?;
            op.value().map_or(Ok(()), check_value)?;
        }
        let mut records = self.shared.records.write();
        let start = records.len() as u64;
        records.extend_from_slice(ops);
        Ok(start..records.len() as u64)
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
            .map(|(op, offset)| ChangelogRecord {
                offset,
                op: op.clone(),
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
