//! Iterators that walk the live map in short locked stretches instead of copying the range.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use store_api::bounds::range_is_empty;
use store_api::{Error, KvPair, Result};

use crate::{Bytes, Map, Shared};

/// The first refill takes this many entries; each later one doubles, up to the configured max.
pub(crate) const FIRST_BATCH: usize = 16;

/// A cursor over a key range of the shared map.
///
/// Each refill takes the read lock, takes references to the next few entries after the last
/// key it took, and releases the lock; the bytes of an entry are copied only when `next`
/// yields it. So the iterator sees every write completed before it was created, may see later
/// ones, and yields each key at most once in strictly ascending (or descending) order, because
/// it always resumes strictly after the last key it took. Entries it holds stay as they were
/// when taken, even if the map has since replaced or removed them.
pub(crate) struct MemoryIter {
    shared: Arc<Shared>,
    from: Bound<Bytes>,
    to: Bound<Bytes>,
    reverse: bool,
    batch: usize,
    max_batch: usize,
    buffer: VecDeque<(Bytes, Bytes)>,
    exhausted: bool,
}

impl MemoryIter {
    pub(crate) fn new(
        shared: Arc<Shared>,
        from: Bound<Bytes>,
        to: Bound<Bytes>,
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
        if range_is_empty(borrow(&self.from), borrow(&self.to)) {
            self.exhausted = true;
            return Ok(());
        }
        self.buffer.reserve(self.batch);
        let map = self.shared.map.read();
        take_batch(
            &map,
            (borrow(&self.from), borrow(&self.to)),
            self.reverse,
            self.batch,
            &mut self.buffer,
        );
        drop(map);
        if self.buffer.len() < self.batch {
            self.exhausted = true;
        }
        if let Some((last, _)) = self.buffer.back() {
            let resume = Bound::Excluded(Arc::clone(last));
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

fn borrow(bound: &Bound<Bytes>) -> Bound<&[u8]> {
    bound.as_ref().map(|key| &**key)
}

/// Appends to `out` references to the first `count` entries of the range, in iteration order.
/// The range must not be empty (`BTreeMap::range` panics on an inverted one). A map range
/// does not know its length, so the caller reserves `count` first.
pub(crate) fn take_batch(
    map: &Map,
    (from, to): (Bound<&[u8]>, Bound<&[u8]>),
    reverse: bool,
    count: usize,
    out: &mut impl Extend<(Bytes, Bytes)>,
) {
    let range = map.range::<[u8], _>((from, to));
    let share = |(k, v): (&Bytes, &Bytes)| (Arc::clone(k), Arc::clone(v));
    if reverse {
        out.extend(range.rev().take(count).map(share));
    } else {
        out.extend(range.take(count).map(share));
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
        self.buffer
            .pop_front()
            .map(|(key, value)| Ok((key.to_vec(), value.to_vec())))
    }
}
