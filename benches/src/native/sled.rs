//! sled through the `sled` crate.

use std::path::{Path, PathBuf};

use statestore::sled::Config;
use store_api::{Error, Result};

use super::DiskTarget;
use crate::target::{Target, read_bytes};

/// A sled database opened with the settings of `statestore_sled::Config::default()` (its own
/// `to_sled`; as of this writing a 1 GiB cache, buffers written every 500 ms, low-space
/// mode), writing to its default tree in the store directory as the backend does.
#[derive(Debug)]
pub struct SledTarget {
    db: sled::Db,
    dir: PathBuf,
}

fn native(err: sled::Error) -> Error {
    Error::backend("sled", err)
}

impl DiskTarget for SledTarget {
    const BACKEND: &'static str = "sled";

    fn open(dir: &Path) -> Result<SledTarget> {
        let config = Config::default();
        let db = config.to_sled(dir).open().map_err(native)?;
        Ok(SledTarget {
            db,
            dir: dir.to_path_buf(),
        })
    }

    /// sled's `flush`: nothing is left buffered for its background flusher to write.
    fn settle(&self) -> Result<()> {
        self.flush()
    }

    /// Flushes, drops the database, then waits until sled's threads have let go of the `flock`
    /// on `dir/db`: dropping a `sled::Db` does not wait for them (spacejam/sled#1234), and an
    /// open before they do fails. The backend's `close` waits the same way, with the same
    /// [`wait_released`](statestore::sled::wait_released).
    fn close(self) -> Result<()> {
        self.flush()?;
        let SledTarget { db, dir } = self;
        drop(db);
        if statestore::sled::wait_released(&dir) {
            Ok(())
        } else {
            Err(Error::locked(&dir, "sled did not release its lock in time"))
        }
    }
}

impl Target for SledTarget {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get(key).map_err(native)?.map(|value| {
            read_bytes(&value);
            value.len()
        }))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.insert(key, value).map(drop).map_err(native)
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for (key, value) in entries {
            batch.insert(*key, *value);
        }
        self.db.apply_batch(batch).map_err(native)
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        let mut read = 0;
        for item in self.db.range(from..).take(limit) {
            let (key, value) = item.map_err(native)?;
            read_bytes(&key);
            read_bytes(&value);
            read += 1;
        }
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map(drop).map_err(native)
    }
}
