//! Checkpoints: an optional capability of a backend whose content is a set of files, such as
//! RocksDB, to copy itself as those files and to be replaced by such a copy. A snapshot of a
//! store that offers it is its files, uploaded as they are, instead of an export of every
//! pair; a backend without it loses nothing (snapshots export its pairs).

use std::path::{Path, PathBuf};

use crate::Result;

/// A store that can copy its content into a directory of files and be replaced by such a
/// directory (see [`KeyValueStore::checkpoints`](crate::KeyValueStore::checkpoints)).
///
/// # Contract
/// - [`create`](Checkpoints::create) copies exactly the writes completed before it was
///   called (the caller keeps other writers out while it runs, if it needs a precise point);
///   the files it leaves are immutable and the store's own later writes never change them.
/// - [`restore`](Checkpoints::restore) replaces the store's whole content with the checkpoint,
///   or fails and leaves the store open and holding what it held, or empty (never part of the
///   checkpoint mixed with its old content).
/// - A checkpoint is readable only by the engine named by [`format`](Checkpoints::format).
pub trait Checkpoints: Send + Sync {
    /// The engine and file format of the checkpoints, such as `"rocksdb"`; a checkpoint of
    /// another format is never restored into this store.
    fn format(&self) -> &str;

    /// Writes a checkpoint of the store into a new directory on the store's file system (so
    /// an engine can hard-link its immutable files) and returns that directory and the files
    /// in it, as paths relative to it. The caller removes the directory when done with it;
    /// the store removes any left over when it is opened again.
    ///
    /// # Errors
    /// `Closed`, or an I/O or engine failure (then no directory is left).
    fn create(&self) -> Result<(PathBuf, Vec<PathBuf>)>;

    /// A new, empty directory on the store's file system where the files of a checkpoint are
    /// put before [`restore`](Checkpoints::restore). The store removes it when it is restored
    /// from, and when it is opened again.
    ///
    /// # Errors
    /// `Closed`, or an I/O failure.
    fn staging_dir(&self) -> Result<PathBuf>;

    /// Replaces the store's content with the checkpoint in `dir` (a
    /// [`staging_dir`](Checkpoints::staging_dir) filled with the files of a checkpoint), which
    /// is consumed.
    ///
    /// # Errors
    /// `InvalidArgument` while iterators or loaders of the store are alive, `Corruption` when
    /// the files do not open as a store (then the store is open and empty), `Closed`, or an
    /// I/O or engine failure.
    fn restore(&self, dir: &Path) -> Result<()>;
}
