//! The kinds of store a task holds, the key-value store each is kept in, and the typed handles
//! a processor reaches them by.
//!
//! Every store of a task, whatever its kind, is kept in one key-value store of the task
//! ([`TaskKv`]): a logged one is a `LoggedStore` on the store's changelog, so the window,
//! session, versioned and LRU stores layered over it are restored, committed with the task's
//! position, copied to standbys and fenced exactly as a plain key-value store is. Their own
//! bookkeeping (stream times, segments) lives in the same store and so in the same commits.

use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use statestore_changelog::LoggedStore;
use statestore_operator_stores::session::{SessionStore, SessionStoreConfig};
use statestore_operator_stores::versioned::VersionedStore;
use statestore_operator_stores::window::{WindowStore, WindowStoreConfig};
use statestore_operator_stores::{KeyCodec, LruStore, TypedStore, ValueCodec};
use store_api::{
    BatchOp, Capabilities, Error, KeyValueStore, KvIter, Result, ValueVisitor, WriteBatch,
};

use crate::config::{StoreSpec, TasksConfig};
use crate::store::{TaskStore, check_key, hide_reserved};

/// What a store of every task holds. Typed and timestamped stores are views of a key-value
/// store ([`StoreHandle<TypedStore<..>>`](StoreHandle)), so they are declared as `key-value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StoreKind {
    /// Bytes to bytes (and typed or timestamped views of them).
    #[default]
    KeyValue,
    /// A key-value store bounded to `capacity` entries, evicting the least recently used
    /// ([`LruStore`]); evictions are logged deletes.
    Lru {
        /// The most entries it keeps, at least 1.
        capacity: usize,
    },
    /// A window store ([`WindowStore`]).
    Window {
        /// How long a window is kept after the stream time passes its start, in milliseconds.
        retention_ms: i64,
        /// The width of a segment, the unit of expiry; default half the retention, at least a
        /// minute (Kafka Streams').
        #[serde(default)]
        segment_interval_ms: Option<i64>,
        /// Keep every value put for a key and window (stream-stream joins).
        #[serde(default)]
        retain_duplicates: bool,
    },
    /// A session store ([`SessionStore`]).
    Session {
        /// How long a session is kept after the stream time passes its end, in milliseconds.
        retention_ms: i64,
        /// The width of a segment; default half the retention, at least a minute.
        #[serde(default)]
        segment_interval_ms: Option<i64>,
    },
    /// A versioned key-value store ([`VersionedStore`], Kafka Streams' KIP-889).
    Versioned {
        /// How long older versions are kept behind the stream time, in milliseconds.
        history_retention_ms: i64,
    },
}

impl StoreKind {
    /// Checks the options without opening anything.
    ///
    /// # Errors
    /// `InvalidArgument` naming the bad option.
    pub(crate) fn validate(&self, store: &str) -> Result<()> {
        let bad = |why: String| Err(Error::invalid(format!("store {store:?}: {why}")));
        match *self {
            StoreKind::KeyValue => Ok(()),
            StoreKind::Lru { capacity: 0 } => {
                bad("an LRU store needs a capacity of at least 1".into())
            }
            StoreKind::Lru { .. } => Ok(()),
            StoreKind::Window {
                retention_ms,
                segment_interval_ms,
                ..
            }
            | StoreKind::Session {
                retention_ms,
                segment_interval_ms,
            } => {
                if retention_ms <= 0 {
                    return bad(format!("retention_ms must be positive, not {retention_ms}"));
                }
                match segment_interval_ms {
                    Some(interval) if interval <= 0 => bad(format!(
                        "segment_interval_ms must be positive, not {interval}"
                    )),
                    _ => Ok(()),
                }
            }
            StoreKind::Versioned {
                history_retention_ms,
            } if history_retention_ms < 0 => bad(format!(
                "history_retention_ms must not be negative, not {history_retention_ms}"
            )),
            StoreKind::Versioned { .. } => Ok(()),
        }
    }

