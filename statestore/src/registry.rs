//! The backend registry: one place that maps a backend's name to its [`BackendFactory`].
//!
//! # Process-wide, and also a value
//! [`Registry::global`] is the registry every name in this process resolves through:
//! [`open`](crate::open), [`factory`](crate::factory), the task runtime's stores and standbys,
//! the CLI, `compare` and the bench harness. It starts with the built-in backends whose cargo
//! features are on; a third-party backend joins it with one call to
//! [`register`](crate::register). It is process-wide because a backend name is configuration:
//! as in Kafka Streams, a `"rocksdb"` or `"fjall"` in a configuration file must mean the same
//! engine wherever in the process it is read, including in code (a task runtime, a CLI
//! subcommand) that the application does not call directly and so could not hand a registry to.
//!
//! A [`Registry`] is also an ordinary value: [`Registry::new`] makes an empty one and
//! [`Registry::with_builtins`] one holding the built-ins, for a test or a tool that wants its
//! own set of names without touching the process's.
//!
//! Names are registered once: registering a name again is [`RegistryError::Duplicate`], even
//! with the same factory, so two crates cannot silently fight over a name. Factories are
//! `&'static`: a unit struct registers as `&MyFactory`; a factory built at run time can be
//! leaked once with `Box::leak`, as registrations live as long as the process.

use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use parking_lot::RwLock;
use store_api::{BackendFactory, BackendOptions, Error, KeyValueStore, Result};

/// Why a name could not be registered or resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A factory is already registered under this name.
    #[error("a backend named {name:?} is already registered")]
    Duplicate {
        /// The name registered twice.
        name: String,
    },
    /// No factory is registered under this name.
    #[error("unknown backend {name:?}; registered: {}", list(.registered))]
    Unknown {
        /// The name asked for.
        name: String,
        /// Every registered name, in registration order.
        registered: Vec<String>,
    },
    /// The name cannot name a backend: it is empty or holds something other than ASCII
    /// letters, digits, `-` and `_` (names appear in comma-separated lists, command lines and
    /// directory names).
    #[error("{name:?} is not a valid backend name: use letters, digits, '-' and '_'")]
    InvalidName {
        /// The name refused.
        name: String,
    },
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Registry errors are configuration errors: `InvalidArgument` in the store API's terms.
impl From<RegistryError> for Error {
    fn from(err: RegistryError) -> Self {
        Error::invalid(err.to_string())
    }
}

/// A set of backend factories, each under a distinct name. See the [crate docs](crate).
///
/// ```
/// use statestore::{Registry, RegistryError};
///
/// let registry = Registry::with_builtins();
/// assert!(registry.get("memory").is_ok());
/// let err = registry.get("leveldb").expect_err("not registered");
/// assert!(matches!(err, RegistryError::Unknown { .. }));
/// assert!(err.to_string().contains("memory"), "{err}");
/// ```
pub struct Registry {
    /// In registration order, which is the order names are listed in. A handful of entries:
    /// a linear search is faster than hashing the name.
    factories: RwLock<Vec<&'static dyn BackendFactory>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("names", &self.names())
            .finish()
    }
}

impl Default for Registry {
    /// An empty registry, as [`Registry::new`].
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// An empty registry.
    pub const fn new() -> Registry {
        Registry {
            factories: RwLock::new(Vec::new()),
        }
    }

    /// A registry holding the built-in backends compiled into this build (the cargo features
    /// `memory`, `rocksdb`, `sled`, `redb`), in that order.
    pub fn with_builtins() -> Registry {
        Registry {
            factories: RwLock::new(crate::BUILTINS.to_vec()),
        }
    }

