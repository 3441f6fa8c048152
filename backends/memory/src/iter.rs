//! Iterators that walk the live map in short locked stretches instead of copying the range.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ops::{Bound, ControlFlow, Deref, DerefMut, Range};
use std::sync::Arc;

use store_api::bounds::range_is_empty;
use store_api::{Error, KvPair, PairVisitor, Result};

use crate::key::Key;
use crate::{Bytes, Map, Shared};

/// The first refill takes this many entries; each later one doubles, up to the configured max.
pub(crate) const FIRST_BATCH: usize = 16;

/// A cursor over a key range of the shared map.
///
/// Each refill takes the read lock, takes the next few entries after the last key it took
/// (short keys copied, values and long keys by reference count), and releases the lock; the
/// values' bytes are copied only when `next` yields them. So the iterator sees every write completed before it was created, may see later
/// ones, and yields each key at most once in strictly ascending (or descending) order, because
/// it always resumes strictly after the last key it took. Entries it holds stay as they were
/// when taken, even if the map has since replaced or removed them.
pub(crate) struct MemoryIter {
    shared: Arc<Shared>,
    from: Bound<Key>,
    to: Bound<Key>,
    reverse: bool,
    batch: usize,
    max_batch: usize,
    buffer: VecDeque<(Key, Bytes)>,
    exhausted: bool,
}

