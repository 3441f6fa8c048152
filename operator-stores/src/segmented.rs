//! What the window and session stores share: an underlying store cut into time segments, a
//! stream time behind the write lock that expires whole segments as it moves, counts of
//! refused writes, and scans of one range per live segment.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};
use store_api::{KeyValueStore, KvIter, KvPair, Result, WriteBatch};

use crate::layout::{META_KEY, Segments, encode_ts, push_key, read_stream_time, segment_prefix};

/// How many writes a store refused since it was opened, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Puts of windows older than the retention.
    pub expired: u64,
    /// Records whose windows had all closed (see [`WindowStore::aggregate`](crate::window::WindowStore::aggregate)).
    pub late: u64,
}

/// Mutable state, behind one lock so that writes are serialized.
#[derive(Debug)]
pub(crate) struct WriteState {
    /// The latest time written, `i64::MIN` before the first.
    pub(crate) stream_time: i64,
    /// No entry lives in a segment below this one.
    cleaned_below: i64,
    /// The first live segment after the last advance, while the segments below it, from
    /// `cleaned_below`, are still to be removed by [`SegmentedStore::write`].
    expire_below: Option<i64>,
}

/// A segmented store's bookkeeping over its underlying store.
#[derive(Debug)]
pub(crate) struct SegmentedStore {
    pub(crate) store: Arc<dyn KeyValueStore>,
    pub(crate) segments: Segments,
    state: Mutex<WriteState>,
    expired: AtomicU64,
    late: AtomicU64,
}

impl SegmentedStore {
    /// Checks the configuration and reads the persisted stream time back from `store`.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad retention or interval, or a store error.
    pub(crate) fn open(
        store: Arc<dyn KeyValueStore>,
        retention: i64,
        interval: i64,
    ) -> Result<Self> {
        let segments = Segments::new(retention, interval)?;
        let stream_time = read_stream_time(store.as_ref())?;
        Ok(SegmentedStore {
            store,
            segments,
            state: Mutex::new(WriteState {
                stream_time,
                cleaned_below: i64::MIN,
                expire_below: None,
            }),
            expired: AtomicU64::new(0),
            late: AtomicU64::new(0),
        })
    }

    /// Takes the write lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, WriteState> {
        self.state.lock()
    }

    /// The stream time now, `i64::MIN` before the first write.
    pub(crate) fn now(&self) -> i64 {
        self.state.lock().stream_time
    }

    /// The stream time, `None` before the first write.
    pub(crate) fn stream_time(&self) -> Option<i64> {
        let time = self.now();
        (time != i64::MIN).then_some(time)
    }

    /// The writes refused since the store was opened.
    pub(crate) fn dropped(&self) -> DropCounts {
        DropCounts {
            expired: self.expired.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_late(&self) {
        self.late.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves the stream time to `to`, persisting it into `batch`, and marks the segments it
    /// leaves behind for [`write`](Self::write) to remove.
    pub(crate) fn advance(&self, state: &mut WriteState, batch: &mut WriteBatch, to: i64) {
        state.stream_time = to;
        batch.put(META_KEY.to_vec(), encode_ts(to).to_vec());
        let first_live = self.segments.first_live(to);
        if first_live > state.cleaned_below {
            state.expire_below = Some(first_live);
        }
    }

    /// Writes `batch` (atomically), then removes the segments the stream time left behind,
    /// with one range deletion of the underlying store.
    ///
    /// The removal follows the batch, not inside it: the store API has no range deletion in
    /// a batch, and removing the segments first could lose live data if the process died
    /// before the batch persisted the stream time that expires them. A crash between the two
    /// leaves expired entries that no read returns (reads skip expired windows and sessions);
    /// a store opened again starts with nothing known to be cleaned, so its first advance
    /// removes them.
    ///
    /// # Errors
    /// A store error. When the removal fails, it is retried by the next write.
    pub(crate) fn write(&self, state: &mut WriteState, batch: WriteBatch) -> Result<()> {
        self.store.write(batch)?;
        if let Some(first_live) = state.expire_below {
            self.segments
                .expire(self.store.as_ref(), state.cleaned_below, first_live)?;
            state.cleaned_below = first_live;
            state.expire_below = None;
        }
        Ok(())
    }

    /// Chains one range per segment live at `stream_time` that overlaps `[from, to]`, oldest
    /// first (newest first and each range backward when `backward`). `bounds(segment, first,
    /// last)` gives a segment's range from the first and last timestamps it covers.
    pub(crate) fn scan(
        &self,
        stream_time: i64,
        (from, to): (i64, i64),
        backward: bool,
        mut bounds: impl FnMut(i64, i64, i64) -> KeyRange,
    ) -> SegmentedIter {
        let interval = self.segments.interval;
        let mut ranges: Vec<KeyRange> = self
            .segments
            .live_overlapping(stream_time, from, to)
            .into_iter()
            .map(|segment| {
                let first = segment.saturating_mul(interval);
                bounds(segment, first, first.saturating_add(interval - 1))
            })
            .collect();
        if backward {
            ranges.reverse();
        }
        SegmentedIter {
            store: Arc::clone(&self.store),
            ranges: ranges.into_iter(),
            backward,
            current: None,
            failed: false,
        }
    }
}

/// The bounds of one range over the underlying store.
pub(crate) type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Inclusive bounds of a key range, `None` for no bound (Kafka Streams' `null`).
pub(crate) type KeyBounds<'k> = (Option<&'k [u8]>, Option<&'k [u8]>);

/// The range over the underlying store of the entries of keys within `key_from..=key_to` in
/// `segment`, where every entry key is `segment prefix | escaped key | suffix_len bytes`.
pub(crate) fn key_range_bounds(
    segment: i64,
    key_from: Option<&[u8]>,
    key_to: Option<&[u8]>,
    suffix_len: usize,
) -> KeyRange {
    let prefix = segment_prefix(segment);
    let (segment_low, segment_high) = store_api::bounds::prefix_bounds(&prefix);
    let low = key_from.map_or(segment_low, |key| {
        let mut low = prefix.to_vec();
        push_key(&mut low, key);
        Bound::Included(low)
    });
    // An escaped key is never a prefix of another, so the greatest entry of `key_to` (all
    // 0xFF after it) is below every entry of a greater key.
    let high = key_to.map_or(segment_high, |key| {
        let mut high = prefix.to_vec();
        push_key(&mut high, key);
        high.resize(high.len() + suffix_len, 0xFF);
        Bound::Included(high)
    });
    (low, high)
}

/// Chains one range per segment, opening each only when the previous one is exhausted; an
/// error ends the iteration.
pub(crate) struct SegmentedIter {
    store: Arc<dyn KeyValueStore>,
    ranges: std::vec::IntoIter<KeyRange>,
    backward: bool,
    current: Option<KvIter>,
    failed: bool,
}

impl Iterator for SegmentedIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            if let Some(current) = &mut self.current {
                match current.next() {
                    Some(Err(err)) => {
                        self.failed = true;
                        return Some(Err(err));
                    }
                    Some(ok) => return Some(ok),
                    None => self.current = None,
                }
            }
            let (from, to) = self.ranges.next()?;
            let (from, to) = (
                from.as_ref().map(Vec::as_slice),
                to.as_ref().map(Vec::as_slice),
            );
            let opened = if self.backward {
                self.store.reverse_range(from, to)
            } else {
                self.store.range(from, to)
            };
            match opened {
                Ok(iter) => self.current = Some(iter),
                Err(err) => {
                    self.failed = true;
                    return Some(Err(err));
                }
            }
        }
    }
}
