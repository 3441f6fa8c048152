//! sled through the `sled` crate.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use statestore::sled::Config;
use store_api::{Error, Result};

use super::DiskTarget;
use crate::data::Key;
use crate::target::Target;

/// How long [`DiskTarget::close`] waits for sled's threads to release the directory.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// A sled database opened with the settings of `statestore_sled::Config::default()` (read from
/// it, not copied; as of this writing a 1 GiB cache, buffers written every 500 ms, low-space
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
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(config.cache_capacity_bytes)
            .flush_every_ms(config.flush_every_ms)
            .mode(config.mode.to_sled())
            .open()
            .map_err(native)?;
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
    /// open before they do fails. The backend's `close` waits the same way.
    fn close(self) -> Result<()> {
        self.flush()?;
        let SledTarget { db, dir } = self;
        drop(db);
        wait_released(&dir.join("db"))
    }
}

/// Waits, up to [`RELEASE_TIMEOUT`], until nobody holds the `flock` on `path`.
fn wait_released(path: &Path) -> Result<()> {
    let deadline = Instant::now() + RELEASE_TIMEOUT;
    loop {
        let file = File::open(path).map_err(|err| Error::io("opening sled's db file", err))?;
        // Dropping `file` releases the lock taken here.
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(Error::locked(path, "sled did not release its lock in time"));
            }
            Err(TryLockError::Error(err)) => return Err(Error::io("locking sled's db file", err)),
        }
    }
}

impl Target for SledTarget {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get(key).map_err(native)?.map(|value| value.len()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.insert(key, value).map(drop).map_err(native)
    }

    fn write_batch(&self, entries: &[(Key, &[u8])]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for (key, value) in entries {
            batch.insert(key.as_slice(), *value);
        }
        self.db.apply_batch(batch).map_err(native)
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        let mut read = 0;
        for item in self.db.range(from..).take(limit) {
            item.map_err(native)?;
            read += 1;
        }
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map(drop).map_err(native)
    }
}
