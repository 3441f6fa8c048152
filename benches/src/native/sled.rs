//! sled through the `sled` crate.

use std::path::Path;

use store_api::{Error, Result};

use crate::data::Key;
use crate::target::Target;

/// A sled database opened with `statestore_sled::Config::default()`'s settings (1 GiB cache,
/// buffers written every 500 ms, low-space mode), writing to its default tree as the backend
/// does.
#[derive(Debug)]
pub struct SledTarget {
    db: sled::Db,
}

fn native(err: sled::Error) -> Error {
    Error::backend("sled", err)
}

impl SledTarget {
    /// Opens (creating) the database in `dir`.
    ///
    /// # Errors
    /// sled's open error.
    pub fn open(dir: &Path) -> Result<SledTarget> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(1 << 30)
            .flush_every_ms(Some(500))
            .mode(sled::Mode::LowSpace)
            .open()
            .map_err(native)?;
        Ok(SledTarget { db })
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
