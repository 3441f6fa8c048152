//! [`WindowStore`]: values per (key, window start), kept for a retention period in time
//! segments, over any [`KeyValueStore`]; and [`TimeWindows`], tumbling and hopping windows.
//!
//! # Key layout
//! One entry per window in the underlying store:
//! ```text
//! 0x01 | segment (8) | key, escaped and terminated | window start (8) | sequence number (4)
//! ```
//! Timestamps and segment ids are big-endian with the sign bit flipped, so byte order is time
//! order; `segment = window_start.div_euclid(segment_interval)`. The key escapes `0x00` as
//! `0x00 0xFF` and ends with `0x00 0x00`, so keys keep their order and one key's entries never
//! interleave with another's. The sequence number is 0 unless the store
//! [retains duplicates](WindowStoreConfig::retain_duplicates). The empty key holds the
//! store's stream time, so it survives a restart: the latest window start written, by a
//! [put](WindowStore::put) or an [aggregation](WindowStore::aggregate). The key `0x01` alone
//! holds the latest record time aggregated, which decides which windows are closed. Keys
//! starting with [`APP_KEY_TAG`](crate::APP_KEY_TAG) (`0x00`) are the application's: the
//! store never touches them, so an application can commit its input position with the
//! windows in one `LoggedStore` commit.
//!
//! # What a range costs
//! [`fetch`](WindowStore::fetch) of one key is one range per live segment overlapping
//! `[time_from, time_to]`, each reading only that key's entries in that time span.
//! [`fetch_all`](WindowStore::fetch_all) reads every entry of the overlapping segments and
//! skips those outside the time span. At most `retention / segment_interval + 1` segments are
//! live, which [`WindowStore::open`] caps at 4096.
//!
//! # Kafka Streams
//! The store answers as Kafka Streams' window stores do for the same calls (their own tests
//! are ported to `conformance::kafka_window`): windows of [`TimeWindows`] are Kafka's, a put
//! older than the retention is refused and counted, fetches skip expired windows, and key
//! ranges have inclusive bounds with `None` for Kafka's `null`. Where it differs, the method
//! says so: the order across keys of [`WindowStore::fetch_all`].
//!
//! # Expiry
//! A window starting at or before `stream_time - retention` is expired: a put of it is refused
//! ([`PutOutcome::Expired`], counted in [`DropCounts::expired`]) and fetches skip it. Storage
//! is reclaimed a whole segment at a time: the write that moves the stream time past the end
//! of a segment's retention persists the new stream time in its atomic batch, then deletes the
//! expired segments with one [`delete_range`](KeyValueStore::delete_range) of the underlying
//! store: one range tombstone on RocksDB, a scan of the expired segments only and per-key
//! deletes on a backend without range deletion (and through a changelogged store, which logs
//! a tombstone per key for compaction). No live entry is read to expire old ones. A crash
//! between the two leaves expired entries that no fetch returns, removed by the first advance
//! after the store is opened again.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use store_api::{Error, KeyValueStore, Result, WriteBatch};

use crate::layout::{
    DATA_TAG, checked_grace, decode_ts, encode_ts, push_key, read_key, read_time, segment_prefix,
};
pub use crate::segmented::DropCounts;
use crate::segmented::{KeyBounds, SegmentedStore, WriteState, key_range_bounds};

/// Options of a [`WindowStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowStoreConfig {
    /// How long a window is kept after the stream time passes its start, in milliseconds. At
    /// least a window's size plus its grace period, or windows expire while still open.
    pub retention_ms: i64,
    /// The width of a segment, the unit of expiry, in milliseconds. Kafka Streams' default:
    /// half the retention, at least one minute.
    pub segment_interval_ms: i64,
    /// Keep every value put for the same key and window start (stream-stream joins), each
    /// under its own sequence number, instead of overwriting.
    pub retain_duplicates: bool,
}

impl WindowStoreConfig {
    /// A retention of `retention_ms` with Kafka Streams' default segment interval.
    pub fn new(retention_ms: i64) -> Self {
        WindowStoreConfig {
            retention_ms,
            segment_interval_ms: (retention_ms / 2).max(60_000),
            retain_duplicates: false,
        }
    }

