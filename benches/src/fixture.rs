//! A store opened by backend name in a fresh temporary directory.

use std::fs;
use std::path::Path;

use store_api::{BackendFactory, BackendOptions, Error, KeyValueStore, Result};
use tempfile::TempDir;

use crate::target::{ApiTarget, Target};

/// A store of one backend in its own temporary directory, removed on drop.
#[derive(Debug)]
pub struct Fixture {
    // Declared before `dir` so the store closes before its directory is removed.
    store: Box<dyn KeyValueStore>,
    dir: TempDir,
    backend: String,
}

impl Fixture {
    /// Opens `backend` with default options in a new directory under the system temp dir.
    ///
    /// # Errors
    /// `InvalidArgument` for a backend not registered, or the backend's open error.
    pub fn open(backend: &str) -> Result<Fixture> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("statestore-bench-{backend}-"))
            .tempdir()
            .map_err(|err| Error::io("creating a temporary directory", err))?;
        Fixture::open_in(backend, dir)
    }

    /// Opens `backend` (a name in [`statestore::Registry::global`]) with default options in
    /// `dir`, which the fixture then owns.
    ///
    /// # Errors
    /// As [`Fixture::open`].
    pub fn open_in(backend: &str, dir: TempDir) -> Result<Fixture> {
        Fixture::open_with(statestore::resolve(backend)?, &BackendOptions::Null, dir)
    }

    /// Opens a store of `factory` with `options` in `dir`, which the fixture then owns.
    ///
    /// # Errors
    /// The backend's open error, such as `InvalidArgument` for options it rejects.
    pub fn open_with(
        factory: &dyn BackendFactory,
        options: &BackendOptions,
        dir: TempDir,
    ) -> Result<Fixture> {
        let store = factory.open(&dir.path().join("store"), options)?;
        Ok(Fixture {
            store,
            dir,
            backend: factory.name().to_string(),
        })
    }

    /// The store.
    pub fn store(&self) -> &dyn KeyValueStore {
        self.store.as_ref()
    }

    /// The store behind the [`Target`](crate::Target) adapter the workloads use.
    pub fn target(&self) -> ApiTarget<'_> {
        ApiTarget(self.store.as_ref())
    }

    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The bytes the store's files take on disk now (0 for the memory backend).
    pub fn bytes_on_disk(&self) -> u64 {
        dir_size(self.dir.path())
    }
}

/// Opens `backend` by name (through [`statestore::Registry::global`]) in `dir` with default
/// options.
///
/// # Errors
/// `InvalidArgument` naming the registered backends when `backend` is not one, or the
/// backend's open error.
pub fn open_store(backend: &str, dir: &Path) -> Result<Box<dyn KeyValueStore>> {
    statestore::open(backend, dir, &BackendOptions::Null)
}

/// The total size of the regular files under `path`, in bytes; 0 when it cannot be read.
/// Sizes are apparent lengths, so preallocated but unwritten space counts too (sled and redb
/// preallocate; that space is taken from the disk all the same).
pub fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_size(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// A fixture is a target too: the workloads reach its store through the store API.
impl Target for Fixture {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        self.target().get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.target().put(key, value)
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
        self.target().write_batch(entries)
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        self.target().scan(from, limit)
    }

    fn flush(&self) -> Result<()> {
        self.target().flush()
    }
}
