//! [`SessionStore`]: one value per session, a key's activity span (start and end), kept for a
//! retention period in time segments over any [`KeyValueStore`]; and [`SessionWindows`],
//! which merges a record into the sessions within an inactivity gap.
//!
//! # Key layout
//! One entry per session in the underlying store:
//! ```text
//! 0x01 | segment of the end (8) | key, escaped and terminated | end (8) | start (8)
//! ```
//! with the same encodings as the [window store](crate::window): sign-flipped big-endian
//! timestamps, `0x00`-escaped keys ending in `0x00 0x00`, `segment = end.div_euclid(interval)`.
//! The empty key holds the stream time: the latest session end put or record merged. Keys
//! starting with [`APP_KEY_TAG`](crate::APP_KEY_TAG) (`0x00`) are the application's.
//!
//! # What a range costs
//! [`find_sessions`](SessionStore::find_sessions)`(key, earliest_end, latest_start)` is one
//! range per live segment from the one holding `earliest_end` to the newest, each reading
//! only that key's sessions ending at or after `earliest_end`, of which those starting after
//! `latest_start` are skipped. A session that ends late was at least that long, so in a store
//! of short sessions little is skipped.
//!
//! # Kafka Streams
//! The store answers as Kafka Streams' session stores do for the same calls (their own tests
//! are ported to `conformance::kafka_session`), and [`SessionStore::merge_record`] merges and
//! closes sessions as Kafka's session aggregation does (the gap plus the grace period after a
//! session's end). Where it differs, the method says so:
//! [`SessionStore::find_sessions_ending`] (order).
//!
//! # Expiry
//! A session ending at or before `stream_time - retention` is expired: a put of it is refused
//! and counted, and finds skip it. As in the window store, the write that moves the stream
//! time past a segment's retention then deletes that whole segment with one range deletion of
//! the underlying store (see the window store's "Expiry").

use std::ops::Bound;
use std::sync::Arc;

use store_api::{Error, KeyValueStore, Result, WriteBatch};

use crate::layout::{checked_grace, decode_ts, encode_ts, push_key, read_key, segment_prefix};
use crate::segmented::{KeyBounds, SegmentedStore, WriteState, key_range_bounds};
use crate::window::{DropCounts, PutOutcome};

/// A key's session: activity from `start` to `end`, both inclusive, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Session {
    /// The record key.
    pub key: Vec<u8>,
    /// The first record's timestamp.
    pub start: i64,
    /// The last record's timestamp.
    pub end: i64,
}

impl Session {
    /// A session of `key` from `start` to `end`.
    pub fn new(key: impl Into<Vec<u8>>, start: i64, end: i64) -> Self {
        Session {
            key: key.into(),
            start,
            end,
        }
    }
}

/// Options of a [`SessionStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionStoreConfig {
    /// How long a session is kept after the stream time passes its end, in milliseconds; at
    /// least the inactivity gap plus the grace period of the [`SessionWindows`] used.
    pub retention_ms: i64,
    /// The width of a segment, the unit of expiry, in milliseconds.
    pub segment_interval_ms: i64,
}

impl SessionStoreConfig {
    /// A retention of `retention_ms` with segments of half of it, at least one minute.
    pub fn new(retention_ms: i64) -> Self {
        SessionStoreConfig {
            retention_ms,
            segment_interval_ms: (retention_ms / 2).max(60_000),
        }
    }

    /// The same options with segments of `interval_ms`.
    pub fn with_segment_interval(mut self, interval_ms: i64) -> Self {
        self.segment_interval_ms = interval_ms;
        self
    }
}

/// Sessions closed by an inactivity gap: records of one key less than `gap` apart belong to
/// one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionWindows {
    gap: i64,
    grace: i64,
}

