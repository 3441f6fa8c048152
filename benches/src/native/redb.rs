//! redb through the `redb` crate.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use store_api::{Error, Result};

use crate::data::Key;
use crate::target::Target;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

/// A redb database opened with `statestore_redb::Config::default()`'s settings: a 1 GiB cache,
/// commits not fsynced (`Durability::None`), an fsynced empty commit as the flush.
#[derive(Debug)]
pub struct RedbTarget {
    db: Database,
}

fn native(err: impl Into<redb::Error>) -> Error {
    Error::backend("redb", err.into())
}

impl RedbTarget {
    /// Opens (creating) the database file `store.redb` in `dir`.
    ///
    /// # Errors
    /// An I/O error creating `dir`, or redb's open error.
    pub fn open(dir: &Path) -> Result<RedbTarget> {
        std::fs::create_dir_all(dir)
            .map_err(|err| Error::io("creating the redb directory", err))?;
        let db = Database::builder()
            .set_cache_size(1 << 30)
            .create(dir.join("store.redb"))
            .map_err(native)?;
        let target = RedbTarget { db };
        target.commit(Durability::None, |_| Ok(()))?;
        Ok(target)
    }

    fn commit(
        &self,
        durability: Durability,
        body: impl FnOnce(&mut redb::Table<'_, &[u8], &[u8]>) -> Result<(), redb::StorageError>,
    ) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(native)?;
        txn.set_durability(durability).map_err(native)?;
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
        Ok(value.map(|guard| guard.value().len()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.commit(Durability::None, |table| table.insert(key, value).map(drop))
    }

    fn write_batch(&self, entries: &[(Key, &[u8])]) -> Result<()> {
        self.commit(Durability::None, |table| {
            for (key, value) in entries {
                table.insert(key.as_slice(), *value)?;
            }
            Ok(())
        })
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        let txn = self.db.begin_read().map_err(native)?;
        let table = txn.open_table(TABLE).map_err(native)?;
        let mut read = 0;
        for item in table.range(from..).map_err(native)?.take(limit) {
            item.map_err(native)?;
            read += 1;
        }
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        self.commit(Durability::Immediate, |_| Ok(()))
    }
}
