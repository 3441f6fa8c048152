//! redb through the `redb` crate.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use statestore::redb::{Config, FILE_NAME};
use store_api::{Error, Result};

use super::DiskTarget;
use crate::target::{Target, read_bytes};

/// The backend's one table (its name is private to the backend, so it is repeated here;
/// `tests/native_layout.rs` checks that the backend reads what this adapter writes).
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("statestore");

/// A redb database in the backend's layout (`FILE_NAME` in the store directory, one table named
/// as the backend's), opened with the settings of `statestore_redb::Config::default()` (read
/// from it, not copied; as of this writing a 1 GiB cache, no integrity check on open, commits
/// not fsynced and without quick repair), with an fsynced empty commit as the flush.
#[derive(Debug)]
pub struct RedbTarget {
    db: Database,
    /// Of every write; the flush commits with `Immediate`.
    durability: Durability,
    quick_repair: bool,
}

fn native(err: impl Into<redb::Error>) -> Error {
    Error::backend("redb", err.into())
}

impl DiskTarget for RedbTarget {
    const BACKEND: &'static str = "redb";

    fn open(dir: &Path) -> Result<RedbTarget> {
        std::fs::create_dir_all(dir)
            .map_err(|err| Error::io("creating the redb directory", err))?;
        let config = Config::default();
        let db = config
            .builder()
            .create(dir.join(FILE_NAME))
            .map_err(native)?;
        let target = RedbTarget {
            db,
            durability: config.durability.to_redb(),
            quick_repair: config.quick_repair,
        };
        // As the backend does: the table exists before the first read transaction.
        target.commit(target.durability, |_| Ok(()))?;
        Ok(target)
    }

    /// The durable commit of [`Target::flush`]; redb runs no background work.
    fn settle(&self) -> Result<()> {
        self.flush()
    }

    fn close(self) -> Result<()> {
        self.flush()?;
        self.db.close().map_err(native)
    }
}

impl RedbTarget {
    fn commit(
        &self,
        durability: Durability,
        body: impl FnOnce(&mut redb::Table<'_, &[u8], &[u8]>) -> Result<(), redb::StorageError>,
    ) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(native)?;
        txn.set_durability(durability).map_err(native)?;
        txn.set_quick_repair(self.quick_repair);
        {
            let mut table = txn.open_table(TABLE).map_err(native)?;
            body(&mut table).map_err(native)?;
        }
        txn.commit().map_err(native)
    }
}

impl Target for RedbTarget {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let txn = self.db.begin_read().map_err(native)?;
        let table = txn.open_table(TABLE).map_err(native)?;
        let value = table.get(key).map_err(native)?;
        Ok(value.map(|guard| {
            read_bytes(guard.value());
            guard.value().len()
        }))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.commit(self.durability, |table| table.insert(key, value).map(drop))
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
        self.commit(self.durability, |table| {
            for (key, value) in entries {
                table.insert(*key, *value)?;
            }
            Ok(())
        })
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        let txn = self.db.begin_read().map_err(native)?;
        let table = txn.open_table(TABLE).map_err(native)?;
        let mut read = 0;
        for item in table.range(from..).map_err(native)?.take(limit) {
            let (key, value) = item.map_err(native)?;
            read_bytes(key.value());
            read_bytes(value.value());
            read += 1;
        }
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        self.commit(Durability::Immediate, |_| Ok(()))
    }
}
