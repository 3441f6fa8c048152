//! The RocksDB backend's options.
//!
//! Defaults follow Kafka Streams' `RocksDBStore` where it made a choice for state stores (block
//! cache, write buffers, bloom filter, unlimited open files) and RocksDB's own defaults
//! elsewhere, except compression: LZ4 costs little CPU and roughly halves typical state.

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, WriteOptions};
use serde::{Deserialize, Serialize};
use store_api::{Error, Result};

use crate::budget::{MemoryBudget, SharedMemory};

/// Block compression of the SST files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// No compression: the least CPU, the most disk.
    None,
    /// Snappy: fast, moderate ratio.
    Snappy,
    /// LZ4 (the default): fast, a ratio close to Snappy's.
    #[default]
    Lz4,
    /// Zstandard: the best ratio, the most CPU.
    Zstd,
}

impl Compression {
    fn native(self) -> DBCompressionType {
        match self {
            Compression::None => DBCompressionType::None,
            Compression::Snappy => DBCompressionType::Snappy,
            Compression::Lz4 => DBCompressionType::Lz4,
            Compression::Zstd => DBCompressionType::Zstd,
        }
    }
}

/// Options of a RocksDB store, as read from a configuration table.
///
/// Every field is optional in the table; a missing one takes the default given below, and an
/// unknown one is an error.
///
/// ```
/// use statestore_rocksdb::{Compression, Config};
/// let config: Config = serde_json::from_value(serde_json::json!({
///     "compression": "zstd",
///     "sync_writes": true,
/// }))?;
/// assert_eq!(config.compression, Compression::Zstd);
/// assert!(config.wal);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Size of the LRU block cache for uncompressed data blocks, in bytes; `0` disables the
    /// cache. Ignored with a `memory_budget`. Default: 50 MiB, for this store alone.
    pub block_cache_size: usize,
    /// One memory budget (block cache and memtables) shared with every store of the process
    /// that names the same budget, instead of this store's own cache: see [`MemoryBudget`].
    /// Default: `null`, none.
    pub memory_budget: Option<MemoryBudget>,
    /// Compression of SST blocks. Default: `lz4`.
    pub compression: Compression,
    /// Size of one memtable, in bytes, before it is frozen and flushed. Default: 16 MiB.
    pub write_buffer_size: usize,
    /// Most memtables held in memory, the active one included (at least 1). Default: 3.
    pub max_write_buffer_number: i32,
    /// Log every write to the write-ahead log first. Without it, writes that `flush` has not
    /// pushed into SST files are lost when the process dies; the changelog then restores
    /// them. Default: `true`.
    pub wal: bool,
    /// Sync the write-ahead log on every write, so each write is durable when it returns,
    /// not only after `flush`. Much slower. Ignored when `wal` is off. Default: `false`.
    pub sync_writes: bool,
    /// Bits per key of the bloom filter that lets point lookups of missing keys skip SST
    /// files; `0` disables it. Default: `10` (about 1% false positives).
    pub bloom_filter_bits_per_key: f64,
    /// Most files RocksDB keeps open, or `-1` for no limit. Default: `-1`.
    pub max_open_files: i32,
    /// Threads for background flushes and compactions (RocksDB's `IncreaseParallelism`, at
    /// least 1). Default: `null`, RocksDB's own default of 2 background jobs.
    pub parallelism: Option<i32>,
    /// Create the directory and the database when missing; when `false`, opening a missing
    /// store fails. Default: `true`.
    pub create_if_missing: bool,
    /// Bytes of keys and values a bulk load (a restore into an empty store, see
    /// [`RocksDbStore::bulk_loader`](crate::RocksDbStore)) gathers in memory before it sorts
    /// them into one SST file and ingests it: the size of its files and the bound of its
    /// memory (it holds three chunks at most: two being written while the next fills). `0`
    /// turns bulk loading off, so restores replay batches. Default: 64 MiB.
    pub bulk_load_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            block_cache_size: 50 << 20,
            memory_budget: None,
            compression: Compression::default(),
            write_buffer_size: 16 << 20,
            max_write_buffer_number: 3,
            wal: true,
            sync_writes: false,
            bloom_filter_bits_per_key: 10.0,
            max_open_files: -1,
            parallelism: None,
            create_if_missing: true,
            bulk_load_bytes: 64 << 20,
        }
    }
}

