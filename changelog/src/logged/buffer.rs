//! The write buffer of a [`LoggedStore`](super::LoggedStore): the writes since the last commit.

use std::collections::BTreeMap;
use std::ops::Bound;
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
        let Some(slot) = self.active.get_mut(key) else {
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
