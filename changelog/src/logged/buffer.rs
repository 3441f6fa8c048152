//! The write buffer of a [`LoggedStore`](super::LoggedStore): the writes since the last commit.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// Buffered writes: key to its latest value, `None` for a delete.
pub(super) type Entries = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

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
    committing: Option<Arc<Entries>>,
}

impl WriteBuffer {
    /// The buffered state of `key`: `None` when the buffer says nothing about it,
    /// `Some(None)` for a buffered delete, `Some(Some(value))` for a buffered put.
    pub(super) fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.active
            .get(key)
            .or_else(|| {
                self.committing
                    .as_ref()
                    .and_then(|entries| entries.get(key))
            })
            .map(Option::as_deref)
    }

    /// Buffers a put (`Some`) or a delete (`None`) of `key`, replacing any buffered write.
    pub(super) fn insert(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        let key_len = key.len();
        self.active_bytes += entry_bytes(key_len, value.as_deref());
        if let Some(old) = self.active.insert(key, value) {
            self.active_bytes -= entry_bytes(key_len, old.as_deref());
        }
    }

    /// The bytes charged by the writes not yet handed to a commit.
    pub(super) fn active_bytes(&self) -> usize {
        self.active_bytes
    }

    /// The number of buffered puts (an overcount of new keys: some may replace stored ones).
    pub(super) fn buffered_puts(&self) -> usize {
        let puts = |entries: &Entries| entries.values().filter(|value| value.is_some()).count();
        puts(&self.active) + self.committing.as_deref().map_or(0, puts)
    }

    /// Hands the active writes to a commit: they move to `committing` and stay readable.
    /// `None` when there is nothing to commit.
    pub(super) fn freeze(&mut self) -> Option<Arc<Entries>> {
        if self.active.is_empty() {
            return None;
        }
        let frozen = Arc::new(std::mem::take(&mut self.active));
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
        let entries = Arc::try_unwrap(frozen).unwrap_or_else(|shared| (*shared).clone());
        for (key, value) in entries {
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
        let copy = |entries: &Entries| -> Entries {
            entries
                .range::<[u8], _>((from, to))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect()
        };
        let mut merged = self.committing.as_deref().map(copy).unwrap_or_default();
        merged.extend(copy(&self.active));
        let mut entries: Vec<_> = merged.into_iter().collect();
        if reverse {
            entries.reverse();
        }
        entries
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
