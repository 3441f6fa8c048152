//! Size-based retention: compact, then delete the segments left without a record, so the
//! latest record of every key survives.

use super::format::SEGMENT_HEADER_LEN;
use super::log::{FileLog, sync_dir};

impl FileLog {
    /// Size-based retention, when a roll made it due: when the log is larger than
    /// [`FileLogConfig::retention_bytes`], compacts the closed segments and deletes those left
    /// without a record. A segment still holding the latest record of a key is never
    /// deleted, so the log stays over the limit when its live records alone pass it. Best
    /// effort: a failure is logged, and the next roll tries again.
    pub(super) fn apply_retention(&self) {
        let Some(limit) = self.config().retention_bytes else {
            return;
        };
        let due = std::mem::take(&mut self.inner.lock().retention_due);
        if !due || self.inner.lock().total_len() <= limit {
            return;
        }
        if let Err(err) = self.compact() {
            tracing::warn!(error = %err, "retention could not compact the changelog");
            return;
        }
        let empty = SEGMENT_HEADER_LEN as u64;
        let mut inner = self.inner.lock();
        let before = inner.closed.len();
        inner.closed.retain(|closed| {
            if closed.len > empty {
                return true;
            }
            let removed = std::fs::remove_file(&closed.segment.path);
            if let Err(err) = &removed {
                let path = closed.segment.path.display();
                tracing::warn!(segment = %path, error = %err, "retention could not delete");
            }
            removed.is_err()
        });
        let deleted = before - inner.closed.len();
        drop(inner);
        if deleted > 0
            && let Err(err) = sync_dir(self.dir())
        {
            tracing::warn!(error = %err, "retention could not sync the changelog directory");
        }
    }
}