impl SessionWindows {
    /// Sessions split by `gap_ms` of inactivity, no grace period.
    ///
    /// # Errors
    /// `InvalidArgument` when `gap_ms` is not positive.
    pub fn with_gap(gap_ms: i64) -> Result<Self> {
        if gap_ms <= 0 {
            return Err(Error::invalid(format!(
                "inactivity gap {gap_ms} ms must be positive"
            )));
        }
        Ok(SessionWindows {
            gap: gap_ms,
            grace: 0,
        })
    }

    /// The same sessions, accepting records that extend a session up to `grace_ms` after the
    /// stream time passed its end.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative grace period.
    pub fn with_grace(mut self, grace_ms: i64) -> Result<Self> {
        self.grace = checked_grace(grace_ms)?;
        Ok(self)
    }

    /// The inactivity gap in milliseconds.
    pub fn gap(&self) -> i64 {
        self.gap
    }
}

/// What [`SessionStore::merge_record`] did with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum MergeOutcome {
    /// The record is in `session`, which replaced `absorbed` earlier sessions.
    Merged {
        /// The session now holding the record.
        session: Session,
        /// How many stored sessions it replaced (0 for a new session).
        absorbed: usize,
    },
    /// Refused: the session it would join ended more than the grace period before the stream
    /// time. Counted in [`DropCounts::late`].
    Late,
}

/// The iterator of [`SessionStore::find_sessions`]: sessions with their values, by end then
/// start (backward: the reverse). An error ends it.
pub type SessionIter = Box<dyn Iterator<Item = Result<(Session, Vec<u8>)>> + Send>;

/// A session store over any [`KeyValueStore`]; see the [module docs](self) for its layout,
/// costs and expiry.
///
/// ```
/// use std::sync::Arc;
/// use statestore_operator_stores::session::{MergeOutcome, Session, SessionStore, SessionStoreConfig, SessionWindows};
/// use statestore_memory::{Config, MemoryStore};
///
/// let sessions = SessionStore::open(Arc::new(MemoryStore::new(Config::default())), SessionStoreConfig::new(3_600_000))?;
/// let gap = SessionWindows::with_gap(1_000)?;
/// let add = |a: &[u8], b: &[u8]| vec![a[0] + b[0]];
/// let _ = sessions.merge_record(b"user", 0, &gap, &[1], add)?;
/// let _ = sessions.merge_record(b"user", 2_000, &gap, &[1], add)?;
/// // A click at 1 000 bridges the two sessions into one of three clicks.
/// let merged = sessions.merge_record(b"user", 1_000, &gap, &[1], add)?;
/// assert_eq!(merged, MergeOutcome::Merged { session: Session::new(*b"user", 0, 2_000), absorbed: 2 });
/// assert_eq!(sessions.fetch_session(&Session::new(*b"user", 0, 2_000))?, Some(vec![3]));
/// # Ok::<(), store_api::Error>(())
/// ```
#[derive(Debug)]
pub struct SessionStore {
    base: SegmentedStore,
}

impl SessionStore {
    /// Opens a session store kept in `store`, which holds nothing else but keys starting with
    /// [`APP_KEY_TAG`](crate::APP_KEY_TAG).
    ///
    /// # Errors
    /// `InvalidArgument` for a bad configuration, or a store error.
    pub fn open(store: Arc<dyn KeyValueStore>, config: SessionStoreConfig) -> Result<Self> {
        Ok(SessionStore {
            base: SegmentedStore::open(store, config.retention_ms, config.segment_interval_ms)?,
        })
    }