impl MemoryIter {
    pub(crate) fn new(
        shared: Arc<Shared>,
        from: Bound<Key>,
        to: Bound<Key>,
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
        if range_is_empty(
            self.from.as_ref().map(Key::as_slice),
            self.to.as_ref().map(Key::as_slice),
        ) {
            self.exhausted = true;
            return Ok(());
        }
        self.buffer.reserve(self.batch);
        let map = self.shared.map.read();
        take_batch(
            &map,
            (self.from.as_ref(), self.to.as_ref()),
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

/// Appends to `out` the first `count` entries of the range, in iteration order: the keys
/// copied (a long key by reference count), the values by reference count. The range must not
/// be empty (`BTreeMap::range` panics on an inverted one). A map range does not know its
/// length, so the caller reserves `count` first.
pub(crate) fn take_batch(
    map: &Map,
    (from, to): (Bound<&Key>, Bound<&Key>),
    reverse: bool,
    count: usize,
    out: &mut impl Extend<(Key, Bytes)>,
) {
    let range = map.range::<Key, _>((from, to));
    let share = |(k, v): (&Key, &Bytes)| (k.clone(), Arc::clone(v));
    if reverse {
        warm(range.clone().rev().take(count));
        out.extend(range.rev().take(count).map(share));
    } else {
        warm(range.clone().take(count));
        out.extend(range.take(count).map(share));
    }
}

/// Reads the reference count of every value about to be shared. Values lie wherever they were
/// allocated, so in a large map each count is a cache miss; plain loads of them overlap, but
/// the locked increment of `Arc::clone` waits for its miss before the next one starts. Loading
/// them all first took a fifth to a quarter off scans of 10 and 100 pairs of a 1M-entry map.
fn warm<'m>(entries: impl Iterator<Item = (&'m Key, &'m Bytes)>) {
    let counts = entries.fold(0, |sum: usize, (_, value)| {
        sum.wrapping_add(Arc::strong_count(value))
    });
    std::hint::black_box(counts);
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

/// Values of up to this many bytes a scan copies while it holds the read lock; longer ones it
/// shares by reference count. Sharing costs a locked increment and decrement of a count that
/// lies wherever the value was allocated, which in a large map is a cache miss the next
/// increment waits for; a short copy costs less and its loads overlap. Past a few hundred
/// bytes the copy costs more than the count.
pub(crate) const SCAN_COPY_MAX: usize = 256;

/// One stretch of a [`scan`](crate::MemoryStore): the entries taken under the read lock, for
/// the visitor to see after it is released. Keys are copied as [`Key`]s (short keys inline),
/// short values into one buffer reused from stretch to stretch, long values by reference
/// count.
#[derive(Default)]
pub(crate) struct ScanBatch {
    copied: Vec<u8>,
    entries: Vec<(Key, Held)>,
}

thread_local! {
    /// The buffers of this thread's last scan, kept for its next one. A short scan then
    /// allocates nothing: for 10-entry scans the allocations and the regrowth of the value
    /// buffer were a fifth of the time the copying added.
    static SPARE: Cell<Option<ScanBatch>> = const { Cell::new(None) };
}

/// A [`ScanBatch`] on loan from this thread's spare, returned (emptied) when dropped. A scan
/// nested in another's visitor finds no spare and allocates its own.
pub(crate) struct SpareBatch(ScanBatch);

/// Buffers larger than this are freed rather than kept for the thread's next scan.
const SPARE_MAX_BYTES: usize = 256 << 10;

impl SpareBatch {
    /// The thread's spare batch, or a new one.
    pub(crate) fn take() -> SpareBatch {
        SpareBatch(
            SPARE
                .try_with(Cell::take)
                .ok()
                .flatten()
                .unwrap_or_default(),
        )
    }
}

impl Deref for SpareBatch {
    type Target = ScanBatch;

    fn deref(&self) -> &ScanBatch {
        &self.0
    }
}

impl DerefMut for SpareBatch {
    fn deref_mut(&mut self) -> &mut ScanBatch {
        &mut self.0
    }
}

impl Drop for SpareBatch {
    fn drop(&mut self) {
        let mut batch = std::mem::take(&mut self.0);
        // Shared values and long keys are released now, not when the next scan reuses it.
        batch.entries.clear();
        batch.copied.clear();
        let bytes =
            batch.copied.capacity() + batch.entries.capacity() * std::mem::size_of::<(Key, Held)>();
        if bytes <= SPARE_MAX_BYTES {
            // Thread teardown may have destroyed the slot already; the batch is then freed.
            let _ = SPARE.try_with(|spare| spare.set(Some(batch)));
        }
    }
}

/// A value a [`ScanBatch`] holds.
enum Held {
    /// Its bytes, at this range of the batch's buffer.
    Copied(Range<usize>),
    /// The value itself, shared.
    Shared(Bytes),
}

impl ScanBatch {
    /// Replaces the batch with the first `count` entries of the range, in iteration order.
    /// The range must not be empty (`BTreeMap::range` panics on an inverted one).
    pub(crate) fn take(
        &mut self,
        map: &Map,
        (from, to): (Bound<&Key>, Bound<&Key>),
        reverse: bool,
        count: usize,
    ) {
        self.copied.clear();
        self.entries.clear();
        self.entries.reserve(count);
        let range = map.range::<Key, _>((from, to));
        let mut hold = |(key, value): (&Key, &Bytes)| {
            let held = if value.len() <= SCAN_COPY_MAX {
                let start = self.copied.len();
                self.copied.extend_from_slice(value);
                Held::Copied(start..self.copied.len())
            } else {
                Held::Shared(Arc::clone(value))
            };
            self.entries.push((key.clone(), held));
        };
        if reverse {
            range.rev().take(count).for_each(&mut hold);
        } else {
            range.take(count).for_each(&mut hold);
        }
    }

    /// How many entries the last [`take`](ScanBatch::take) took.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The last key taken: the next stretch resumes strictly after it.
    pub(crate) fn last_key(&self) -> Option<&Key> {
        self.entries.last().map(|(key, _)| key)
    }

    /// Lends each entry to `f` in order; `Break` as soon as `f` returns it.
    pub(crate) fn visit(&self, f: &mut PairVisitor<'_>) -> ControlFlow<()> {
        for (key, held) in &self.entries {
            let value = match held {
                Held::Copied(at) => self.copied.get(at.clone()).unwrap_or_default(),
                Held::Shared(value) => value,
            };
            f(key.as_slice(), value)?;
        }
        ControlFlow::Continue(())
    }
}
