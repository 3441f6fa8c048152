//! The store under an operator-store case: a backend's store, plain or logged.

use std::path::PathBuf;
use std::sync::Arc;

use statestore_changelog::{Checkpoint, LoggedStore, LoggedStoreConfig, MemoryLog};
use statestore_conformance::StoreFactory;
use store_api::KeyValueStore;
use tempfile::TempDir;

/// How the operator store under test reaches the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Directly over the backend's store.
    Plain,
    /// Over a `LoggedStore` wrapping the backend's store, with a `MemoryLog` changelog.
    Logged,
}

/// Commits every few KiB, so a case's data sits partly in the write buffer and partly in the
/// store, and reads merge the two.
const LOGGED_COMMIT_BYTES: usize = 4096;

/// One byte store for a case, in a temporary directory that outlives it.
///
/// Fields drop in order: the store (which closes itself) before the directory.
pub struct OperatorFixture<'f> {
    /// `None` only while [`reopen`](Self::reopen) runs.
    store: Option<Arc<dyn KeyValueStore>>,
    log: MemoryLog,
    /// Bumped by every logged reopen, which restores into a new directory.
    generation: u32,
    mode: Mode,
    dir: TempDir,
    factory: &'f dyn StoreFactory,
}

impl<'f> OperatorFixture<'f> {
    /// Opens a new store of `factory` in `mode`.
    ///
    /// # Panics
    /// When the directory, the store or the logged store cannot be opened: the case cannot run.
    pub fn new(factory: &'f dyn StoreFactory, mode: Mode) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("statestore-operator-")
            .tempdir()
            .expect("creating a temporary directory for the store");
        let mut fixture = OperatorFixture {
            store: None,
            log: MemoryLog::new("operator-conformance-changelog", 0),
            generation: 0,
            mode,
            dir,
            factory,
        };
        fixture.store = Some(fixture.open());
        fixture
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// A handle on the open store. Drop every handle (and every operator store built on one)
    /// before [`reopen`](Self::reopen).
    pub fn store(&self) -> Arc<dyn KeyValueStore> {
        Arc::clone(
            self.store
                .as_ref()
                .expect("the fixture always holds an open store"),
        )
    }

    /// The changelog of a logged fixture (empty and unused for a plain one).
    pub fn changelog(&self) -> &MemoryLog {
        &self.log
    }

    /// True when the data survives [`reopen`](Self::reopen): always when logged, and for
    /// persistent backends when plain. When false, `reopen` leaves the store as it is.
    pub fn survives_reopen(&self) -> bool {
        self.mode == Mode::Logged || self.store().capabilities().persistent
    }

    /// Commits a logged store (its `flush`), flushes a plain one.
    ///
    /// # Panics
    /// When the flush fails.
    pub fn commit(&self) {
        self.store()
            .flush()
            .unwrap_or_else(|err| panic!("flush or commit failed: {err}"));
    }

    /// Closes the store and opens it again: a persistent plain store from its directory, a
    /// logged store by restoring a new, empty store of the backend from the changelog. Does
    /// nothing for a plain store that is not persistent.
    ///
    /// # Panics
    /// When closing or opening fails, or a handle from [`store`](Self::store) is still alive.
    pub fn reopen(&mut self) {
        if !self.survives_reopen() {
            return;
        }
        let old = self
            .store
            .take()
            .expect("the fixture always holds an open store");
        old.close()
            .unwrap_or_else(|err| panic!("close before reopen failed: {err}"));
        assert_eq!(
            Arc::strong_count(&old),
            1,
            "a handle from OperatorFixture::store outlived its use before a reopen"
        );
        drop(old);
        if self.mode == Mode::Logged {
            self.generation += 1;
        }
        self.store = Some(self.open());
    }

    fn store_dir(&self) -> PathBuf {
        let dir = self.dir.path().join(format!("store-{}", self.generation));
        std::fs::create_dir_all(&dir).expect("creating the store's directory");
        dir
    }

    fn open(&self) -> Arc<dyn KeyValueStore> {
        let dir = self.store_dir();
        let inner: Arc<dyn KeyValueStore> = Arc::from(
            self.factory
                .open(&dir)
                .unwrap_or_else(|err| panic!("the factory failed to open a store: {err}")),
        );
        match self.mode {
            Mode::Plain => inner,
            Mode::Logged => {
                let checkpoint = Checkpoint::open(dir.with_extension("checkpoint"))
                    .unwrap_or_else(|err| panic!("opening the checkpoint failed: {err}"));
                let config = LoggedStoreConfig {
                    commit_bytes: LOGGED_COMMIT_BYTES,
                    ..LoggedStoreConfig::default()
                };
                let logged = LoggedStore::open(
                    inner,
                    Arc::new(self.log.clone()),
                    Arc::new(checkpoint),
                    config,
                )
                .unwrap_or_else(|err| panic!("opening the logged store failed: {err}"));
                Arc::new(logged)
            }
        }
    }
}

impl std::fmt::Debug for OperatorFixture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorFixture")
            .field("store", &self.store)
            .field("mode", &self.mode)
            .field("generation", &self.generation)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}
