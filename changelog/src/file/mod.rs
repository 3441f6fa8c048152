//! The embedded changelog: segment files in a local directory, one machine. The layout, the
//! record format and recovery are documented on [`FileLog`].

mod compact;
mod config;
pub(crate) mod format;
mod log;
mod reader;
mod recovery;
mod retention;
mod segment;

pub use compact::CompactionStats;
pub use config::{DEFAULT_MAX_RECORD_BYTES, FileLogConfig, RecoveryMode, SyncPolicy};
pub use log::FileLog;
