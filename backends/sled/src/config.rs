//! Options of the sled backend.

use serde::{Deserialize, Serialize};

/// sled's space/throughput trade-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Rewrite fragmented segments often to keep the files small. sled's default.
    #[default]
    LowSpace,
    /// Favour write throughput and let the files take more space.
    HighThroughput,
}

impl Mode {
    /// The sled mode this maps to.
    pub fn to_sled(self) -> sled::Mode {
        match self {
            Mode::LowSpace => sled::Mode::LowSpace,
            Mode::HighThroughput => sled::Mode::HighThroughput,
        }
    }
}

/// Options of a sled store, deserialized from the backend's options table. Every field is
/// optional; unknown fields are an error.
///
/// There is no compression option: sled compresses only with its `compression` feature, which
/// builds the native zstd library, and this backend keeps sled free of native dependencies.
///
/// ```
/// let config: statestore_sled::Config = serde_json::from_value(serde_json::json!({
///     "flush_every_ms": null,
///     "mode": "high_throughput",
/// }))
/// .unwrap();
/// assert_eq!(config.flush_every_ms, None);
/// assert_eq!(config.cache_capacity_bytes, 1 << 30);
/// ```
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The most memory sled's page cache may use, in bytes. Default: 1 GiB (sled's default).
    pub cache_capacity_bytes: u64,
    /// How often, in milliseconds, a background thread writes buffered writes to disk and
    /// fsyncs; `null` turns it off, leaving durability to
    /// [`flush`](store_api::KeyValueStore::flush). A crash loses at most this window of writes
    /// that were not flushed, as whole writes and batches. Default: 500 (sled's default).
    pub flush_every_ms: Option<u64>,
    /// Space or throughput. Default: [`Mode::LowSpace`].
    pub mode: Mode,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_capacity_bytes: 1 << 30,
            flush_every_ms: Some(500),
            mode: Mode::default(),
        }
    }
}

impl Config {
    /// The sled configuration the store opens a database kept in `dir` with, for opening the
    /// same database through the `sled` crate (tools, benchmarks against the native API).
    pub fn to_sled(&self, dir: &std::path::Path) -> sled::Config {
        sled::Config::new()
            .path(dir)
            .cache_capacity(self.cache_capacity_bytes)
            .flush_every_ms(self.flush_every_ms)
            .mode(self.mode.to_sled())
    }
}