    /// The kind's name, as the configuration spells it.
    fn name(&self) -> &'static str {
        match self {
            StoreKind::KeyValue => "key-value",
            StoreKind::Lru { .. } => "lru",
            StoreKind::Window { .. } => "window",
            StoreKind::Session { .. } => "session",
            StoreKind::Versioned { .. } => "versioned",
        }
    }
}

/// The key-value store a task store is kept in: logged (its changelog restores it) or local.
#[derive(Debug)]
pub(crate) enum Backing {
    Logged(Box<LoggedStore>),
    /// Not logged: writes go to the engine as they are made; nothing restores it.
    Local(Arc<dyn KeyValueStore>),
}

impl Backing {
    fn store(&self) -> &dyn KeyValueStore {
        match self {
            Backing::Logged(store) => store.as_ref(),
            Backing::Local(store) => store.as_ref(),
        }
    }
}

/// One store of a task as its processor and the operator stores over it see it: the task's
/// reserved keys hidden and refused, and writes dropped while the task replays records this
/// store already holds (see the `task` module).
#[derive(Debug)]
pub struct TaskKv {
    name: String,
    pub(crate) backing: Backing,
    /// The record being processed is already part of this store's committed content.
    replaying: AtomicBool,
}

impl TaskKv {
    pub(crate) fn new(name: String, backing: Backing) -> TaskKv {
        TaskKv {
            name,
            backing,
            replaying: AtomicBool::new(false),
        }
    }

    pub(crate) fn set_replaying(&self, replaying: bool) {
        self.replaying.store(replaying, Ordering::Relaxed);
    }

    fn replaying(&self) -> bool {
        self.replaying.load(Ordering::Relaxed)
    }

    /// The logged store, for a logged store.
    pub(crate) fn logged(&self) -> Option<&LoggedStore> {
        match &self.backing {
            Backing::Logged(store) => Some(store),
            Backing::Local(_) => None,
        }
    }
}

impl KeyValueStore for TaskKv {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.backing.store().capabilities()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.backing.store().get(key)
    }

    fn get_with(&self, key: &[u8], f: &mut ValueVisitor<'_>) -> Result<()> {
        check_key(key)?;
        self.backing.store().get_with(key, f)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().put(key, value)
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        if self.replaying() {
            return self.backing.store().get(key);
        }
        self.backing.store().put_if_absent(key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().delete(key)
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        for op in batch.ops() {
            check_key(op.key())?;
        }
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().write(batch)
    }

    fn write_ops(&self, ops: &[BatchOp]) -> Result<()> {
        for op in ops {
            check_key(op.key())?;
        }
        if self.replaying() {
            return Ok(());
        }
        self.backing.store().write_ops(ops)
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(hide_reserved(self.backing.store().range(from, to)?))
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        Ok(hide_reserved(self.backing.store().reverse_range(from, to)?))
    }

    fn approximate_len(&self) -> Result<u64> {
        self.backing.store().approximate_len()
    }

    /// The task commits its stores; a processor's flush is a no-op, so it can never commit
    /// part of a record.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// The task closes its stores; a processor's close is refused.
    fn close(&self) -> Result<()> {
        Err(Error::invalid(format!(
            "store {:?} belongs to its task, which closes it",
            self.name
        )))
    }
}

/// A task store opened as its declared kind.
#[derive(Debug)]
pub(crate) enum StoreView {
    KeyValue,
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
/// [`TaskKv`] (bytes, seen as a [`TaskStore`]), [`TypedStore`] (typed and timestamped views of a key-value store),
/// [`LruStore`], [`WindowStore`], [`SessionStore`] and [`VersionedStore`].
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
        matches!(kind, StoreKind::KeyValue)
    }

    fn view(store: &OpenStore) -> Option<TypedStore<K, V, KC, VC>> {
        matches!(store.view, StoreView::KeyValue)
            .then(|| TypedStore::new(Arc::clone(&store.kv) as Arc<dyn KeyValueStore>))
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