    /// The same options with segments of `interval_ms`.
    pub fn with_segment_interval(mut self, interval_ms: i64) -> Self {
        self.segment_interval_ms = interval_ms;
        self
    }

    /// The same options, retaining duplicates or not.
    pub fn with_retain_duplicates(mut self, retain: bool) -> Self {
        self.retain_duplicates = retain;
        self
    }
}

/// What became of a put or an aggregated record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum PutOutcome {
    /// Written (for an aggregate: into this many windows, at least one).
    Written(usize),
    /// Refused: the window is older than the retention allows.
    Expired,
    /// Refused: every window of the record closed more than the grace period ago.
    Late,
}

/// One entry of [`WindowStore::fetch_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowEntry {
    /// The record key.
    pub key: Vec<u8>,
    /// The window start, in milliseconds.
    pub start: i64,
    /// The value.
    pub value: Vec<u8>,
}

/// The iterator of [`WindowStore::fetch`]: `(window start, value)` in time order (backward
/// variants: reverse time order). An error ends it.
pub type WindowFetchIter = Box<dyn Iterator<Item = Result<(i64, Vec<u8>)>> + Send>;

/// The iterator of [`WindowStore::fetch_all`]: entries by segment, then key, then window
/// start (backward variants: the reverse). An error ends it.
pub type WindowEntryIter = Box<dyn Iterator<Item = Result<WindowEntry>> + Send>;

/// Fixed-size windows: tumbling when `advance == size`, hopping when `advance < size`. A window
/// is `[start, start + size)` with `start` a multiple of `advance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    size: i64,
    advance: i64,
    grace: i64,
}

impl TimeWindows {
    /// Tumbling windows of `size_ms`, no grace period.
    ///
    /// # Errors
    /// `InvalidArgument` when `size_ms` is not positive.
    pub fn tumbling(size_ms: i64) -> Result<Self> {
        Self::hopping(size_ms, size_ms)
    }

    /// Windows of `size_ms` starting every `advance_ms`, no grace period.
    ///
    /// # Errors
    /// `InvalidArgument` unless `0 < advance_ms <= size_ms`.
    pub fn hopping(size_ms: i64, advance_ms: i64) -> Result<Self> {
        if advance_ms <= 0 || advance_ms > size_ms {
            return Err(Error::invalid(format!(
                "window advance {advance_ms} ms must be positive and at most the size {size_ms} ms"
            )));
        }
        Ok(TimeWindows {
            size: size_ms,
            advance: advance_ms,
            grace: 0,
        })
    }

    /// The same windows, accepting records up to `grace_ms` after a window ends.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative grace period.
    pub fn with_grace(mut self, grace_ms: i64) -> Result<Self> {
        self.grace = checked_grace(grace_ms)?;
        Ok(self)
    }

    /// The window size in milliseconds.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// The grace period in milliseconds.
    pub fn grace(&self) -> i64 {
        self.grace
    }

    /// The starts of the windows holding `ts`, oldest first: Kafka Streams'
    /// `TimeWindows.windowsFor`. One for tumbling windows, up to `size / advance` (rounded up)
    /// for hopping ones; a window `[start, start + size)` holds `ts` when
    /// `start <= ts < start + size`.
    ///
    /// As in Kafka Streams, no window starts before 0: a record at 3 in windows of 10
    /// advancing by 5 is in `[0, 10)` only, not in `[-5, 5)`, and a record before 0 is in no
    /// window (Kafka Streams drops such records; see [`WindowStore::aggregate`]).
    pub fn starts_for(&self, ts: i64) -> Vec<i64> {
        if ts < 0 {
            return Vec::new();
        }
        // `ts - size + advance` cannot overflow: `ts >= 0` and `0 < advance <= size`.
        let first = (ts - self.size + self.advance).max(0) / self.advance * self.advance;
        let mut starts = Vec::new();
        let mut start = Some(first);
        while let Some(at) = start.filter(|at| *at <= ts) {
            starts.push(at);
            start = at.checked_add(self.advance);
        }
        starts
    }

    /// The exclusive end of the window starting at `start`.
    pub fn end_of(&self, start: i64) -> i64 {
        start.saturating_add(self.size)
    }
}

