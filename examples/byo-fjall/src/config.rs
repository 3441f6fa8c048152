//! Options of the fjall backend.

use serde::{Deserialize, Serialize};

/// Options of a fjall store, deserialized from the backend's options table. Every field is
/// optional (`None` keeps fjall's default); unknown fields are an error.
///
/// ```
/// let config: byo_fjall::Config = serde_json::from_value(serde_json::json!({
///     "cache_mb": 64,
///     "worker_threads": 2,
/// }))?;
/// assert_eq!(config.cache_mb, Some(64));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The block cache, in MiB (fjall's default: 32).
    pub cache_mb: Option<u64>,
    /// Threads for flushes and compactions (fjall's default: the cores, at most 4).
    pub worker_threads: Option<usize>,
    /// The journal's size before memtables are flushed to free it, in MiB (fjall's default:
    /// 512).
    pub max_journal_mb: Option<u64>,
}

const MIB: u64 = 1024 * 1024;

impl Config {
    /// fjall's database builder for directory `dir`, with these options.
    pub(crate) fn builder(&self, dir: &std::path::Path) -> fjall::DatabaseBuilder<fjall::Database> {
        let mut builder = fjall::Database::builder(dir);
        if let Some(cache) = self.cache_mb {
            builder = builder.cache_size(cache.saturating_mul(MIB));
        }
        if let Some(threads) = self.worker_threads {
            builder = builder.worker_threads(threads.max(1));
        }
        if let Some(journal) = self.max_journal_mb {
            builder = builder.max_journaling_size(journal.saturating_mul(MIB));
        }
        builder
    }
}