impl Config {
    /// Checks the values that RocksDB would reject or silently misread.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first bad option.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(Error::invalid(format!("rocksdb option {message}")));
        if self.max_write_buffer_number < 1 {
            return bad(format!(
                "max_write_buffer_number must be at least 1, got {}",
                self.max_write_buffer_number
            ));
        }
        if !(self.bloom_filter_bits_per_key.is_finite() && self.bloom_filter_bits_per_key >= 0.0) {
            return bad(format!(
                "bloom_filter_bits_per_key must be a finite number >= 0, got {}",
                self.bloom_filter_bits_per_key
            ));
        }
        if self.max_open_files == 0 || self.max_open_files < -1 {
            return bad(format!(
                "max_open_files must be -1 or positive, got {}",
                self.max_open_files
            ));
        }
        if let Some(threads) = self.parallelism.filter(|threads| *threads < 1) {
            return bad(format!("parallelism must be at least 1, got {threads}"));
        }
        if self.write_buffer_size == 0 {
            return bad("write_buffer_size must be positive".to_owned());
        }
        if let Some(budget) = &self.memory_budget {
            budget.validate()?;
        }
        Ok(())
    }

    /// The database options the store opens RocksDB with, for opening the same database
    /// through the `rocksdb` crate (tools, benchmarks against the native API). Without the
    /// memory budget: with one, the block cache is this store's own.
    pub fn db_options(&self) -> Options {
        self.db_options_sharing(None)
    }

    /// The database options, with the cache and write-buffer manager of `shared` when given.
    pub(crate) fn db_options_sharing(&self, shared: Option<&SharedMemory>) -> Options {
        let mut opts = Options::default();
        opts.create_if_missing(self.create_if_missing);
        opts.set_compression_type(self.compression.native());
        opts.set_write_buffer_size(self.write_buffer_size);
        opts.set_max_write_buffer_number(self.max_write_buffer_number);
        opts.set_max_open_files(self.max_open_files);
        if let Some(threads) = self.parallelism {
            opts.increase_parallelism(threads);
        }
        let mut table = self.table_options_without_cache();
        match shared {
            Some(shared) => {
                opts.set_write_buffer_manager(&shared.write_buffers);
                table.set_block_cache(&shared.cache);
                // Index and filter blocks count against the budget too, kept ahead of data
                // blocks, and those of level 0 pinned (Kafka Streams' bounded-memory recipe).
                table.set_cache_index_and_filter_blocks(true);
                table.set_cache_index_and_filter_blocks_with_high_priority(true);
                table.set_pin_l0_filter_and_index_blocks_in_cache(true);
            }
            None if self.block_cache_size == 0 => table.disable_cache(),
            None => table.set_block_cache(&Cache::new_lru_cache(self.block_cache_size)),
        }
        opts.set_block_based_table_factory(&table);
        opts
    }

    /// The options of the SST files a bulk load writes: the database's compression and table
    /// format (bloom filter included), so an ingested file reads as a flushed one would.
    pub(crate) fn sst_options(&self) -> Options {
        let mut opts = Options::default();
        opts.set_compression_type(self.compression.native());
        let mut table = self.table_options_without_cache();
        // Writing a file reads nothing back.
        table.disable_cache();
        opts.set_block_based_table_factory(&table);
        opts
    }

    fn table_options_without_cache(&self) -> BlockBasedOptions {
        let mut table = BlockBasedOptions::default();
        if self.bloom_filter_bits_per_key > 0.0 {
            // `false`: the full-filter format; the block-based one is deprecated.
            table.set_bloom_filter(self.bloom_filter_bits_per_key, false);
        }
        table
    }

    /// The options every write of the store uses.
    pub fn write_options(&self) -> WriteOptions {
        let mut opts = WriteOptions::default();
        opts.disable_wal(!self.wal);
        opts.set_sync(self.wal && self.sync_writes);
        opts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    fn rejects_nonsense() {
        let cases = [
            Config {
                max_write_buffer_number: 0,
                ..Config::default()
            },
            Config {
                bloom_filter_bits_per_key: f64::NAN,
                ..Config::default()
            },
            Config {
                bloom_filter_bits_per_key: -1.0,
                ..Config::default()
            },
            Config {
                max_open_files: 0,
                ..Config::default()
            },
            Config {
                max_open_files: -2,
                ..Config::default()
            },
            Config {
                parallelism: Some(0),
                ..Config::default()
            },
            Config {
                write_buffer_size: 0,
                ..Config::default()
            },
            Config {
                memory_budget: Some(MemoryBudget {
                    total_bytes: 1000,
                    ..MemoryBudget::default()
                }),
                ..Config::default()
            },
            Config {
                memory_budget: Some(MemoryBudget {
                    write_buffer_ratio: 0.0,
                    ..MemoryBudget::default()
                }),
                ..Config::default()
            },
        ];
        for config in cases {
            let err = config.validate().expect_err("invalid config accepted");
            assert_eq!(
                err.kind(),
                store_api::ErrorKind::InvalidArgument,
                "{config:?}"
            );
        }
    }
}
