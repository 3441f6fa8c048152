//! Options of the memory backend.

use serde::{Deserialize, Serialize};

/// Options of the memory backend.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The most entries an iterator takes per acquisition of the map's read lock (default
    /// 256). Taking an entry copies a short key and a reference count, not the value's bytes;
    /// those are copied when the iterator yields it. Iterators start at 16 and double up to
    /// this, so a short scan takes little, while a long one holds the lock for bounded stretches and lets writers in
    /// between. Values below 1 are treated as 1.
    pub iterator_batch: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iterator_batch: 256,
        }
    }
}
