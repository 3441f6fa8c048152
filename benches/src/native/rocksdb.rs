//! RocksDB through the `rocksdb` crate.

use std::path::Path;

use rocksdb::{DB, ReadOptions, WaitForCompactOptions, WriteOptions};
use statestore::rocksdb::Config;
use store_api::{Error, Result};

use super::DiskTarget;
use crate::target::{Target, read_bytes};

/// A RocksDB database in the default column family, as the backend keeps it, opened with the
/// options the backend builds from `statestore_rocksdb::Config::default()` (its own
/// `db_options` and `write_options`): 50 MiB LRU block cache, LZ4, 16 MiB write buffers (3 of them), a 10-bit full bloom
/// filter, no open-file limit, RocksDB's default background jobs, the write-ahead log on and
/// unsynced, default read options (the defaults as of this writing).
pub struct RocksDbTarget {
    db: DB,
    write_opts: WriteOptions,
    /// Whether writes go to the log, which decides how a flush makes them durable.
    wal: bool,
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

impl DiskTarget for RocksDbTarget {
    const BACKEND: &'static str = "rocksdb";

    fn open(dir: &Path) -> Result<RocksDbTarget> {
        let config = Config::default();
        let db = DB::open(&config.db_options(), dir).map_err(native)?;
        Ok(RocksDbTarget {
            db,
            write_opts: config.write_options(),
            wal: config.wal,
        })
    }

    /// Flushes the memtables, compacts the whole key range into the last level and waits
    /// until no flush or compaction is running or queued.
    fn settle(&self) -> Result<()> {
        self.db.flush().map_err(native)?;
        self.db.compact_range(None::<&[u8]>, None::<&[u8]>);
        self.db
            .wait_for_compact(&WaitForCompactOptions::default())
            .map_err(native)
    }

    /// Syncs the log and drops the database, which waits for running background jobs and
    /// releases the `LOCK` file before it returns.
    fn close(self) -> Result<()> {
        self.flush()?;
        drop(self);
        Ok(())
    }
}

impl Target for RocksDbTarget {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let value = self.db.get_pinned(key).map_err(native)?;
        Ok(value.map(|pinned| {
            read_bytes(&pinned);
            pinned.len()
        }))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .put_opt(key, value, &self.write_opts)
            .map_err(native)
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
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
        while read < limit {
            let Some((key, value)) = iter.item() else {
                break;
            };
            read_bytes(key);
            read_bytes(value);
            read += 1;
            iter.next();
        }
        iter.status().map_err(native)?;
        Ok(read)
    }

    /// As the backend: sync the log, or flush the memtables when there is no log.
    fn flush(&self) -> Result<()> {
        if self.wal {
            self.db.flush_wal(true).map_err(native)
        } else {
            self.db.flush().map_err(native)
        }
    }
}
