//! The iterator of a [`LoggedStore`](super::LoggedStore) range: buffered writes merged over
//! the store's own iterator.

use std::cmp::Ordering;
use std::iter::Peekable;
use std::ops::ControlFlow;

use store_api::{KvIter, KvPair, PairVisitor, Result};

/// A buffered entry: `None` is a delete that hides the store's value.
pub(super) type BufferedEntry = (Vec<u8>, Option<Vec<u8>>);

/// Merges a snapshot of buffered writes with a store iterator over the same interval and
/// direction. Where both hold a key the buffer wins; a buffered delete hides the store's key.
pub(super) struct MergeIter {
    buffered: Peekable<std::vec::IntoIter<BufferedEntry>>,
    /// `None` once the store iterator failed: an `Err` item ends the iteration.
    store: Option<Peekable<KvIter>>,
    reverse: bool,
}

/// Which side holds the next key.
enum Next {
    Buffer,
    Store,
    /// Both hold the same key: the store's copy is stale.
    Both,
    StoreError,
    Done,
}

impl MergeIter {
    /// `buffered` must be sorted in the iteration direction (descending if `reverse`).
    pub(super) fn new(buffered: Vec<BufferedEntry>, store: KvIter, reverse: bool) -> Self {
        MergeIter {
            buffered: buffered.into_iter().peekable(),
            store: Some(store.peekable()),
            reverse,
        }
    }

    fn next_source(&mut self) -> Next {
        let store_key = match self.store.as_mut().and_then(Peekable::peek) {
            Some(Err(_)) => return Next::StoreError,
            Some(Ok((key, _))) => Some(key),
            None => None,
        };
        match (self.buffered.peek(), store_key) {
            (None, None) => Next::Done,
            (Some(_), None) => Next::Buffer,
            (None, Some(_)) => Next::Store,
            (Some((buffered, _)), Some(stored)) => {
                let order = buffered.cmp(stored);
                match if self.reverse { order.reverse() } else { order } {
                    Ordering::Less => Next::Buffer,
                    Ordering::Greater => Next::Store,
                    Ordering::Equal => Next::Both,
                }
            }
        }
    }
}

impl Iterator for MergeIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_source() {
                Next::Done => return None,
                Next::Store => return self.store.as_mut().and_then(Iterator::next),
                Next::StoreError => {
                    self.buffered = Vec::new().into_iter().peekable();
                    return self.store.take().and_then(|mut store| store.next());
                }
                Next::Both => {
                    self.store.as_mut().and_then(Iterator::next);
                }
                Next::Buffer => {}
            }
            if let Some((key, Some(value))) = self.buffered.next() {
                return Some(Ok((key, value)));
            }
        }
    }
}

/// The visitor side of a [`LoggedStore`](super::LoggedStore) scan: fed the store's pairs in
/// order, it lends `f` each buffered pair that comes first, then the store's pair unless the
/// buffer holds its key (a buffered put is lent in its place, a buffered delete hides it).
pub(super) struct MergeScan<'f, 'a> {
    buffered: Peekable<std::vec::IntoIter<BufferedEntry>>,
    reverse: bool,
    f: &'f mut PairVisitor<'a>,
    stopped: bool,
}

impl<'f, 'a> MergeScan<'f, 'a> {
    /// `buffered` must be sorted in the scan direction (descending if `reverse`).
    pub(super) fn new(
        buffered: Vec<BufferedEntry>,
        reverse: bool,
        f: &'f mut PairVisitor<'a>,
    ) -> Self {
        MergeScan {
            buffered: buffered.into_iter().peekable(),
            reverse,
            f,
            stopped: false,
        }
    }

    /// Lends the buffered pairs before `key`, then the one of `key` itself.
    pub(super) fn store_pair(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()> {
        while let Some((buffered, _)) = self.buffered.peek() {
            let order = buffered.as_slice().cmp(key);
            let order = if self.reverse { order.reverse() } else { order };
            if order == Ordering::Greater {
                break;
            }
            let Some((buffered, change)) = self.buffered.next() else {
                break;
            };
            if let Some(change) = change {
                self.lend(&buffered, &change)?;
            }
            if order == Ordering::Equal {
                return ControlFlow::Continue(());
            }
        }
        self.lend(key, value)
    }

    /// Lends the buffered pairs after the store's last one, unless `f` stopped the scan.
    pub(super) fn finish(mut self) {
        while !self.stopped
            && let Some((key, change)) = self.buffered.next()
        {
            if let Some(value) = change {
                let _ = self.lend(&key, &value);
            }
        }
    }

    fn lend(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()> {
        let flow = (self.f)(key, value);
        self.stopped = flow.is_break();
        flow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store_api::Error;

    fn store_iter(items: Vec<Result<KvPair>>) -> KvIter {
        Box::new(items.into_iter())
    }

    fn pair(key: &str, value: &str) -> KvPair {
        (key.as_bytes().to_vec(), value.as_bytes().to_vec())
    }

    #[test]
    fn buffer_wins_and_tombstones_hide() {
        let buffered = vec![
            (b"a".to_vec(), Some(b"A".to_vec())),
            (b"b".to_vec(), None),
            (b"d".to_vec(), Some(b"D".to_vec())),
        ];
        let store = store_iter(vec![
            Ok(pair("b", "x")),
            Ok(pair("c", "y")),
            Ok(pair("d", "z")),
        ]);
        let got: Vec<KvPair> = MergeIter::new(buffered, store, false)
            .collect::<Result<_>>()
            .expect("no error");
        assert_eq!(got, vec![pair("a", "A"), pair("c", "y"), pair("d", "D")]);
    }

    #[test]
    fn reverse_merge() {
        let buffered = vec![(b"c".to_vec(), None), (b"a".to_vec(), Some(b"A".to_vec()))];
        let store = store_iter(vec![Ok(pair("c", "x")), Ok(pair("b", "y"))]);
        let got: Vec<KvPair> = MergeIter::new(buffered, store, true)
            .collect::<Result<_>>()
            .expect("no error");
        assert_eq!(got, vec![pair("b", "y"), pair("a", "A")]);
    }

    #[test]
    fn a_store_error_ends_the_iteration() {
        let buffered = vec![(b"z".to_vec(), Some(b"Z".to_vec()))];
        let store = store_iter(vec![
            Ok(pair("a", "x")),
            Err(Error::Closed),
            Ok(pair("b", "y")),
        ]);
        let mut merged = MergeIter::new(buffered, store, false);
        assert_eq!(
            merged.next().map(|item| item.expect("ok")),
            Some(pair("a", "x"))
        );
        assert!(matches!(merged.next(), Some(Err(Error::Closed))));
        assert!(merged.next().is_none());
    }
}
