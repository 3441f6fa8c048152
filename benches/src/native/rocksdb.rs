//! RocksDB through the `rocksdb` crate.

use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Options, ReadOptions, WriteOptions,
};
use store_api::{Error, Result};

use crate::data::Key;
use crate::target::Target;

/// A RocksDB database opened with `statestore_rocksdb::Config::default()`'s settings: 50 MiB
/// LRU block cache, LZ4, 16 MiB write buffers (3 of them), a 10-bit bloom filter, no open-file
/// limit, the write-ahead log on and unsynced.
pub struct RocksDbTarget {
    db: DB,
    write_opts: WriteOptions,
}

impl std::fmt::Debug for RocksDbTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbTarget")
            .field("path", &self.db.path())
            .finish_non_exhaustive()
    }
}

fn native(err: rocksdb::Error) -> Error {
    Error::backend("rocksdb", err)
}

impl RocksDbTarget {
    /// Opens (creating) the database in `dir`.
    ///
    /// # Errors
    /// RocksDB's open error.
    pub fn open(dir: &Path) -> Result<RocksDbTarget> {
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(50 << 20));
        table.set_bloom_filter(10.0, false);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::Lz4);
        opts.set_write_buffer_size(16 << 20);
        opts.set_max_write_buffer_number(3);
        opts.set_max_open_files(-1);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, dir).map_err(native)?;
        Ok(RocksDbTarget {
            db,
            write_opts: WriteOptions::default(),
        })
    }
}

impl Target for RocksDbTarget {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let value = self.db.get_pinned(key).map_err(native)?;
        Ok(value.map(|pinned| pinned.len()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .put_opt(key, value, &self.write_opts)
            .map_err(native)
    }

    fn write_batch(&self, entries: &[(Key, &[u8])]) -> Result<()> {
        let mut batch = rocksdb::WriteBatch::default();
        for (key, value) in entries {
            batch.put(key, value);
        }
        self.db.write_opt(batch, &self.write_opts).map_err(native)
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        let mut iter = self.db.raw_iterator_opt(ReadOptions::default());
        iter.seek(from);
        let mut read = 0;
        while read < limit && iter.item().is_some() {
            read += 1;
            iter.next();
        }
        iter.status().map_err(native)?;
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(native)
    }
}