    /// The underlying store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.base.store
    }

    /// The latest session end put or record timestamp merged, `None` before the first.
    pub fn stream_time(&self) -> Option<i64> {
        self.base.stream_time()
    }

    /// The writes refused since the store was opened.
    pub fn dropped(&self) -> DropCounts {
        self.base.dropped()
    }

    /// Stores `value` for `session`, replacing the value of the same session.
    ///
    /// # Errors
    /// `InvalidArgument` when the session starts after it ends or is oversized; a store error.
    pub fn put(&self, session: &Session, value: &[u8]) -> Result<PutOutcome> {
        let mut state = self.base.lock();
        let mut batch = WriteBatch::new();
        let outcome = self.put_locked(&mut state, &mut batch, session, value)?;
        self.base.write(&mut state, batch)?;
        Ok(outcome)
    }

    /// Removes `session`; removing a missing one succeeds.
    ///
    /// # Errors
    /// `InvalidArgument` when the session starts after it ends; a store error.
    pub fn remove(&self, session: &Session) -> Result<()> {
        let _state = self.base.lock();
        self.base.store.delete(&self.entry_key(session)?)
    }

    /// The value of exactly `session`, or `None`, also when it expired.
    ///
    /// # Errors
    /// `InvalidArgument` when the session starts after it ends; a store error.
    pub fn fetch_session(&self, session: &Session) -> Result<Option<Vec<u8>>> {
        let stream_time = self.base.now();
        if session.end < self.base.segments.min_live(stream_time) {
            return Ok(None);
        }
        self.base.store.get(&self.entry_key(session)?)
    }

    /// The sessions of `key` ending at or after `earliest_end` and starting at or before
    /// `latest_start`, by end then start.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn find_sessions(
        &self,
        key: &[u8],
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<SessionIter> {
        let stream_time = self.base.now();
        Ok(self.find(stream_time, key, earliest_end, latest_start, false))
    }

    /// As [`find_sessions`](Self::find_sessions), in reverse order.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_find_sessions(
        &self,
        key: &[u8],
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<SessionIter> {
        let stream_time = self.base.now();
        Ok(self.find(stream_time, key, earliest_end, latest_start, true))
    }

    /// The sessions of the keys from `key_from` to `key_to`, both inclusive (`None`: no
    /// bound), ending at or after `earliest_end` and starting at or before `latest_start`, by
    /// segment, key, end, start: Kafka Streams' `findSessions(keyFrom, keyTo,
    /// earliestSessionEndTime, latestSessionStartTime)` with its `null` bounds. A `key_from`
    /// after `key_to` yields nothing, as in Kafka Streams.
    ///
    /// Reads every session of the key range in each live segment from the one holding
    /// `earliest_end` on.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn find_sessions_in_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<SessionIter> {
        self.find_keys(
            (key_from, key_to),
            (earliest_end, i64::MAX),
            latest_start,
            false,
        )
    }

    /// As [`find_sessions_in_range`](Self::find_sessions_in_range), in exactly reverse order.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_find_sessions_in_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<SessionIter> {
        self.find_keys(
            (key_from, key_to),
            (earliest_end, i64::MAX),
            latest_start,
            true,
        )
    }

    /// Every live session of `key`, by end then start (Kafka Streams' `fetch(key)`, which
    /// starts at end time 0 because its timestamps are never negative; this store's may be).
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn fetch(&self, key: &[u8]) -> Result<SessionIter> {
        self.find_sessions(key, i64::MIN, i64::MAX)
    }

    /// As [`fetch`](Self::fetch), in reverse order (Kafka Streams' `backwardFetch(key)`).
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_fetch(&self, key: &[u8]) -> Result<SessionIter> {
        self.backward_find_sessions(key, i64::MIN, i64::MAX)
    }

    /// Every live session of the keys from `key_from` to `key_to`, both inclusive (`None`: no
    /// bound): Kafka Streams' `fetch(keyFrom, keyTo)`.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn fetch_key_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> Result<SessionIter> {
        self.find_sessions_in_range(key_from, key_to, i64::MIN, i64::MAX)
    }

    /// As [`fetch_key_range`](Self::fetch_key_range), in exactly reverse order (Kafka
    /// Streams' `backwardFetch(keyFrom, keyTo)`).
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_fetch_key_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> Result<SessionIter> {
        self.backward_find_sessions_in_range(key_from, key_to, i64::MIN, i64::MAX)
    }

    /// Every key's sessions ending within `[earliest_end, latest_end]`: Kafka Streams'
    /// `findSessions(earliestSessionEndTime, latestSessionEndTime)`.
    ///
    /// Differs from Kafka Streams in order: by segment (of the end time), then key, end,
    /// start, where Kafka Streams' in-memory store gives end time order (and its RocksDB
    /// session store does not support the call). Sessions are kept by key within a segment so
    /// that one key's finds read only that key.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn find_sessions_ending(&self, earliest_end: i64, latest_end: i64) -> Result<SessionIter> {
        self.find_keys((None, None), (earliest_end, latest_end), i64::MAX, false)
    }

    /// As [`find_sessions_ending`](Self::find_sessions_ending), in exactly reverse order.
    ///
    /// # Errors
    /// A store error, now or as an item.
    pub fn backward_find_sessions_ending(
        &self,
        earliest_end: i64,
        latest_end: i64,
    ) -> Result<SessionIter> {
        self.find_keys((None, None), (earliest_end, latest_end), i64::MAX, true)
    }

    /// Adds a record of `key` at `ts` whose own aggregate is `value`, as Kafka Streams'
    /// `KStreamSessionWindowAggregate` does: finds the sessions of `key` ending at or after
    /// `ts - gap` and starting at or before `ts + gap`, combines their values and `value` with
    /// `merge(aggregate, next)` (oldest session first, the record last), and replaces them
    /// with one session spanning them all and `ts`, in one atomic batch. The stream time moves
    /// to `ts` if later. A session is closed once `end + gap + grace < stream time` (a record
    /// within the gap after its end could still extend it until then); a record whose merged
    /// session is closed is [`Late`](MergeOutcome::Late): counted, nothing merged.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or value, and when the retention is shorter
    /// than the gap plus grace period, which Kafka Streams refuses too (sessions would expire
    /// while still open); a store error.
    pub fn merge_record(
        &self,
        key: &[u8],
        ts: i64,
        windows: &SessionWindows,
        value: &[u8],
        mut merge: impl FnMut(&[u8], &[u8]) -> Vec<u8>,
    ) -> Result<MergeOutcome> {
        let open_for = windows.gap.saturating_add(windows.grace);
        if self.base.segments.retention < open_for {
            return Err(Error::invalid(format!(
                "retention {} ms is shorter than the inactivity gap plus grace period, \
                 {open_for} ms",
                self.base.segments.retention
            )));
        }
        let mut state = self.base.lock();
        let mut batch = WriteBatch::new();
        if ts > state.stream_time {
            self.base.advance(&mut state, &mut batch, ts);
        }
        let near = self.find(
            state.stream_time,
            key,
            ts.saturating_sub(windows.gap),
            ts.saturating_add(windows.gap),
            false,
        );
        let mut merged = Session::new(key, ts, ts);
        let mut aggregate: Option<Vec<u8>> = None;
        let mut absorbed = Vec::new();
        for found in near {
            let (session, stored) = found?;
            merged.start = merged.start.min(session.start);
            merged.end = merged.end.max(session.end);
            aggregate = Some(match aggregate {
                None => stored,
                Some(so_far) => merge(&so_far, &stored),
            });
            absorbed.push(session);
        }
        if merged.end.saturating_add(open_for) < state.stream_time {
            self.base.write(&mut state, batch)?;
            self.base.count_late();
            return Ok(MergeOutcome::Late);
        }
        let aggregate = match aggregate {
            None => value.to_vec(),
            Some(so_far) => merge(&so_far, value),
        };
        for session in &absorbed {
            batch.delete(self.entry_key(session)?);
        }
        if let PutOutcome::Expired = self.put_locked(&mut state, &mut batch, &merged, &aggregate)? {
            self.base.write(&mut state, batch)?;
            return Ok(MergeOutcome::Late);
        }
        self.base.write(&mut state, batch)?;
        Ok(MergeOutcome::Merged {
            session: merged,
            absorbed: absorbed.len(),
        })
    }

    fn put_locked(
        &self,
        state: &mut WriteState,
        batch: &mut WriteBatch,
        session: &Session,
        value: &[u8],
    ) -> Result<PutOutcome> {
        let entry = self.entry_key(session)?;
        store_api::limits::check_entry(&entry, value)?;
        if session.end > state.stream_time {
            self.base.advance(state, batch, session.end);
        }
        if session.end < self.base.segments.min_live(state.stream_time) {
            self.base.count_expired();
            return Ok(PutOutcome::Expired);
        }
        batch.put(entry, value.to_vec());
        Ok(PutOutcome::Written(1))
    }

    fn entry_key(&self, session: &Session) -> Result<Vec<u8>> {
        if session.start > session.end {
            return Err(Error::invalid(format!(
                "a session starting at {} after its end {}",
                session.start, session.end
            )));
        }
        Ok(self.bound_key(&session.key, session.end, session.start))
    }

    fn bound_key(&self, key: &[u8], end: i64, start: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(key.len() + 27);
        out.extend_from_slice(&segment_prefix(self.base.segments.segment(end)));
        push_key(&mut out, key);
        out.extend_from_slice(&encode_ts(end));
        out.extend_from_slice(&encode_ts(start));
        out
    }

    fn find(
        &self,
        stream_time: i64,
        key: &[u8],
        earliest_end: i64,
        latest_start: i64,
        backward: bool,
    ) -> SessionIter {
        let from = earliest_end.max(self.base.segments.min_live(stream_time));
        let iter = self
            .base
            .scan(stream_time, (from, i64::MAX), backward, |_, first, last| {
                let low = self.bound_key(key, from.max(first), i64::MIN);
                let high = self.bound_key(key, last, i64::MAX);
                (Bound::Included(low), Bound::Included(high))
            });
        Box::new(iter.filter_map(move |item| {
            let decoded = item.and_then(|(entry, value)| Ok((decode_entry(&entry)?, value)));
            match decoded {
                Ok((session, _)) if session.start > latest_start => None,
                other => Some(other),
            }
        }))
    }
}

