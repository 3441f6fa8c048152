//! A store of every task: its name, engine, kind and changelog settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use statestore_changelog::LoggedStoreConfig;
use statestore_operator_stores::{TtlClock, TtlConfig};
use store_api::{Error, Result};

/// One state store of every task: its name, its engine and the engine's options.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSpec {
    /// The store name: the changelog topic is `<application_id>-<name>-changelog`.
    pub name: String,
    /// The backend, by name: a built-in (`rocksdb`, `redb`, `sled`, `memory`) compiled into
    /// `statestore`, or one registered with `statestore::register`.
    pub backend: String,
    /// The backend's options (`null` for its defaults).
    #[serde(default)]
    pub options: serde_json::Value,
    /// Buffering and restore options of the logged store.
    #[serde(default)]
    pub logged: LoggedStoreConfig,
    /// What the store holds: `key-value` (the default; typed and timestamped stores are views
    /// of it), `ttl` (a key-value store whose entries expire), `lru`, `window`, `session` or
    /// `versioned`, with the kind's options
    /// (`{ type = "window", retention_ms = 3600000 }`).
    #[serde(default)]
    pub kind: StoreKind,
    /// Whether the store has a changelog. Default true. A store that is not logged keeps its
    /// content only on this machine: writes reach its engine as they are made, it holds no
    /// input position, no standby copies it, and a task that moves starts it empty. After a
    /// crash it may hold the writes of records processed again (at least once), as Kafka
    /// Streams' stores with logging disabled.
    #[serde(default = "logging_default")]
    pub logging: bool,
    /// The replication factor of the changelog topic, when this application creates it.
    /// Default: the application's `replication_factor`.
    #[serde(default)]
    pub replication_factor: Option<i32>,
    /// Properties of the changelog topic when this application creates it, such as
    /// `min.insync.replicas` or `max.message.bytes` (`cleanup.policy` is always `compact`).
    #[serde(default)]
    pub topic_properties: BTreeMap<String, String>,
}

fn logging_default() -> bool {
    true
}

impl StoreSpec {
    /// A store `name` on `backend` with default options.
    pub fn new(name: impl Into<String>, backend: impl Into<String>) -> StoreSpec {
        StoreSpec {
            name: name.into(),
            backend: backend.into(),
            options: serde_json::Value::Null,
            logged: LoggedStoreConfig::default(),
            kind: StoreKind::KeyValue,
            logging: true,
            replication_factor: None,
            topic_properties: BTreeMap::new(),
        }
    }

    /// The same store declared as `kind`.
    pub fn with_kind(mut self, kind: StoreKind) -> StoreSpec {
        self.kind = kind;
        self
    }

    /// The same store with its changelog on or off.
    pub fn with_logging(mut self, logging: bool) -> StoreSpec {
        self.logging = logging;
        self
    }
}

/// What a store of every task holds. Typed and timestamped stores are views of a key-value
/// store ([`StoreHandle<TypedStore<..>>`](crate::StoreHandle)), so they are declared as `key-value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StoreKind {
    /// Bytes to bytes (and typed or timestamped views of them).
    #[default]
    KeyValue,
    /// A key-value store whose entries expire `ttl_ms` after their write
    /// ([`TtlStore`](statestore_operator_stores::TtlStore)), or after their own TTL; expiries
    /// are logged deletes in the commit that expired them. Reached as `TtlStore` or as a
    /// `TypedStore` over it.
    Ttl {
        /// How long an entry lives, in milliseconds of `clock`.
        ttl_ms: i64,
        /// `stream-time` (the default: the task's stream time, the largest record timestamp
        /// it processed, which the store is moved up to whenever the processor reaches it,
        /// and kept in the store) or `wall-clock`.
        #[serde(default)]
        clock: TtlClock,
        /// How often, in milliseconds of `clock`, a write also deletes what expired;
        /// default 1000.
        #[serde(default)]
        sweep_interval_ms: Option<i64>,
    },
    /// A key-value store bounded to `capacity` entries, evicting the least recently used
    /// ([`LruStore`](statestore_operator_stores::LruStore)); evictions are logged deletes.
    Lru {
        /// The most entries it keeps, at least 1.
        capacity: usize,
    },
    /// A window store ([`WindowStore`](statestore_operator_stores::window::WindowStore)).
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
    /// A session store ([`SessionStore`](statestore_operator_stores::session::SessionStore)).
    Session {
        /// How long a session is kept after the stream time passes its end, in milliseconds.
        retention_ms: i64,
        /// The width of a segment; default half the retention, at least a minute.
        #[serde(default)]
        segment_interval_ms: Option<i64>,
    },
    /// A versioned key-value store
    /// ([`VersionedStore`](statestore_operator_stores::versioned::VersionedStore), Kafka Streams' KIP-889).
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
            StoreKind::Ttl { .. } => self
                .ttl_config()
                .map_or(Ok(()), |config| config.validate())
                .or_else(|err| bad(err.to_string())),
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

    /// The options of a TTL store, `None` for another kind.
    pub(crate) fn ttl_config(&self) -> Option<TtlConfig> {
        let StoreKind::Ttl {
            ttl_ms,
            clock,
            sweep_interval_ms,
        } = *self
        else {
            return None;
        };
        let mut config = TtlConfig::new(ttl_ms, clock);
        if let Some(interval) = sweep_interval_ms {
            config.sweep_interval_ms = interval;
        }
        Some(config)
    }

    /// The kind's name, as the configuration spells it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            StoreKind::KeyValue => "key-value",
            StoreKind::Ttl { .. } => "ttl",
            StoreKind::Lru { .. } => "lru",
            StoreKind::Window { .. } => "window",
            StoreKind::Session { .. } => "session",
            StoreKind::Versioned { .. } => "versioned",
        }
    }
}
