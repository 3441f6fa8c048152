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
    /// A process killed at a bad moment (kill -9) may leave the store's files unreadable, so
    /// that opening them fails with `Corruption`; whenever the store does open, every flushed
    /// write is there. A known engine bug to declare, not a behaviour to aim for (sled 0.34):
    /// the conformance suite's random kills then accept `Corruption` on reopen and count it,
    /// and a task's store that fails so is wiped and restored from its changelog.
    pub crash_may_corrupt: bool,
}

impl Capabilities {
    /// No optional behaviour.
    pub const fn new() -> Self {
        Capabilities {
            persistent: false,
            snapshot_iterators: false,
            crash_may_corrupt: false,
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

    /// The same capabilities with `crash_may_corrupt` set.
    pub const fn with_crash_may_corrupt(mut self, may_corrupt: bool) -> Self {
        self.crash_may_corrupt = may_corrupt;
        self
    }
}
