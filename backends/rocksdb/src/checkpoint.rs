//! [`Checkpoints`] of a RocksDB store: RocksDB's own checkpoints (hard links of its immutable
//! SST files, copies of the small ones), and a store replaced by such a set of files.
//!
//! Both directories live inside the store's, so the links stay on its file system and a
//! restore moves the files in by renaming them: [`OUT_PREFIX`]`<n>` for the checkpoints taken,
//! [`STAGING`] for the one being restored. The store removes both kinds when it is opened, so
//! the files of a process killed halfway never outlive it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::DB;
use rocksdb::checkpoint::Checkpoint;
use store_api::{Checkpoints, Error, Result};

use crate::RocksDbStore;
use crate::error::from_rocksdb;

/// The directory, inside the store's, where a checkpoint is put before the store is restored
/// from it.
const STAGING: &str = "checkpoint-restore";

/// The prefix of the directories, inside the store's, of the checkpoints taken.
const OUT_PREFIX: &str = "checkpoint-out-";

/// Numbers the checkpoints taken by this process, so two in flight never share a directory.
static TAKEN: AtomicU64 = AtomicU64::new(0);

fn io(what: &str, path: &Path, err: std::io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), err)
}

/// Removes the checkpoint directories left in the store directory `dir` by an earlier process.
pub(crate) fn remove_leftovers(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|err| io("listing", dir, err))?;
    for entry in entries {
        let entry = entry.map_err(|err| io("listing", dir, err))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == STAGING || name.starts_with(OUT_PREFIX) {
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(|err| io("removing", &path, err))?;
        }
    }
    Ok(())
}

/// The files directly in `dir`, relative to it, sorted.
fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|err| io("listing", dir, err))? {
        let entry = entry.map_err(|err| io("listing", dir, err))?;
        let kind = entry.file_type().map_err(|err| io("listing", dir, err))?;
        if kind.is_file() {
            files.push(PathBuf::from(entry.file_name()));
        }
    }
    files.sort();
    Ok(files)
}

/// Syncs a directory, so the renames into it survive a crash.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|file| file.sync_all())
        .map_err(|err| io("syncing", dir, err))
}

impl RocksDbStore {
    /// Removes every entry of the store's directory but `keep` (the directory itself stays:
    /// the store checks its identity on every flush).
    fn clear_dir(&self, keep: Option<&Path>) -> Result<()> {
        let dir = self.path();
        for entry in std::fs::read_dir(dir).map_err(|err| io("listing", dir, err))? {
            let entry = entry.map_err(|err| io("listing", dir, err))?;
            let path = entry.path();
            if Some(path.as_path()) == keep {
                continue;
            }
            let kind = entry.file_type().map_err(|err| io("listing", dir, err))?;
            let removed = if kind.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|err| io("removing", &path, err))?;
        }
        Ok(())
    }

    /// Replaces the files of the (closed) database with those in `staging`.
    fn move_in(&self, staging: &Path) -> Result<()> {
        let dir = self.path();
        self.clear_dir(Some(staging))?;
        for file in files_in(staging)? {
            let (from, to) = (staging.join(&file), dir.join(&file));
            std::fs::rename(&from, &to).map_err(|err| io("moving", &from, err))?;
        }
        std::fs::remove_dir_all(staging).map_err(|err| io("removing", staging, err))?;
        sync_dir(dir)
    }

    /// Opens the database in the store's directory, empty: its files are removed first.
    fn reopen_empty(&self) -> Result<DB> {
        self.clear_dir(None)?;
        let mut opts = self.db_opts.clone();
        opts.create_if_missing(true);
        DB::open(&opts, self.path()).map_err(from_rocksdb)
    }
}

impl Checkpoints for RocksDbStore {
    fn format(&self) -> &str {
        "rocksdb"
    }

    /// RocksDB's `Checkpoint`: the memtable is flushed, then the live SST files are hard-linked
    /// and the small metadata files copied.
    fn create(&self) -> Result<(PathBuf, Vec<PathBuf>)> {
        let n = TAKEN.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .path()
            .join(format!("{OUT_PREFIX}{}-{n}", std::process::id()));
        let created = self.with_db(|db| Checkpoint::new(db)?.create_checkpoint(&dir));
        match created.and_then(|()| files_in(&dir)) {
            Ok(files) => Ok((dir, files)),
            Err(err) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(err)
            }
        }
    }

    fn staging_dir(&self) -> Result<PathBuf> {
        let dir = self.path().join(STAGING);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|err| io("removing", &dir, err))?;
        }
        std::fs::create_dir(&dir).map_err(|err| io("creating", &dir, err))?;
        Ok(dir)
    }

    /// Closes the database, replaces its files with the checkpoint's and opens it again. When
    /// the files do not open, the store is opened empty and the error is a `Corruption`.
    fn restore(&self, dir: &Path) -> Result<()> {
        let mut guard = self.db.write();
        let db = guard.take().ok_or(Error::Closed)?;
        let db = match Arc::try_unwrap(db) {
            Ok(db) => db,
            Err(shared) => {
                *guard = Some(shared);
                return Err(Error::invalid(format!(
                    "rocksdb {}: cannot restore a checkpoint while iterators or loaders of \
                     the store are alive",
                    self.path().display()
                )));
            }
        };
        drop(db);
        let opened = self
            .move_in(dir)
            .and_then(|()| DB::open(&self.db_opts, self.path()).map_err(from_rocksdb));
        match opened {
            Ok(db) => {
                *guard = Some(Arc::new(db));
                Ok(())
            }
            Err(err) => {
                let _ = std::fs::remove_dir_all(dir);
                *guard = Some(Arc::new(self.reopen_empty()?));
                Err(Error::Corruption(format!(
                    "rocksdb {}: the checkpoint does not open: {err}",
                    self.path().display()
                )))
            }
        }
    }
}
