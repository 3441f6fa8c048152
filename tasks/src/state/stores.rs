//! The kinds of store a task holds, opened over the key-value store each is kept in, and the
//! typed handles a processor reaches them by.
//!
//! Every store of a task, whatever its kind, is kept in one key-value store of the task
//! ([`TaskKv`]): a logged one is a `LoggedStore` on the store's changelog, so the window,
//! session, versioned and LRU stores layered over it are restored, committed with the task's
//! position, copied to standbys and fenced exactly as a plain key-value store is. Their own
//! bookkeeping (stream times, segments) lives in the same store and so in the same commits.

use std::marker::PhantomData;
use std::sync::Arc;

use statestore_operator_stores::session::{SessionStore, SessionStoreConfig};
use statestore_operator_stores::versioned::VersionedStore;
use statestore_operator_stores::window::{WindowStore, WindowStoreConfig};
use statestore_operator_stores::{KeyCodec, LruStore, TtlStore, TypedStore, ValueCodec};
use store_api::{Error, KeyValueStore, Result};

use super::kv::{TaskKv, TaskStore};
use crate::config::{StoreKind, StoreSpec, TasksConfig};

/// A task store opened as its declared kind.
#[derive(Debug)]
pub(crate) enum StoreView {
    KeyValue,
    Ttl(Arc<TtlStore>),
    Lru(LruStore),
    Window(WindowStore),
    Session(SessionStore),
    Versioned(VersionedStore),
}

impl StoreView {
    /// Opens `kv` as `kind`, reading back the state the kind keeps in it.
    pub(crate) fn open(kv: &Arc<TaskKv>, kind: &StoreKind) -> Result<StoreView> {
        let inner: Arc<dyn KeyValueStore> = Arc::clone(kv) as Arc<dyn KeyValueStore>;
        Ok(match *kind {
            StoreKind::KeyValue => StoreView::KeyValue,
            StoreKind::Ttl { .. } => {
                let config = kind
                    .ttl_config()
                    .ok_or_else(|| Error::invalid("a TTL store without TTL options"))?;
                StoreView::Ttl(Arc::new(TtlStore::open(inner, config)?))
            }
            StoreKind::Lru { capacity } => StoreView::Lru(LruStore::new(inner, capacity)?),
            StoreKind::Window {
                retention_ms,
                segment_interval_ms,
                retain_duplicates,
            } => {
                let mut config =
                    WindowStoreConfig::new(retention_ms).with_retain_duplicates(retain_duplicates);
                if let Some(interval) = segment_interval_ms {
                    config = config.with_segment_interval(interval);
                }
                StoreView::Window(WindowStore::open(inner, config)?)
            }
            StoreKind::Session {
                retention_ms,
                segment_interval_ms,
            } => {
                let mut config = SessionStoreConfig::new(retention_ms);
                if let Some(interval) = segment_interval_ms {
                    config = config.with_segment_interval(interval);
                }
                StoreView::Session(SessionStore::open(inner, config)?)
            }
            StoreKind::Versioned {
                history_retention_ms,
            } => StoreView::Versioned(VersionedStore::open(inner, history_retention_ms)?),
        })
    }
}

/// A store of the task, as [`StoreType::view`] reads it.
#[derive(Debug)]
pub struct OpenStore {
    pub(crate) kv: Arc<TaskKv>,
    pub(crate) view: StoreView,
}

/// A type a task's store can be reached as through a [`StoreHandle`]: implemented for
/// [`TaskKv`] (bytes, seen as a [`TaskStore`]), [`TypedStore`] (typed and timestamped views of a
/// key-value or TTL store), [`TtlStore`], [`LruStore`], [`WindowStore`], [`SessionStore`] and [`VersionedStore`].
pub trait StoreType {
    /// What the processor gets: a reference or a cheap view.
    type View<'a>;

    /// Whether a store declared as `kind` can be reached as this type.
    fn accepts(kind: &StoreKind) -> bool;

    /// The store as this type, `None` when it was declared as another kind.
    fn view(store: &OpenStore) -> Option<Self::View<'_>>;
}

/// A key-value store of bytes is reached as [`TaskKv`], and its view is a [`TaskStore`].
impl StoreType for TaskKv {
    type View<'a> = TaskStore<'a>;

    fn accepts(kind: &StoreKind) -> bool {
        matches!(kind, StoreKind::KeyValue)
    }