/// A window store over any [`KeyValueStore`]; see the [module docs](self) for its layout,
/// costs and expiry.
///
/// ```
/// use std::sync::Arc;
/// use statestore_operator_stores::window::{PutOutcome, WindowStore, WindowStoreConfig};
/// use statestore_memory::{Config, MemoryStore};
///
/// let inner = Arc::new(MemoryStore::new(Config::default()));
/// let windows = WindowStore::open(inner, WindowStoreConfig::new(600_000))?;
/// assert_eq!(windows.put(b"page", b"3", 60_000)?, PutOutcome::Written(1));
/// let found: Vec<_> = windows.fetch(b"page", 0, 120_000)?.collect::<Result<_, _>>()?;
/// assert_eq!(found, vec![(60_000, b"3".to_vec())]);
/// # Ok::<(), store_api::Error>(())
/// ```
#[derive(Debug)]
pub struct WindowStore {
    base: SegmentedStore,
    retain_duplicates: bool,
    /// The latest record time aggregated, `i64::MIN` before the first: Kafka Streams'
    /// aggregation keeps it apart from the store's stream time (the latest window start), and
    /// closes windows by it. Written under the base's write lock.
    record_time: AtomicI64,
}

/// The key of the latest record time aggregated: the data tag alone, below every segment's
/// range, so expiry never reads or deletes it.
const RECORD_TIME_KEY: &[u8] = &[DATA_TAG];

impl WindowStore {
    /// Opens a window store kept in `store`, which holds nothing else but keys starting with
    /// [`APP_KEY_TAG`](crate::APP_KEY_TAG), reading its stream time
    /// back from it.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad configuration (see [`WindowStoreConfig`]), or a store error.
    pub fn open(store: Arc<dyn KeyValueStore>, config: WindowStoreConfig) -> Result<Self> {
        let record_time = read_time(store.as_ref(), RECORD_TIME_KEY)?;
        Ok(WindowStore {
            base: SegmentedStore::open(store, config.retention_ms, config.segment_interval_ms)?,
            retain_duplicates: config.retain_duplicates,
            record_time: AtomicI64::new(record_time),
        })
    }

