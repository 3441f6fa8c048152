//! A store opened in a temporary directory that lives exactly as long as the fixture.

use std::path::Path;
use std::sync::Arc;

use store_api::{KeyValueStore, Result};
use tempfile::TempDir;

use crate::StoreFactory;

/// One store under test, opened by a [`StoreFactory`] in a fresh temporary directory.
///
/// Drop order matters and is fixed by field order: Rust drops fields in declaration order, so
/// the store (which closes itself on drop) goes first and the directory is deleted only after
/// the store has released its files.
pub struct StoreFixture<'f> {
    /// `None` only for the instant [`reopen`](StoreFixture::reopen) runs between close and open.
    store: Option<Arc<dyn KeyValueStore>>,
    dir: TempDir,
    factory: &'f dyn StoreFactory,
}

impl<'f> StoreFixture<'f> {
    /// Opens a store in a new temporary directory.
    ///
    /// # Panics
    /// When the directory cannot be created or the factory fails: the case cannot run.
    pub fn new(factory: &'f dyn StoreFactory) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("statestore-conformance-")
            .tempdir()
            .expect("creating a temporary directory for the store");
        let store = factory
            .open(dir.path())
            .unwrap_or_else(|err| panic!("the factory failed to open a new store: {err}"));
        StoreFixture {
            store: Some(Arc::from(store)),
            dir,
            factory,
        }
    }

    /// The open store.
    pub fn store(&self) -> &dyn KeyValueStore {
        self.store
            .as_deref()
            .expect("the fixture always holds an open store")
    }

    /// Another handle on the open store, for sharing with threads.
    pub fn shared(&self) -> Arc<dyn KeyValueStore> {
        Arc::clone(
            self.store
                .as_ref()
                .expect("the fixture always holds an open store"),
        )
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Opens the fixture's directory a second time, without touching the open store. A
    /// persistent store must refuse this with `Locked`.
    ///
    /// # Errors
    /// Whatever the factory reports.
    pub fn open_again(&self) -> Result<Box<dyn KeyValueStore>> {
        self.factory.open(self.dir.path())
    }

    /// Closes the store, drops this fixture's handle, and opens the same directory again.
    ///
    /// # Panics
    /// When closing or opening fails, or another handle from [`shared`](Self::shared) is
    /// still alive (the old store would still hold its files).
    pub fn reopen(&mut self) {
        let old = self
            .store
            .take()
            .expect("the fixture always holds an open store");
        old.close()
            .unwrap_or_else(|err| panic!("close before reopen failed: {err}"));
        assert_eq!(
            Arc::strong_count(&old),
            1,
            "a handle from StoreFixture::shared outlived its case's threads"
        );
        drop(old);
        // A child process another case spawns on a sibling thread holds a copy of every
        // descriptor of this process between its fork and its exec, the lock file of this
        // store included, so the lock just released can read as held for that instant.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let store = loop {
            match self.factory.open(self.dir.path()) {
                Err(err)
                    if err.kind() == store_api::ErrorKind::Locked
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => {
                    break other.unwrap_or_else(|err| {
                        panic!("reopening the store's directory failed: {err}")
                    });
                }
            }
        };
        self.store = Some(Arc::from(store));
    }
}

impl std::fmt::Debug for StoreFixture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreFixture")
            .field("store", &self.store)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}