impl SessionStore {
    /// The sessions of a key range ending within `ends` and starting at or before
    /// `latest_start`; one key goes through [`find`](Self::find), which reads only its ends.
    fn find_keys(
        &self,
        (key_from, key_to): KeyBounds<'_>,
        (earliest_end, latest_end): (i64, i64),
        latest_start: i64,
        backward: bool,
    ) -> Result<SessionIter> {
        let stream_time = self.base.now();
        match (key_from, key_to) {
            (Some(low), Some(high)) if low > high => return Ok(Box::new(std::iter::empty())),
            (Some(low), Some(high)) if low == high && latest_end == i64::MAX => {
                return Ok(self.find(stream_time, low, earliest_end, latest_start, backward));
            }
            _ => {}
        }
        let from = earliest_end.max(self.base.segments.min_live(stream_time));
        let iter = self.base.scan(
            stream_time,
            (from, latest_end),
            backward,
            |segment, _, _| key_range_bounds(segment, key_from, key_to, 16),
        );
        Ok(Box::new(iter.filter_map(move |item| {
            let decoded = item.and_then(|(entry, value)| Ok((decode_entry(&entry)?, value)));
            match decoded {
                Ok((session, _))
                    if session.end < from
                        || session.end > latest_end
                        || session.start > latest_start =>
                {
                    None
                }
                other => Some(other),
            }
        })))
    }
}

fn decode_entry(entry: &[u8]) -> Result<Session> {
    let body = entry
        .get(9..)
        .ok_or_else(|| Error::Corruption("a short session key".into()))?;
    let (key, used) = read_key(body)?;
    if body.len() != used + 16 {
        return Err(Error::Corruption(
            "a session key of the wrong length".into(),
        ));
    }
    let end = decode_ts(&body[used..used + 8])?;
    let start = decode_ts(&body[used + 8..])?;
    Ok(Session { key, start, end })
}
