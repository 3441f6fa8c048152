//! How the suite opens the store under test.

use std::path::Path;

use store_api::{BackendFactory, BackendOptions, KeyValueStore, Result};

/// Opens a store kept in a directory. The suite calls it once per case with a fresh temporary
/// directory, and again with the same directory to check what survives a reopen.
///
/// Any `Fn(&Path) -> Result<Box<dyn KeyValueStore>>` is a factory, so a plain function works:
///
/// ```
/// use std::path::Path;
/// use statestore_conformance::StoreFactory;
/// use store_api::{KeyValueStore, Result};
///
/// fn open(_dir: &Path) -> Result<Box<dyn KeyValueStore>> {
///     unimplemented!("open your store in the directory")
/// }
/// let factory: &dyn StoreFactory = &open;
/// # let _ = factory;
/// ```
pub trait StoreFactory {
    /// Opens, creating if needed, the store kept in `dir`.
    ///
    /// # Errors
    /// Whatever the backend reports; the suite expects `Locked` when `dir` is already open by
    /// a persistent store.
    fn open(&self, dir: &Path) -> Result<Box<dyn KeyValueStore>>;
}

impl<F> StoreFactory for F
where
    F: Fn(&Path) -> Result<Box<dyn KeyValueStore>>,
{
    fn open(&self, dir: &Path) -> Result<Box<dyn KeyValueStore>> {
        self(dir)
    }
}

/// A [`StoreFactory`] that opens every store through a registered [`BackendFactory`] with the
/// same `options` (`serde_json::Value::Null` for the backend's defaults).
pub fn backend<B: BackendFactory>(factory: B, options: BackendOptions) -> impl StoreFactory {
    move |dir: &Path| factory.open(dir, &options)
}
