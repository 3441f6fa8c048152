//! Options of the redb backend.

use serde::{Deserialize, Serialize};

/// When a committed write reaches the disk.
///
/// Whatever the choice, a crash never exposes part of a write or of a batch: redb recovers to
/// the last commit that was made durable, and every commit is all-or-nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Every write transaction (each `put`, `delete`, `put_if_absent` and `write`) is fsynced
    /// before it returns. A crash of the process or the machine loses nothing that returned.
    /// The cost is one fsync per operation. Maps to `redb::Durability::Immediate`.
    Immediate,
    /// Writes are committed in memory and reach the disk at the next
    /// [`flush`](store_api::KeyValueStore::flush) or `close` (or the next `Immediate` commit).
    /// A crash loses every write since the last flush, as whole transactions, and keeps
    /// everything before it. The default, because the changelog is what makes a state store
    /// durable and `LoggedStore` flushes on every commit. Maps to `redb::Durability::None`.
    ///
    /// redb can reuse pages that the last durable commit still references only after the next
    /// durable commit, so a store written for a long time without a flush grows its file.
    #[default]
    OnFlush,
}

impl Durability {
    /// The redb durability level this maps to.
    pub fn to_redb(self) -> redb::Durability {
        match self {
            Durability::Immediate => redb::Durability::Immediate,
            Durability::OnFlush => redb::Durability::None,
        }
    }
}

/// Options of a redb store, deserialized from the backend's options table. Every field is
/// optional; unknown fields are an error.
///
/// ```
/// let config: statestore_redb::Config =
///     serde_json::from_value(serde_json::json!({ "durability": "immediate" })).unwrap();
/// assert_eq!(config.durability, statestore_redb::Durability::Immediate);
/// assert_eq!(config.cache_size_bytes, 1 << 30);
/// ```
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The most memory redb's page cache may use, in bytes. It is allocated as pages are read,
    /// not up front. Default: 1 GiB (redb's own default).
    pub cache_size_bytes: usize,
    /// When committed writes reach the disk. Default: [`Durability::OnFlush`].
    pub durability: Durability,
    /// Save the allocator state with every durable commit (and commit in two phases), so
    /// reopening after a crash needs no repair walk over the whole file. Durable commits get
    /// slower; recovery becomes almost instant. Default: `false` (after a crash redb repairs
    /// the file on open, which reads all of it).
    pub quick_repair: bool,
    /// Verify the checksum of every page on every open, not only after a crash. A file damaged
    /// outside redb then fails to open with `Corruption` instead of being trusted. The open
    /// reads the whole file. Default: `false`.
    pub verify_on_open: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_size_bytes: 1 << 30,
            durability: Durability::default(),
            quick_repair: false,
            verify_on_open: false,
        }
    }
}

impl Config {
    /// The database builder the store opens redb with, for opening the same file through the
    /// `redb` crate (tools, benchmarks against the native API).
    pub fn builder(&self) -> redb::Builder {
        let mut builder = redb::Database::builder();
        builder
            .set_cache_size(self.cache_size_bytes)
            .set_check_integrity_on_open(self.verify_on_open);
        builder
    }
}
