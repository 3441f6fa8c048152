//! Options of the embedded file log.

use serde::{Deserialize, Serialize};
use store_api::{Error, Result};

use store_api::limits::{MAX_KEY_LEN, MAX_VALUE_LEN};

use super::format::{RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};

/// The default of [`FileLogConfig::max_record_bytes`]: 16 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 << 20;

/// When appended records are forced to stable storage.
///
/// Either way a segment is fsynced once when it is closed (rolled), so only the active segment
/// can ever hold a torn tail; that is what lets recovery look at the last segment alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncPolicy {
    /// [`sync`](crate::Changelog::sync) flushes the write buffer and fsyncs the active segment
    /// (`fdatasync`). Every record appended before a `sync` that returned survives a crash of
    /// the process and of the machine.
    #[default]
    EveryCommit,
    /// `sync` flushes the write buffer to the operating system but never fsyncs; writing back is
    /// left to the OS. Records appended before a `sync` survive a crash of the process; a crash
    /// of the machine may lose any tail of the active segment (recovery then truncates it to the
    /// last whole record).
    Never,
}

/// What opening a log does when its active segment ends in a torn or corrupt record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryMode {
    /// Truncate the active segment back to the end of the last whole record before the first
    /// bad one (point-in-time recovery, the tail a crash can tear), with a `tracing` warning
    /// saying how many bytes were dropped. Records that were synced are never dropped, because
    /// a record is only bad if it was not completely written.
    #[default]
    TolerateTornTail,
    /// Refuse to open: return [`Error::Corruption`] naming the segment and position, and leave
    /// the files untouched for inspection.
    Fail,
}

/// Options of a [`FileLog`](super::FileLog), deserializable from a configuration table.
///
/// ```
/// use statestore_changelog::{FileLogConfig, SyncPolicy};
/// let config: FileLogConfig = serde_json::from_str(r#"{ "sync": "never" }"#).unwrap();
/// assert_eq!(config.sync, SyncPolicy::Never);
/// assert_eq!(config.segment_bytes, 64 << 20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileLogConfig {
    /// When appended records are fsynced. Default: [`SyncPolicy::EveryCommit`].
    pub sync: SyncPolicy,
    /// What to do with a torn or corrupt tail at open. Default:
    /// [`RecoveryMode::TolerateTornTail`].
    pub recovery: RecoveryMode,
    /// The active segment is closed and a new one started before a record would take it past
    /// this size, in bytes. A record larger than this gets a segment of its own. Default:
    /// 64 MiB.
    pub segment_bytes: u64,
    /// When set and a roll leaves the log larger than this many bytes, the closed segments are
    /// compacted and those left without a record deleted; the active segment is never
    /// deleted. This raises [`start_offset`](crate::Changelog::start_offset) but never
    /// drops the latest record of a key, so a full restore still rebuilds every key. When
    /// the latest records alone are larger than this, the log stays larger. Each roll over
    /// the limit costs a compaction: a read of the whole log. Default: `None` (keep
    /// everything).
    pub retention_bytes: Option<u64>,
    /// The largest record accepted, key and value bytes together; a larger one fails its
    /// append with `InvalidArgument`. At most the store limits (64 KiB of key plus 1 GiB of
    /// value). Default: 16 MiB, sixteen times Kafka's default message limit: a changelog
    /// record is one value of a store, and a bigger one usually belongs in a blob store.
    pub max_record_bytes: usize,
}

impl Default for FileLogConfig {
    fn default() -> Self {
        FileLogConfig {
            sync: SyncPolicy::default(),
            recovery: RecoveryMode::default(),
            segment_bytes: 64 << 20,
            retention_bytes: None,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        }
    }
}

impl FileLogConfig {
    /// Checks the options for values that cannot work.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `segment_bytes` cannot hold a segment header and one
    /// empty record, or `max_record_bytes` is over the store limits.
    pub fn validate(&self) -> Result<()> {
        let minimum = (SEGMENT_HEADER_LEN + RECORD_HEADER_LEN) as u64;
        if self.segment_bytes < minimum {
            return Err(Error::invalid(format!(
                "file log segment_bytes must be at least {minimum}, got {}",
                self.segment_bytes
            )));
        }
        if self.max_record_bytes > MAX_KEY_LEN + MAX_VALUE_LEN {
            return Err(Error::invalid(format!(
                "file log max_record_bytes must be at most {}, got {}",
                MAX_KEY_LEN + MAX_VALUE_LEN,
                self.max_record_bytes
            )));
        }
        Ok(())
    }
}
