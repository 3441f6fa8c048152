//! The write buffer of a [`LoggedStore`](super::LoggedStore): the writes since the last commit.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};
use std::sync::Arc;

use store_api::BatchOp;

/// Buffered writes: key to its latest value, `None` for a delete.
pub(super) type Entries = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// The writes of a commit in flight: the latest write of each key, in ascending key order.
/// They are moved out of [`Entries`], never copied, and stay readable (by binary search)
/// while the commit hands them to the log and the store, both of which only borrow them.
pub(super) type Frozen = Vec<BatchOp>;

/// What a buffered entry is charged against the commit threshold beyond its key and value:
/// roughly the two `Vec` headers, the `Option` and the map node share.
const ENTRY_OVERHEAD: usize = 64;

/// The writes since the last commit, in two parts: `active` takes new writes while
/// `committing` holds the writes a commit in flight is persisting. Reads look in `active`,
/// then `committing`, then the store, so a write stays visible while it moves to the store.
#[derive(Debug, Default)]
pub(super) struct WriteBuffer {
    active: Entries,
    active_bytes: usize,
    committing: Option<Arc<Frozen>>,
    /// What undoes the writes since the last [`savepoint`](Self::savepoint), while one is set.
    savepoint: Option<Savepoint>,
}

/// The state of `active` at a savepoint, as an undo log of the writes made since: each write
/// records what it replaced, so rolling back replays the log backwards. The log and the bytes
/// it copies live in buffers kept across savepoints, so a savepoint per unit of work (a
/// record) allocates nothing once they have grown to the largest unit.
#[derive(Debug, Default)]
struct Savepoint {
    /// A commit took the writes since: they can no longer be undone here.
    lost: bool,
    active_bytes: usize,
    undo: Vec<Undo>,
    /// The keys and replaced values the undo log names, one after the other.
    bytes: Vec<u8>,
}

/// One write of the undo log: its key and what `active` held for it before.
#[derive(Debug)]
struct Undo {
    key: Range<usize>,
    before: Before,
}

/// What `active` held for a key before a write.
#[derive(Debug)]
enum Before {
    /// Nothing: the key was read from the commit in flight or the store.
    Absent,
    /// A buffered delete.
    Deleted,
    /// A buffered put of these bytes.
    Put(Range<usize>),
}

impl Savepoint {
    /// Records that a write of `key` replaces `before` in `active`.
    fn record(&mut self, key: &[u8], before: Option<Option<&[u8]>>) {
        let key = self.copy(key);
        let before = match before {
            None => Before::Absent,
            Some(None) => Before::Deleted,
            Some(Some(value)) => Before::Put(self.copy(value)),
        };
        self.undo.push(Undo { key, before });
    }

    fn copy(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        start..self.bytes.len()
    }

    /// Starts again at `active_bytes`, keeping the buffers' capacity.
    fn reset(&mut self, active_bytes: usize) {
        self.lost = false;
        self.active_bytes = active_bytes;
        self.undo.clear();
        self.bytes.clear();
    }
}

