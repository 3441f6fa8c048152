//! What a backend declares about itself.

/// Optional behaviour a store declares. The conformance suite gates its cases on these and
/// reports every case it skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Data written and flushed survives closing and reopening the same directory.
    pub persistent: bool,
    /// Iterators read a point-in-time snapshot taken when they are created: no write made
    /// after creation is ever seen. Without it, iteration is only weakly consistent (see
    /// [`KeyValueStore::range`](crate::KeyValueStore::range)).
    pub snapshot_iterators: bool,
}

impl Capabilities {
    /// No optional behaviour.
    pub const fn new() -> Self {
        Capabilities {
            persistent: false,
            snapshot_iterators: false,
        }
    }

    /// The same capabilities with `persistent` set.
    pub const fn with_persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// The same capabilities with `snapshot_iterators` set.
    pub const fn with_snapshot_iterators(mut self, snapshot: bool) -> Self {
        self.snapshot_iterators = snapshot;
        self
    }
}