    /// The underlying store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.base.store
    }

    /// The latest window start written, `None` before the first: Kafka Streams' window store
    /// stream time, which retention counts from.
    pub fn stream_time(&self) -> Option<i64> {
        self.base.stream_time()
    }

    /// The latest record time [aggregated](Self::aggregate), `None` before the first: Kafka
    /// Streams' aggregation stream time, which closes windows.
    pub fn aggregated_time(&self) -> Option<i64> {
        let time = self.record_time.load(Ordering::Relaxed);
        (time != i64::MIN).then_some(time)
    }

    /// The writes refused since the store was opened.
    pub fn dropped(&self) -> DropCounts {
        self.base.dropped()
    }

    /// Stores `value` for `key` in the window starting at `window_start`, replacing the value
    /// there unless the store retains duplicates. Advances the stream time and expires the
    /// segments it leaves behind, in the same atomic batch.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or value, or a store error.
    pub fn put(&self, key: &[u8], value: &[u8], window_start: i64) -> Result<PutOutcome> {
        let mut state = self.base.lock();
        let mut batch = WriteBatch::new();
        let outcome = self.put_locked(&mut state, &mut batch, key, value, window_start)?;
        self.base.write(&mut state, batch)?;
        Ok(outcome)
    }

    /// Removes every value of `key` in the window starting at `window_start`.
    ///
    /// # Errors
    /// A store error.
    pub fn remove(&self, key: &[u8], window_start: i64) -> Result<()> {
        let mut state = self.base.lock();
        let mut batch = WriteBatch::new();
        let (from, to) = self.window_bounds(key, window_start, window_start);
        for entry in self
            .base
            .store
            .range(Bound::Included(&from), Bound::Included(&to))?
        {
            batch.delete(entry?.0);
        }
        self.base.write(&mut state, batch)
    }

    /// The value of `key` in the window starting at `window_start` (the first one when
    /// duplicates are retained), or `None`, also when the window expired.
    ///
    /// # Errors
    /// A store error.
    pub fn fetch_window(&self, key: &[u8], window_start: i64) -> Result<Option<Vec<u8>>> {
        let stream_time = self.base.now();
        self.window_at(stream_time, key, window_start)
    }

    fn window_at(&self, stream_time: i64, key: &[u8], start: i64) -> Result<Option<Vec<u8>>> {
        self.fetch_key(stream_time, key, (start, start), false)?
            .next()
            .transpose()
            .map(|found| found.map(|(_, value)| value))
    }

    /// The windows of `key` starting within `[time_from, time_to]`, oldest first.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn fetch(&self, key: &[u8], time_from: i64, time_to: i64) -> Result<WindowFetchIter> {
        let stream_time = self.base.now();
        self.fetch_key(stream_time, key, (time_from, time_to), false)
    }

    /// As [`fetch`](Self::fetch), newest first.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_fetch(
        &self,
        key: &[u8],
        time_from: i64,
        time_to: i64,
    ) -> Result<WindowFetchIter> {
        let stream_time = self.base.now();
        self.fetch_key(stream_time, key, (time_from, time_to), true)
    }

    /// Every key's windows starting within `[time_from, time_to]`, by segment, key, start
    /// (Kafka Streams' `fetchAll(timeFrom, timeTo)`).
    ///
    /// Order: Kafka Streams' RocksDB window store gives this order, its in-memory one time
    /// order first; neither promises one across keys. This store keeps keys in segments so
    /// that one key's fetch is one short range per segment.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn fetch_all(&self, time_from: i64, time_to: i64) -> Result<WindowEntryIter> {
        self.fetch_every((None, None), (time_from, time_to), false)
    }

    /// As [`fetch_all`](Self::fetch_all), in exactly reverse order.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_fetch_all(&self, time_from: i64, time_to: i64) -> Result<WindowEntryIter> {
        self.fetch_every((None, None), (time_from, time_to), true)
    }

    /// Every live window, by segment, key, start (Kafka Streams' `all()`).
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn all(&self) -> Result<WindowEntryIter> {
        self.fetch_all(i64::MIN, i64::MAX)
    }

    /// As [`all`](Self::all), in exactly reverse order (Kafka Streams' `backwardAll()`).
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_all(&self) -> Result<WindowEntryIter> {
        self.backward_fetch_all(i64::MIN, i64::MAX)
    }

    /// The windows of the keys from `key_from` to `key_to`, both inclusive (`None`: no bound),
    /// starting within `[time_from, time_to]`, by segment, key, start: Kafka Streams'
    /// `fetch(keyFrom, keyTo, timeFrom, timeTo)`, with its `null` bounds. A `key_from` after
    /// `key_to` yields nothing, as in Kafka Streams (which also logs a warning).
    ///
    /// Reads every window of the key range in each live segment overlapping the time range.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn fetch_key_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
    ) -> Result<WindowEntryIter> {
        self.fetch_every((key_from, key_to), (time_from, time_to), false)
    }

    /// As [`fetch_key_range`](Self::fetch_key_range), in exactly reverse order (Kafka
    /// Streams' `backwardFetch(keyFrom, keyTo, timeFrom, timeTo)`).
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_fetch_key_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
    ) -> Result<WindowEntryIter> {
        self.fetch_every((key_from, key_to), (time_from, time_to), true)
    }

    /// Folds a record at `ts` into each of its `windows` for `key` (Kafka Streams'
    /// `KStreamWindowAggregate`): `update` gets the current value of a window (`None` for a
    /// new one) and returns the new one. As in Kafka Streams, the latest record time
    /// aggregated ([`aggregated_time`](Self::aggregated_time)) closes windows: a window is
    /// closed, and left alone, once `end + grace <= aggregated time`; if every window of the
    /// record is closed the record is [`Late`](PutOutcome::Late) and counted in
    /// [`DropCounts::late`]. The windows written move the store's stream time, which retention
    /// counts from, as puts do. Every write of one record is one atomic batch.
    ///
    /// A record before 0 is in no window: as in Kafka Streams, which drops such records before
    /// any processor and counts them in the same dropped-records metric as late ones, it is
    /// [`Late`](PutOutcome::Late), counted in [`DropCounts::late`], and changes nothing else.
    ///
    /// # Errors
    /// `Unsupported` on a store that retains duplicates. `InvalidArgument` when the retention
    /// is shorter than the window size plus grace period, which Kafka Streams refuses too:
    /// windows would expire while still open. A store error.
    pub fn aggregate(
        &self,
        key: &[u8],
        ts: i64,
        windows: &TimeWindows,
        mut update: impl FnMut(Option<&[u8]>) -> Vec<u8>,
    ) -> Result<PutOutcome> {
        if self.retain_duplicates {
            return Err(Error::Unsupported(
                "aggregate on a window store that retains duplicates".into(),
            ));
        }
        let needed = windows.size.saturating_add(windows.grace);
        if self.base.segments.retention < needed {
            return Err(Error::invalid(format!(
                "retention {} ms is shorter than the window size plus grace period, {needed} ms",
                self.base.segments.retention
            )));
        }
        if ts < 0 {
            // No window holds it; Kafka Streams drops such a record before any processor and
            // counts it with late ones, without moving the stream time.
            self.base.count_late();
            return Ok(PutOutcome::Late);
        }
        let mut state = self.base.lock();
        let mut batch = WriteBatch::new();
        let previous = self.record_time.load(Ordering::Relaxed);
        let now = previous.max(ts);
        if ts > previous {
            batch.put(RECORD_TIME_KEY.to_vec(), encode_ts(ts).to_vec());
        }
        let mut written = 0;
        for start in windows.starts_for(ts) {
            if windows.end_of(start).saturating_add(windows.grace) <= now {
                continue;
            }
            let current = self.window_at(state.stream_time, key, start)?;
            let value = update(current.as_deref());
            if let PutOutcome::Written(_) =
                self.put_locked(&mut state, &mut batch, key, &value, start)?
            {
                written += 1;
            }
        }
        self.base.write(&mut state, batch)?;
        self.record_time.store(now, Ordering::Relaxed);
        if written == 0 {
            self.base.count_late();
            return Ok(PutOutcome::Late);
        }
        Ok(PutOutcome::Written(written))
    }

    /// Adds a put to `batch` under the write lock; the caller writes the batch.
    fn put_locked(
        &self,
        state: &mut WriteState,
        batch: &mut WriteBatch,
        key: &[u8],
        value: &[u8],
        window_start: i64,
    ) -> Result<PutOutcome> {
        store_api::limits::check_value(value)?;
        if window_start > state.stream_time {
            self.base.advance(state, batch, window_start);
        }
        if window_start < self.base.segments.min_live(state.stream_time) {
            self.base.count_expired();
            return Ok(PutOutcome::Expired);
        }
        let seq = if self.retain_duplicates {
            self.next_seq(key, window_start)?
        } else {
            0
        };
        let mut entry = self.window_prefix(key, window_start);
        entry.extend_from_slice(&seq.to_be_bytes());
        store_api::limits::check_key(&entry)?;
        batch.put(entry, value.to_vec());
        Ok(PutOutcome::Written(1))
    }

    /// One past the highest sequence number stored for this window (read from the store, so
    /// it survives restarts).
    fn next_seq(&self, key: &[u8], window_start: i64) -> Result<u32> {
        let (from, to) = self.window_bounds(key, window_start, window_start);
        let last = self
            .base
            .store
            .reverse_range(Bound::Included(&from), Bound::Included(&to))?
            .next()
            .transpose()?;
        match last {
            None => Ok(0),
            Some((entry, _)) => {
                let seq = entry.len().checked_sub(4).map(|at| &entry[at..]);
                let seq = seq
                    .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
                    .ok_or_else(|| Error::Corruption("a short window key".into()))?;
                u32::from_be_bytes(seq).checked_add(1).ok_or_else(|| {
                    Error::invalid("over 4 billion duplicates in one window".to_string())
                })
            }
        }
    }

    /// `segment | key | start`, the entry key without its sequence number.
    fn window_prefix(&self, key: &[u8], start: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(key.len() + 23);
        out.extend_from_slice(&segment_prefix(self.base.segments.segment(start)));
        push_key(&mut out, key);
        out.extend_from_slice(&encode_ts(start));
        out
    }

    /// The first and last possible entry keys of `key` with starts in `[from, to]`, which
    /// must lie in one segment.
    fn window_bounds(&self, key: &[u8], from: i64, to: i64) -> (Vec<u8>, Vec<u8>) {
        let mut low = self.window_prefix(key, from);
        low.extend_from_slice(&[0; 4]);
        let mut high = self.window_prefix(key, to);
        high.extend_from_slice(&[0xFF; 4]);
        (low, high)
    }

    fn fetch_key(
        &self,
        stream_time: i64,
        key: &[u8],
        (time_from, time_to): (i64, i64),
        backward: bool,
    ) -> Result<WindowFetchIter> {
        let from = time_from.max(self.base.segments.min_live(stream_time));
        let iter = self
            .base
            .scan(stream_time, (from, time_to), backward, |_, first, last| {
                let (low, high) = self.window_bounds(key, from.max(first), time_to.min(last));
                (Bound::Included(low), Bound::Included(high))
            });
        Ok(Box::new(iter.map(|item| {
            let (entry, value) = item?;
            Ok((decode_entry(&entry)?.1, value))
        })))
    }

    fn fetch_every(
        &self,
        (key_from, key_to): KeyBounds<'_>,
        (time_from, time_to): (i64, i64),
        backward: bool,
    ) -> Result<WindowEntryIter> {
        if let (Some(low), Some(high)) = (key_from, key_to)
            && low > high
        {
            return Ok(Box::new(std::iter::empty()));
        }
        let stream_time = self.base.now();
        let from = time_from.max(self.base.segments.min_live(stream_time));
        let iter = self
            .base
            .scan(stream_time, (from, time_to), backward, |segment, _, _| {
                key_range_bounds(segment, key_from, key_to, 12)
            });
        Ok(Box::new(iter.filter_map(move |item| {
            let decoded = item.and_then(|(entry, value)| {
                let (key, start) = decode_entry(&entry)?;
                Ok(WindowEntry { key, start, value })
            });
            match decoded {
                Ok(entry) if entry.start < from || entry.start > time_to => None,
                other => Some(other),
            }
        })))
    }
}

