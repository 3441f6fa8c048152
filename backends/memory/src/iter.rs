//! Iterators that walk the live map in short locked stretches instead of copying the range.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use store_api::bounds::{OwnedBound, as_ref_bound, range_is_empty};
use store_api::{Error, KvPair, Result};

use crate::Shared;

/// The first refill copies this many entries; each later one doubles, up to the configured max.
const FIRST_BATCH: usize = 16;

/// A cursor over a key range of the shared map.
///
/// Each refill takes the read lock, copies the next few entries after the last key returned,
/// and releases the lock. So the iterator sees every write completed before it was created,
/// may see later ones, and yields each key at most once in strictly ascending (or descending)
/// order, because it always resumes strictly after the last key it returned.
pub(crate) struct MemoryIter {
    shared: Arc<Shared>,
    from: OwnedBound,
    to: OwnedBound,
    reverse: bool,
    batch: usize,
    max_batch: usize,
    buffer: VecDeque<KvPair>,
    exhausted: bool,
}

impl MemoryIter {
    pub(crate) fn new(
        shared: Arc<Shared>,
        from: OwnedBound,
        to: OwnedBound,
        reverse: bool,
    ) -> Self {
        let max_batch = shared.config.iterator_batch.max(1);
        MemoryIter {
            shared,
            from,
            to,
            reverse,
            batch: FIRST_BATCH.min(max_batch),
            max_batch,
            buffer: VecDeque::new(),
            exhausted: false,
        }
    }

    fn refill(&mut self) -> Result<()> {
        if self.shared.is_closed() {
            return Err(Error::Closed);
        }
        if range_is_empty(as_ref_bound(&self.from), as_ref_bound(&self.to)) {
            self.exhausted = true;
            return Ok(());
        }
        let map = self.shared.map.read();
        copy_batch(
            &map,
            (&self.from, &self.to),
            self.reverse,
            self.batch,
            &mut self.buffer,
        );
        drop(map);
        if self.buffer.len() < self.batch {
            self.exhausted = true;
        }
        if let Some((last, _)) = self.buffer.back() {
            let resume = Bound::Excluded(last.clone());
            if self.reverse {
                self.to = resume;
            } else {
                self.from = resume;
            }
        }
        self.batch = (self.batch * 2).min(self.max_batch);
        Ok(())
    }
}

fn copy_batch(
    map: &BTreeMap<Vec<u8>, Vec<u8>>,
    (from, to): (&OwnedBound, &OwnedBound),
    reverse: bool,
    count: usize,
    out: &mut VecDeque<KvPair>,
) {
    let range = map.range::<[u8], _>((as_ref_bound(from), as_ref_bound(to)));
    let copy = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
    if reverse {
        out.extend(range.rev().take(count).map(copy));
    } else {
        out.extend(range.take(count).map(copy));
    }
}

impl Iterator for MemoryIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buffer.is_empty()
            && !self.exhausted
            && let Err(err) = self.refill()
        {
            self.exhausted = true;
            return Some(Err(err));
        }
        self.buffer.pop_front().map(Ok)
    }
}
