//! statestore: fast local state stores for Rust stream processors, made fault-tolerant by a
//! changelog — what Kafka Streams' state stores are to the JVM.
//!
//! This facade re-exports the [store API](store_api) and opens a backend **by name**, so a
//! deployment switches engines in configuration rather than code. Each backend sits behind a
//! cargo feature of the same name (`memory`, `rocksdb`, `sled`, `redb`; all on by default), so
//! an application compiles only the engines it picks.
//!
//! Names resolve through the process-wide [`Registry`]: the built-ins are in it from the
//! start, and a backend from another crate joins with one call, `statestore::register(&MyFactory)`,
//! after which every name lookup in the process (this crate's [`open`], the task runtime, the
//! CLI, `compare`, the bench harness) finds it. Why process-wide: see the [`Registry`] docs.
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

mod registry;

use std::path::Path;

pub use registry::{Registry, RegistryError};
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

/// The built-in backends compiled into this build, in a fixed order: what
/// [`Registry::with_builtins`] and so [`Registry::global`] start with.
static BUILTINS: &[&dyn BackendFactory] = &[
    #[cfg(feature = "memory")]
    &statestore_memory::MemoryFactory,
    #[cfg(feature = "rocksdb")]
    &statestore_rocksdb::RocksDbFactory,
    #[cfg(feature = "sled")]
    &statestore_sled::SledFactory,
    #[cfg(feature = "redb")]
    &statestore_redb::RedbFactory,
];

/// Registers a third-party backend in the process-wide [`Registry::global`], so that
/// [`open`], the task runtime, the CLI, `compare` and the bench harness all resolve its name.
///
/// ```
/// # use std::path::Path;
/// # use statestore::{BackendFactory, BackendOptions, KeyValueStore, Result};
/// /// A backend that opens the memory store under another name.
/// #[derive(Debug)]
/// struct MyFactory;
///
/// impl BackendFactory for MyFactory {
///     fn name(&self) -> &'static str {
///         "my-engine"
///     }
///     fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
///         statestore::open("memory", dir, options)
///     }
/// }
///
/// statestore::register(&MyFactory)?;
/// assert!(statestore::backend_names().contains(&"my-engine"));
/// // Once is enough: a second registration of the name is an error.
/// assert!(statestore::register(&MyFactory).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`RegistryError::Duplicate`] when the name is already registered,
/// [`RegistryError::InvalidName`] for a name that cannot appear in a list of names.
pub fn register(factory: &'static dyn BackendFactory) -> Result<(), RegistryError> {
    Registry::global().register(factory)
}

/// The factory registered under `name` in [`Registry::global`].
///
/// # Errors
/// [`RegistryError::Unknown`], listing the registered names; it converts into
/// [`Error::InvalidArgument`] with `?`.
pub fn resolve(name: &str) -> Result<&'static dyn BackendFactory, RegistryError> {
    Registry::global().get(name)
}

/// The factory registered under `name` in [`Registry::global`], if any. [`resolve`] says
/// which names are registered when it is not.
pub fn factory(name: &str) -> Option<&'static dyn BackendFactory> {
    resolve(name).ok()
}

/// The names registered in [`Registry::global`]: the built-ins compiled into this build, then
/// the backends registered since, in registration order.
pub fn backend_names() -> Vec<&'static str> {
    Registry::global().names()
}

/// Opens, creating if needed, the store of backend `backend` (a name registered in
/// [`Registry::global`]) in directory `dir`, with `options` deserialized into that backend's
/// `Config` (`Null` for its defaults).
///
/// # Errors
/// [`Error::InvalidArgument`] for a name that is not registered (listing those that are), or
/// for options the backend rejects; otherwise whatever the backend's open reports (`Locked`,
/// `Corruption`, `Io`, ...).
pub fn open(backend: &str, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
    Registry::global().open(backend, dir, options)
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
        for name in Registry::with_builtins().names() {
            let err = open(name, dir.path(), &options).expect_err("must fail");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name}: {err}");
        }
    }

    /// A backend from outside: the memory store under another name.
    #[derive(Debug)]
    struct Renamed;

    impl BackendFactory for Renamed {
        fn name(&self) -> &'static str {
            "renamed-memory"
        }

        fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
            Registry::with_builtins().open("memory", dir, options)
        }
    }

    #[test]
    fn a_backend_registered_at_run_time_opens_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let before =
            open("renamed-memory", dir.path(), &BackendOptions::Null).expect_err("not yet");
        assert!(before.to_string().contains("registered:"), "{before}");
        register(&Renamed).expect("register");
        assert!(backend_names().contains(&"renamed-memory"));
        let store = open("renamed-memory", dir.path(), &BackendOptions::Null).expect("open");
        store.put(b"k", b"v").expect("put");
        assert_eq!(store.get(b"k").expect("get"), Some(b"v".to_vec()));
        let err = register(&Renamed).expect_err("twice");
        assert!(matches!(err, RegistryError::Duplicate { .. }), "{err}");
        assert!(factory("renamed-memory").is_some());
    }

    #[test]
    fn a_builtin_name_cannot_be_taken() {
        #[derive(Debug)]
        struct Impostor;
        impl BackendFactory for Impostor {
            fn name(&self) -> &'static str {
                "memory"
            }
            fn open(&self, _: &Path, _: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
                Err(Error::Unsupported("impostor".into()))
            }
        }
        let err = register(&Impostor).expect_err("taken");
        assert_eq!(
            err.to_string(),
            "a backend named \"memory\" is already registered"
        );
    }

    #[test]
    fn every_compiled_backend_opens_by_name() {
        for name in Registry::with_builtins().names() {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = open(name, dir.path(), &BackendOptions::Null).expect(name);
            assert_eq!(store.name(), name);
            store.put(b"k", b"v").expect("put");
            assert_eq!(store.get(b"k").expect("get"), Some(b"v".to_vec()));
            store.close().expect("close");
        }
    }
}