    /// The process-wide registry, created with the built-ins on first use.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(Registry::with_builtins)
    }

    /// Adds `factory` under its [`name`](BackendFactory::name).
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] when that name is already registered (nothing changes),
    /// [`RegistryError::InvalidName`] when the name is empty or holds anything but ASCII
    /// letters, digits, `-` and `_`.
    pub fn register(&self, factory: &'static dyn BackendFactory) -> Result<(), RegistryError> {
        let name = factory.name();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(RegistryError::InvalidName { name: name.into() });
        }
        let mut factories = self.factories.write();
        if factories.iter().any(|known| known.name() == name) {
            return Err(RegistryError::Duplicate { name: name.into() });
        }
        factories.push(factory);
        Ok(())
    }

    /// The factory registered under `name`.
    ///
    /// # Errors
    /// [`RegistryError::Unknown`], listing every registered name.
    pub fn get(&self, name: &str) -> Result<&'static dyn BackendFactory, RegistryError> {
        let factories = self.factories.read();
        match factories.iter().find(|factory| factory.name() == name) {
            Some(factory) => Ok(*factory),
            None => Err(RegistryError::Unknown {
                name: name.into(),
                registered: factories.iter().map(|f| f.name().to_string()).collect(),
            }),
        }
    }

    /// Whether a factory is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_ok()
    }

    /// The registered names, in registration order (the built-ins first).
    pub fn names(&self) -> Vec<&'static str> {
        self.factories.read().iter().map(|f| f.name()).collect()
    }

    /// Opens, creating if needed, the store of backend `name` in `dir`, with `options`
    /// deserialized into that backend's `Config` (`Null` for its defaults).
    ///
    /// # Errors
    /// `InvalidArgument` for a name that is not registered (the message lists those that
    /// are) or for options the backend rejects; otherwise the backend's open error.
    pub fn open(
        &self,
        name: &str,
        dir: &Path,
        options: &BackendOptions,
    ) -> Result<Box<dyn KeyValueStore>> {
        self.get(name)?.open(dir, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A factory that opens nothing, under a name chosen by the test.
    #[derive(Debug)]
    struct Named(&'static str);

    impl BackendFactory for Named {
        fn name(&self) -> &'static str {
            self.0
        }

        fn open(&self, _dir: &Path, _options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
            Err(Error::Unsupported(format!("{} opens nothing", self.0)))
        }
    }

    #[test]
    fn a_name_registered_twice_is_a_duplicate() {
        static FIRST: Named = Named("twice");
        static SECOND: Named = Named("twice");
        let registry = Registry::new();
        registry.register(&FIRST).expect("first");
        let err = registry.register(&SECOND).expect_err("second");
        assert_eq!(
            err,
            RegistryError::Duplicate {
                name: "twice".into()
            }
        );
        assert!(err.to_string().contains("already registered"), "{err}");
        assert_eq!(registry.names(), ["twice"]);
    }

    #[test]
    fn an_unknown_name_lists_what_is_registered() {
        static A: Named = Named("a");
        static B: Named = Named("b");
        let registry = Registry::new();
        assert_eq!(
            registry.get("x").expect_err("empty").to_string(),
            "unknown backend \"x\"; registered: none"
        );
        registry.register(&A).expect("a");
        registry.register(&B).expect("b");
        let err = registry.get("x").expect_err("unknown");
        assert_eq!(err.to_string(), "unknown backend \"x\"; registered: a, b");
        let err = Error::from(err);
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
    }

    #[test]
    fn names_that_cannot_be_listed_are_refused() {
        static EMPTY: Named = Named("");
        static COMMA: Named = Named("a,b");
        static SLASH: Named = Named("a/b");
        let registry = Registry::new();
        for factory in [&EMPTY, &COMMA, &SLASH] {
            let err = registry.register(factory).expect_err(factory.0);
            assert!(matches!(err, RegistryError::InvalidName { .. }), "{err}");
        }
        assert!(registry.names().is_empty());
    }

    #[test]
    fn registries_are_independent_values() {
        static MINE: Named = Named("only-here");
        let registry = Registry::with_builtins();
        registry.register(&MINE).expect("register");
        assert!(registry.contains("only-here"));
        assert!(!Registry::global().contains("only-here"));
        let err = registry
            .open("only-here", Path::new("."), &BackendOptions::Null)
            .expect_err("opens nothing");
        assert_eq!(err.kind(), store_api::ErrorKind::Unsupported);
    }
}