/// The key and window start of an entry key.
fn decode_entry(entry: &[u8]) -> Result<(Vec<u8>, i64)> {
    let body = entry
        .get(9..)
        .filter(|body| body.len() >= 14)
        .ok_or_else(|| Error::Corruption("a short window key".into()))?;
    let (key, used) = read_key(body)?;
    let start = decode_ts(body.get(used..used + 8).unwrap_or_default())?;
    if body.len() != used + 12 {
        return Err(Error::Corruption("a window key of the wrong length".into()));
    }
    Ok((key, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumbling_and_hopping_starts() {
        let tumbling = TimeWindows::tumbling(60_000).unwrap();
        assert_eq!(tumbling.starts_for(0), vec![0]);
        assert_eq!(tumbling.starts_for(59_999), vec![0]);
        assert_eq!(tumbling.starts_for(60_000), vec![60_000]);
        // Kafka Streams' windows start at 0 at the earliest.
        assert_eq!(tumbling.starts_for(-1), Vec::<i64>::new());
        let hopping = TimeWindows::hopping(10, 5).unwrap();
        assert_eq!(hopping.starts_for(12), vec![5, 10]);
        assert_eq!(hopping.starts_for(10), vec![5, 10]);
        assert_eq!(hopping.starts_for(3), vec![0]);
        assert_eq!(hopping.starts_for(0), vec![0]);
        let uneven = TimeWindows::hopping(10, 3).unwrap();
        assert_eq!(uneven.starts_for(10), vec![3, 6, 9]);
        assert_eq!(
            TimeWindows::tumbling(10)
                .unwrap()
                .starts_for(i64::MAX)
                .len(),
            1
        );
        assert!(TimeWindows::hopping(10, 11).is_err());
        assert!(TimeWindows::tumbling(0).is_err());
        assert!(tumbling.with_grace(-1).is_err());
    }
}