    fn view(store: &OpenStore) -> Option<TaskStore<'_>> {
        matches!(store.view, StoreView::KeyValue).then_some(TaskStore { kv: &store.kv })
    }
}

impl<K, V, KC, VC> StoreType for TypedStore<K, V, KC, VC>
where
    KC: KeyCodec<K>,
    VC: ValueCodec<V>,
{
    type View<'a> = TypedStore<K, V, KC, VC>;

    fn accepts(kind: &StoreKind) -> bool {
        matches!(kind, StoreKind::KeyValue | StoreKind::Ttl { .. })
    }

    fn view(store: &OpenStore) -> Option<TypedStore<K, V, KC, VC>> {
        match &store.view {
            StoreView::KeyValue => Some(TypedStore::new(
                Arc::clone(&store.kv) as Arc<dyn KeyValueStore>
            )),
            StoreView::Ttl(ttl) => Some(TypedStore::with_ttl(Arc::clone(ttl))),
            _ => None,
        }
    }
}

/// The operator stores opened as a kind of their own.
macro_rules! store_type {
    ($type:ty, $variant:ident) => {
        impl StoreType for $type {
            type View<'a> = &'a $type;

            fn accepts(kind: &StoreKind) -> bool {
                matches!(kind, StoreKind::$variant { .. })
            }

            fn view(store: &OpenStore) -> Option<&$type> {
                match &store.view {
                    StoreView::$variant(view) => Some(view),
                    _ => None,
                }
            }
        }
    };
}

impl StoreType for TtlStore {
    type View<'a> = &'a TtlStore;

    fn accepts(kind: &StoreKind) -> bool {
        matches!(kind, StoreKind::Ttl { .. })
    }

    fn view(store: &OpenStore) -> Option<&TtlStore> {
        match &store.view {
            StoreView::Ttl(view) => Some(view),
            _ => None,
        }
    }
}

store_type!(LruStore, Lru);
store_type!(WindowStore, Window);
store_type!(SessionStore, Session);
store_type!(VersionedStore, Versioned);

/// A typed reference to a store of every task, made once from the configuration so that a
/// processor reaches the store without looking its name up for every record:
///
/// ```
/// use statestore_operator_stores::window::WindowStore;
/// use statestore_tasks::{StoreHandle, StoreKind, StoreSpec, TaskKv, TasksConfig};
///
/// let config = TasksConfig {
///     stores: vec![
///         StoreSpec::new("totals", "memory"),
///         StoreSpec::new("per-minute", "memory").with_kind(StoreKind::Window {
///             retention_ms: 3_600_000,
///             segment_interval_ms: None,
///             retain_duplicates: false,
///         }),
///     ],
///     ..TasksConfig::default()
/// };
/// let totals: StoreHandle<TaskKv> = StoreHandle::new(&config, "totals")?;
/// let windows: StoreHandle<WindowStore> = StoreHandle::new(&config, "per-minute")?;
/// // A window store cannot be reached as bytes.
/// assert!(StoreHandle::<TaskKv>::new(&config, "per-minute").is_err());
/// # Ok::<(), store_api::Error>(())
/// ```
pub struct StoreHandle<T: ?Sized> {
    pub(crate) index: usize,
    name: String,
    _type: PhantomData<fn() -> Box<T>>,
}

impl<T: StoreType + ?Sized> StoreHandle<T> {
    /// The handle of store `name` of `config`, reached as `T`.
    ///
    /// # Errors
    /// `InvalidArgument` when no store is named `name`, or it is declared as a kind `T` is not.
    pub fn new(config: &TasksConfig, name: &str) -> Result<Self> {
        let (index, spec): (usize, &StoreSpec) = config
            .stores
            .iter()
            .enumerate()
            .find(|(_, spec)| spec.name == name)
            .ok_or_else(|| Error::invalid(format!("no store named {name:?} is configured")))?;
        if !T::accepts(&spec.kind) {
            return Err(Error::invalid(format!(
                "store {name:?} is declared as a {} store and cannot be reached as {}",
                spec.kind.name(),
                std::any::type_name::<T>()
            )));
        }
        Ok(StoreHandle {
            index,
            name: name.to_owned(),
            _type: PhantomData,
        })
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<T: ?Sized> Clone for StoreHandle<T> {
    fn clone(&self) -> Self {
        StoreHandle {
            index: self.index,
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<T: ?Sized> std::fmt::Debug for StoreHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandle")
            .field("name", &self.name)
            .field("index", &self.index)
            .finish()
    }
}
