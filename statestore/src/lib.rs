//! statestore: fast local state stores for Rust stream processors, made fault-tolerant by a
//! changelog — what Kafka Streams' state stores are to the JVM.
//!
//! This facade re-exports the [store API](store_api) and opens a backend **by name**, so a
//! deployment switches engines in configuration rather than code. Each backend sits behind a
//! cargo feature of the same name (`memory`, `rocksdb`, `sled`, `redb`; all on by default), so
//! an application compiles only the engines it picks.
//!
//! ```
//! use statestore::KeyValueStore;
//!
//! let dir = tempfile::tempdir()?;
//! // The name and options would normally come from a configuration file.
//! let options = serde_json::json!({ "iterator_batch": 128 });
//! let store = statestore::open("memory", dir.path(), &options)?;
//! store.put(b"word/hello", b"1")?;
//! assert_eq!(store.get(b"word/hello")?, Some(b"1".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

pub use store_api::*;

// The README's code blocks, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// Durability: `LoggedStore`, changelogs, checkpoints, restore and the state directory.
#[cfg(feature = "changelog")]
pub use statestore_changelog as changelog;
#[cfg(feature = "memory")]
pub use statestore_memory as memory;
#[cfg(feature = "redb")]
pub use statestore_redb as redb;
#[cfg(feature = "rocksdb")]
pub use statestore_rocksdb as rocksdb;
#[cfg(feature = "sled")]
pub use statestore_sled as sled;

/// Every backend compiled into this build, in a fixed order.
static FACTORIES: &[&dyn BackendFactory] = &[
    #[cfg(feature = "memory")]
    &statestore_memory::MemoryFactory,
    #[cfg(feature = "rocksdb")]
    &statestore_rocksdb::RocksDbFactory,
    #[cfg(feature = "sled")]
    &statestore_sled::SledFactory,
    #[cfg(feature = "redb")]
    &statestore_redb::RedbFactory,
];

/// The factory registered under `name`, if that backend is compiled in.
pub fn factory(name: &str) -> Option<&'static dyn BackendFactory> {
    FACTORIES
        .iter()
        .copied()
        .find(|factory| factory.name() == name)
}

/// The names of the backends compiled into this build.
pub fn backend_names() -> Vec<&'static str> {
    FACTORIES.iter().map(|factory| factory.name()).collect()
}

/// Opens, creating if needed, the store of backend `backend` in directory `dir`, with `options`
/// deserialized into that backend's `Config` (`Null` for its defaults).
///
/// # Errors
/// [`Error::InvalidArgument`] for an unknown or not compiled-in backend name, or for options
/// the backend rejects; otherwise whatever the backend's open reports (`Locked`, `Corruption`,
/// `Io`, ...).
pub fn open(backend: &str, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
    let factory = factory(backend).ok_or_else(|| {
        Error::invalid(format!(
            "unknown backend {backend:?}; this build has: {}",
            backend_names().join(", ")
        ))
    })?;
    factory.open(dir, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_backend_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = open("leveldb", dir.path(), &BackendOptions::Null).expect_err("must fail");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("leveldb"), "{err}");
    }

    #[test]
    fn bad_options_are_a_typed_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = serde_json::json!({ "no_such_option": 1 });
        for name in backend_names() {
            let err = open(name, dir.path(), &options).expect_err("must fail");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name}: {err}");
        }
    }

    #[test]
    fn every_compiled_backend_opens_by_name() {
        for name in backend_names() {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = open(name, dir.path(), &BackendOptions::Null).expect(name);
            assert_eq!(store.name(), name);
            store.put(b"k", b"v").expect("put");
            assert_eq!(store.get(b"k").expect("get"), Some(b"v".to_vec()));
            store.close().expect("close");
        }
    }
}