impl WriteBuffer {
    /// The buffered state of `key`: `None` when the buffer says nothing about it,
    /// `Some(None)` for a buffered delete, `Some(Some(value))` for a buffered put.
    pub(super) fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        if let Some(value) = self.active.get(key) {
            return Some(value.as_deref());
        }
        let frozen = self.committing.as_deref()?;
        let at = frozen.binary_search_by(|op| op.key().cmp(key)).ok()?;
        Some(frozen[at].value())
    }

    /// Buffers a put (`Some`) or a delete (`None`) of `key`, replacing any buffered write.
    pub(super) fn insert(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        if let Some(savepoint) = self.savepoint.as_mut().filter(|s| !s.lost) {
            savepoint.record(&key, self.active.get(&key).map(Option::as_deref));
        }
        let key_len = key.len();
        self.active_bytes += entry_bytes(key_len, value.as_deref());
        if let Some(old) = self.active.insert(key, value) {
            self.active_bytes -= entry_bytes(key_len, old.as_deref());
        }
    }

    /// Buffers a put (`Some`) or a delete (`None`) of `key`, as [`insert`](Self::insert),
    /// copying from borrowed bytes. A value already buffered for the key is overwritten in
    /// its own allocation when the new one fits, so rewriting a hot key allocates nothing;
    /// only a key new to the buffer is copied (and the map searched a second time).
    pub(super) fn insert_copy(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.active_bytes += entry_bytes(key.len(), value);
        let slot = self.active.get_mut(key);
        if let Some(savepoint) = self.savepoint.as_mut().filter(|s| !s.lost) {
            savepoint.record(key, slot.as_ref().map(|slot| slot.as_deref()));
        }
        let Some(slot) = slot else {
            self.active.insert(key.to_vec(), value.map(<[u8]>::to_vec));
            return;
        };
        self.active_bytes -= entry_bytes(key.len(), slot.as_deref());
        match (slot, value) {
            (Some(old), Some(value)) => {
                old.clear();
                old.extend_from_slice(value);
            }
            (slot, value) => *slot = value.map(<[u8]>::to_vec),
        }
    }

    /// Sets a savepoint here, replacing any set before: [`roll_back`](Self::roll_back) then
    /// undoes the writes made after it. A commit (a [`freeze`](Self::freeze)) removes it.
    pub(super) fn savepoint(&mut self) {
        let active_bytes = self.active_bytes;
        self.savepoint
            .get_or_insert_with(Savepoint::default)
            .reset(active_bytes);
    }

    /// Undoes every write made since the savepoint, which stays set there. Returns whether
    /// there was one to undo, `None` when no savepoint is set (none was, or a commit removed
    /// it, and the writes since may be in the store).
    pub(super) fn roll_back(&mut self) -> Option<bool> {
        let mut savepoint = self.savepoint.take()?;
        if savepoint.lost {
            self.savepoint = Some(savepoint);
            return None;
        }
        let undone = !savepoint.undo.is_empty();
        for Undo { key, before } in savepoint.undo.drain(..).rev() {
            let key = &savepoint.bytes[key];
            match before {
                Before::Absent => {
                    self.active.remove(key);
                }
                Before::Deleted => {
                    self.active.insert(key.to_vec(), None);
                }
                Before::Put(value) => {
                    let value = savepoint.bytes[value].to_vec();
                    self.active.insert(key.to_vec(), Some(value));
                }
            }
        }
        self.active_bytes = savepoint.active_bytes;
        savepoint.bytes.clear();
        self.savepoint = Some(savepoint);
        Some(undone)
    }

    /// The bytes charged by the writes not yet handed to a commit.
    pub(super) fn active_bytes(&self) -> usize {
        self.active_bytes
    }

    /// The number of buffered puts (an overcount of new keys: some may replace stored ones).
    pub(super) fn buffered_puts(&self) -> usize {
        let active = self.active.values().filter(|value| value.is_some()).count();
        let frozen = self.committing.as_deref().map_or(0, |frozen| {
            frozen.iter().filter(|op| op.value().is_some()).count()
        });
        active + frozen
    }

    /// Hands the active writes to a commit: they move to `committing` and stay readable.
    /// `None` when there is nothing to commit.
    pub(super) fn freeze(&mut self) -> Option<Arc<Frozen>> {
        if self.active.is_empty() {
            return None;
        }
        let frozen: Frozen = std::mem::take(&mut self.active)
            .into_iter()
            .map(|(key, value)| match value {
                Some(value) => BatchOp::Put { key, value },
                None => BatchOp::Delete { key },
            })
            .collect();
        let frozen = Arc::new(frozen);
        self.active_bytes = 0;
        // The writes the savepoint would undo are leaving the buffer.
        if let Some(savepoint) = &mut self.savepoint {
            savepoint.reset(0);
            savepoint.lost = true;
        }
        self.committing = Some(Arc::clone(&frozen));
        Some(frozen)
    }

    /// Ends the commit in flight. After a success the store holds its writes, so they leave
    /// the buffer; after a failure they return to `active`, under any newer write of the same
    /// key, so the next commit persists them.
    pub(super) fn finish_commit(&mut self, committed: bool) {
        let Some(frozen) = self.committing.take() else {
            return;
        };
        if committed {
            return;
        }
        let ops = Arc::try_unwrap(frozen).unwrap_or_else(|shared| (*shared).clone());
        for op in ops {
            let (key, value) = match op {
                BatchOp::Put { key, value } => (key, Some(value)),
                BatchOp::Delete { key } => (key, None),
            };
            if !self.active.contains_key(&key) {
                self.insert(key, value);
            }
        }
    }

    /// A copy of the buffered writes between `from` and `to`, newest state per key, in
    /// ascending key order (descending if `reverse`). The caller has ruled out an empty
    /// interval, which `BTreeMap::range` would panic on.
    pub(super) fn snapshot(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut merged: Entries = self
            .committing
            .as_deref()
            .map(|frozen| {
                let start = frozen.partition_point(|op| !after_start(op.key(), from));
                let end = frozen.partition_point(|op| !past_end(op.key(), to));
                let in_range = frozen.get(start..end.max(start)).unwrap_or_default();
                in_range
                    .iter()
                    .map(|op| (op.key().to_vec(), op.value().map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        let active = self.active.range::<[u8], _>((from, to));
        merged.extend(active.map(|(key, value)| (key.clone(), value.clone())));
        let mut entries: Vec<_> = merged.into_iter().collect();
        if reverse {
            entries.reverse();
        }
        entries
    }
}

/// True when `key` is at or after the lower bound `from`.
fn after_start(key: &[u8], from: Bound<&[u8]>) -> bool {
    match from {
        Bound::Included(start) => key >= start,
        Bound::Excluded(start) => key > start,
        Bound::Unbounded => true,
    }
}

/// True when `key` is beyond the upper bound `to`.
fn past_end(key: &[u8], to: Bound<&[u8]>) -> bool {
    match to {
        Bound::Included(end) => key > end,
        Bound::Excluded(end) => key >= end,
        Bound::Unbounded => false,
    }
}

/// What one entry is charged against the commit threshold.
fn entry_bytes(key_len: usize, value: Option<&[u8]>) -> usize {
    key_len + value.map_or(0, <[u8]>::len) + ENTRY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_an_entry_recharges_it() {
        let mut buffer = WriteBuffer::default();
        buffer.insert(b"k".to_vec(), Some(vec![0; 100]));
        buffer.insert(b"k".to_vec(), Some(vec![0; 10]));
        assert_eq!(buffer.active_bytes(), 1 + 10 + ENTRY_OVERHEAD);
        buffer.insert(b"k".to_vec(), None);
        assert_eq!(buffer.active_bytes(), 1 + ENTRY_OVERHEAD);
    }

    #[test]
    fn copying_insert_replaces_and_recharges() {
        let mut buffer = WriteBuffer::default();
        buffer.insert_copy(b"k", Some(&[1; 100]));
        buffer.insert_copy(b"k", Some(&[2; 10]));
        assert_eq!(buffer.lookup(b"k"), Some(Some(&[2; 10][..])));
        assert_eq!(buffer.active_bytes(), 1 + 10 + ENTRY_OVERHEAD);
        buffer.insert_copy(b"k", None);
        assert_eq!(buffer.lookup(b"k"), Some(None));
        assert_eq!(buffer.active_bytes(), 1 + ENTRY_OVERHEAD);
        buffer.insert_copy(b"k", Some(b"back"));
        assert_eq!(buffer.lookup(b"k"), Some(Some(&b"back"[..])));
        assert_eq!(buffer.active_bytes(), 1 + 4 + ENTRY_OVERHEAD);
        assert_eq!(buffer.active.len(), 1);
    }

    #[test]
    fn failed_commit_returns_writes_under_newer_ones() {
        let mut buffer = WriteBuffer::default();
        buffer.insert(b"a".to_vec(), Some(b"1".to_vec()));
        buffer.insert(b"b".to_vec(), Some(b"1".to_vec()));
        let frozen = buffer.freeze().expect("something to commit");
        assert_eq!(buffer.active_bytes(), 0);
        assert_eq!(buffer.lookup(b"a"), Some(Some(&b"1"[..])));
        buffer.insert(b"a".to_vec(), None);
        drop(frozen);
        buffer.finish_commit(false);
        assert_eq!(buffer.lookup(b"a"), Some(None));
        assert_eq!(buffer.lookup(b"b"), Some(Some(&b"1"[..])));
        assert!(buffer.committing.is_none());
        assert_eq!(buffer.active.len(), 2);
    }

    #[test]
    fn rolling_back_undoes_every_write_since_the_savepoint() {
        let mut buffer = WriteBuffer::default();
        buffer.insert(b"kept".to_vec(), Some(b"1".to_vec()));
        buffer.insert(b"deleted".to_vec(), None);
        buffer.insert(b"frozen".to_vec(), Some(b"old".to_vec()));
        let _frozen = buffer.freeze();
        buffer.insert_copy(b"kept", Some(b"2"));
        buffer.insert(b"deleted".to_vec(), None);
        let before = (buffer.active.clone(), buffer.active_bytes());
        buffer.savepoint();
        buffer.insert_copy(b"kept", Some(b"3"));
        buffer.insert_copy(b"kept", Some(b"a longer value"));
        buffer.insert_copy(b"deleted", Some(b"back"));
        buffer.insert(b"frozen".to_vec(), None);
        buffer.insert_copy(b"new", Some(b"x"));
        buffer.insert(b"new".to_vec(), None);
        assert_eq!(buffer.roll_back(), Some(true));
        assert_eq!((buffer.active.clone(), buffer.active_bytes()), before);
        assert_eq!(buffer.lookup(b"frozen"), Some(Some(&b"old"[..])));
        assert_eq!(buffer.lookup(b"new"), None);
        // The savepoint stays where it was; with nothing written since, nothing is undone.
        assert_eq!(buffer.roll_back(), Some(false));
        buffer.insert_copy(b"kept", Some(b"4"));
        buffer.savepoint();
        assert_eq!(buffer.roll_back(), Some(false));
        assert_eq!(buffer.lookup(b"kept"), Some(Some(&b"4"[..])));
    }

    #[test]
    fn a_commit_removes_the_savepoint() {
        let mut buffer = WriteBuffer::default();
        assert_eq!(buffer.roll_back(), None, "no savepoint set");
        buffer.savepoint();
        buffer.insert_copy(b"a", Some(b"1"));
        let _frozen = buffer.freeze();
        buffer.insert_copy(b"b", Some(b"1"));
        assert_eq!(buffer.roll_back(), None, "the commit took the write of a");
        assert_eq!(buffer.lookup(b"b"), Some(Some(&b"1"[..])));
    }

    #[test]
    fn snapshot_prefers_active_writes() {
        let mut buffer = WriteBuffer::default();
        buffer.insert(b"a".to_vec(), Some(b"old".to_vec()));
        buffer.insert(b"c".to_vec(), Some(b"old".to_vec()));
        let _frozen = buffer.freeze();
        buffer.insert(b"a".to_vec(), Some(b"new".to_vec()));
        buffer.insert(b"b".to_vec(), None);
        let all = buffer.snapshot(Bound::Unbounded, Bound::Unbounded, true);
        let expected = vec![
            (b"c".to_vec(), Some(b"old".to_vec())),
            (b"b".to_vec(), None),
            (b"a".to_vec(), Some(b"new".to_vec())),
        ];
        assert_eq!(all, expected);
    }
}
