//! Opening a backend by name, with options from configuration.

use std::fmt::Debug;
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::{Error, KeyValueStore, Result};

/// Backend options as they come from a configuration table: a JSON value, or anything serde can
/// turn into one (a TOML table converts with `serde_json::to_value`). `Null` means "defaults".
pub type BackendOptions = serde_json::Value;

/// Opens stores of one engine. Each backend crate exports one, next to its `Config`.
pub trait BackendFactory: Send + Sync + Debug + 'static {
    /// The engine's registered name: `"memory"`, `"rocksdb"`, `"sled"`, `"redb"`, or a
    /// third-party name.
    fn name(&self) -> &'static str;

    /// Opens, creating if needed, the store kept in directory `dir`, with `options`
    /// deserialized into the backend's `Config`.
    ///
    /// # Errors
    /// `InvalidArgument` for options the backend does not know or accept, `Locked` when the
    /// directory is already open, `Corruption` when its files cannot be read, or `Io`.
    fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>>;
}

/// Deserializes backend options into a backend's `Config`. `Null` gives `C::default()`.
///
/// # Errors
/// `InvalidArgument` naming the backend and the offending option.
pub fn parse_options<C>(backend: &str, options: &BackendOptions) -> Result<C>
where
    C: DeserializeOwned + Default,
{
    if options.is_null() {
        return Ok(C::default());
    }
    C::deserialize(options)
        .map_err(|err| Error::invalid(format!("bad options for backend {backend:?}: {err}")))
}

/// Creates `dir` and its parents if missing.
///
/// # Errors
/// `Io` when the directory cannot be created.
pub fn create_store_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|err| Error::io(format!("creating store directory {}", dir.display()), err))
}
