//! [`TtlStore`]: a key-value store whose entries expire a time after they were written.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use store_api::{BatchOp, Capabilities, Error, KeyValueStore, KvIter, Result, WriteBatch};

use crate::layout::{META_KEY, decode_ts, encode_ts};

/// The first byte of the key of every entry.
const DATA_TAG: u8 = 0x01;
/// The first byte of the expiry index: `INDEX_TAG, encode_ts(expiry), key` with an empty value.
const INDEX_TAG: u8 = 0x02;
/// The first byte of every stored value: the layout of the envelope that follows.
const ENVELOPE_V1: u8 = 0x01;
/// The envelope's length: its version byte and the expiry.
const ENVELOPE_LEN: usize = 9;
/// The expiry of an entry that never expires.
const NEVER: i64 = i64::MAX;

/// Which clock decides when an entry has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TtlClock {
    /// Stream time: the largest record timestamp given to
    /// [`advance_stream_time`](TtlStore::advance_stream_time), kept in the store itself so a
    /// restored store expires exactly what the live one did. Time stands still without records,
    /// so a replay or a paused input never expires anything early. Kafka Streams' choice for
    /// window and session stores.
    #[default]
    StreamTime,
    /// The machine's wall clock (milliseconds since the Unix epoch): entries expire while the
    /// input is idle too. A restored store hides exactly what the live one hides at the same
    /// instant, since the expiry time is stored with each value.
    WallClock,
}

/// Options of a [`TtlStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TtlConfig {
    /// How long an entry lives after it is written, in milliseconds of `clock`, unless the
    /// write gives its own ([`put_with_ttl`](TtlStore::put_with_ttl)). `None`: entries live
    /// until deleted unless their write says otherwise.
    pub ttl_ms: Option<i64>,
    /// The clock that measures it.
    pub clock: TtlClock,
    /// Expired entries are deleted (tombstones in a changelog) by the first write at least
    /// this many milliseconds of `clock` after the last sweep. Reads never return an expired
    /// entry whatever this is. Default 1000.
    pub sweep_interval_ms: i64,
    /// The most entries one sweep deletes; the next write goes on where it stopped. Bounds
    /// the size of the write (and commit) that a mass expiry lands in. Default 10 000.
    pub sweep_limit: usize,
}

impl Default for TtlConfig {
    fn default() -> Self {
        TtlConfig {
            ttl_ms: None,
            clock: TtlClock::StreamTime,
            sweep_interval_ms: 1000,
            sweep_limit: 10_000,
        }
    }
}

impl TtlConfig {
    /// Entries live `ttl_ms` milliseconds of `clock`.
    pub fn new(ttl_ms: i64, clock: TtlClock) -> TtlConfig {
        TtlConfig {
            ttl_ms: Some(ttl_ms),
            clock,
            ..TtlConfig::default()
        }
    }

    /// Checks the options.
    ///
    /// # Errors
    /// `InvalidArgument` for a TTL or sweep interval that is not positive, or a sweep limit
    /// of 0.
    pub fn validate(&self) -> Result<()> {
        if let Some(ttl) = self.ttl_ms
            && ttl <= 0
        {
            return Err(Error::invalid(format!(
                "ttl_ms must be positive, not {ttl}"
            )));
        }
        if self.sweep_interval_ms <= 0 {
            return Err(Error::invalid(format!(
                "sweep_interval_ms must be positive, not {}",
                self.sweep_interval_ms
            )));
        }
        if self.sweep_limit == 0 {
            return Err(Error::invalid("sweep_limit must be at least 1"));
        }
        Ok(())
    }
}

/// A [`KeyValueStore`] whose entries expire: each lives a time to live (TTL) after its write,
/// per store ([`TtlConfig::ttl_ms`]) or per write ([`put_with_ttl`](Self::put_with_ttl)),
/// measured by stream time or the wall clock ([`TtlClock`]).
///
/// # Guarantees
/// - An expired entry is never returned: `get`, ranges and prefix scans skip every entry whose
///   expiry is at or before the clock's current time, whether or not it was deleted yet.
/// - Its removal is an ordinary delete of the wrapped store, made in the same `WriteBatch` as
///   the write that found it expired (a sweep rides on a write). Over a `LoggedStore` that is
///   a tombstone in the same changelog commit as the write, and as the stream-time advance
///   that expired it: restore, standbys and a compacted changelog hold exactly what this store
///   holds, and a restored store answers every read as the live one did.
/// - The expiry time is stored with the value (an envelope), and stream time in the store, so
///   both survive a restore. RocksDB's own TTL (`DBWithTTL`) drops entries in compactions
///   without a changelog ever knowing, which is why TTL lives here and not in a backend.
///
/// # Layout and costs
/// An entry `k -> v` is stored as `0x01 k -> [0x01, expiry (8 bytes)] v`; an entry that
/// expires also has an index key `0x02 expiry k` with an empty value, so a sweep reads only
/// what has expired. Stream time is kept under the empty key. A put is one batch of two or
/// three keys; a read is one read of the wrapped store. An overwrite or delete leaves the old
/// index key, which the sweep removes at its time. A value written by a typed store with a
/// schema envelope ([`Evolving`](crate::Evolving)) is the `v` here: the two envelopes nest,
/// TTL outside.
///
/// ```
/// use std::sync::Arc;
/// use statestore_memory::{Config, MemoryStore};
/// use statestore_operator_stores::{TtlClock, TtlConfig, TtlStore};
/// use store_api::KeyValueStore;
///
/// let store = TtlStore::open(
///     Arc::new(MemoryStore::new(Config::default())),
///     TtlConfig::new(1_000, TtlClock::StreamTime),
/// )?;
/// store.advance_stream_time(10_000)?;
/// store.put(b"session", b"open")?; // expires at stream time 11 000
/// store.put_with_ttl(b"token", b"x", Some(100))?; // expires at 10 100
/// store.advance_stream_time(10_500)?;
/// assert_eq!(store.get(b"token")?, None);
/// assert_eq!(store.get(b"session")?, Some(b"open".to_vec()));
/// # Ok::<(), store_api::Error>(())
/// ```
pub struct TtlStore {
    inner: Arc<dyn KeyValueStore>,
    config: TtlConfig,
    /// Held across every write to the wrapped store, so stream time and contents change
    /// together.
    clock: Mutex<Clock>,
    closed: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Clock {
    /// The stream time ([`TtlClock::StreamTime`]), `i64::MIN` before any record.
    stream_time: i64,
    /// The time of the last sweep that deleted everything expired then.
    last_sweep: i64,
}

impl TtlStore {
    /// Opens a TTL store over `inner`, reading back the stream time it keeps there. Writes
    /// nothing, so it opens over a read-only copy (a standby) too.
    ///
    /// # Errors
    /// `InvalidArgument` for bad options; `Corruption` for a stored stream time that does not
    /// decode; the wrapped store's errors.
    pub fn open(inner: Arc<dyn KeyValueStore>, config: TtlConfig) -> Result<TtlStore> {
        config.validate()?;
        let stream_time = match inner.get(META_KEY)? {
            Some(bytes) => decode_ts(&bytes)?,
            None => i64::MIN,
        };
        Ok(TtlStore {
            inner,
            config,
            clock: Mutex::new(Clock {
                stream_time,
                last_sweep: i64::MIN,
            }),
            closed: AtomicBool::new(false),
        })
    }

    /// The options.
    pub fn config(&self) -> &TtlConfig {
        &self.config
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.inner
    }

    /// The clock's current time: the stream time (`i64::MIN` before any record) or the wall
    /// clock in milliseconds.
    pub fn now(&self) -> i64 {
        self.now_of(&self.clock.lock())
    }

    fn now_of(&self, clock: &Clock) -> i64 {
        match self.config.clock {
            TtlClock::StreamTime => clock.stream_time,
            TtlClock::WallClock => wall_clock_ms(),
        }
    }

    /// Moves stream time forward to `timestamp` (a record's timestamp; an older one changes
    /// nothing) and sweeps what that expired, in one write of the wrapped store.
    ///
    /// # Errors
    /// `InvalidArgument` for a store on the wall clock; the wrapped store's errors, after
    /// which stream time is unchanged.
    pub fn advance_stream_time(&self, timestamp: i64) -> Result<()> {
        if self.config.clock != TtlClock::StreamTime {
            return Err(Error::invalid(
                "a TTL store on the wall clock has no stream time to advance",
            ));
        }
        self.apply(Some(timestamp), Vec::new(), false).map(drop)
    }

    /// Sets `key` to `value`, expiring `ttl_ms` milliseconds of the store's clock from now
    /// (`None`: never), whatever the store's TTL.
    ///
    /// # Errors
    /// `InvalidArgument` for a TTL that is not positive or an oversized entry; the wrapped
    /// store's errors.
    pub fn put_with_ttl(&self, key: &[u8], value: &[u8], ttl_ms: Option<i64>) -> Result<()> {
        if let Some(ttl) = ttl_ms
            && ttl <= 0
        {
            return Err(Error::invalid(format!("a TTL must be positive, not {ttl}")));
        }
        store_api::limits::check_entry(key, value)?;
        self.apply(None, vec![Write::Put(key, value, Some(ttl_ms))], false)
            .map(drop)
    }

    /// Replaces the value of `key`, keeping its expiry; returns false (and writes nothing)
    /// when the key is absent or expired. For rewriting values in place, such as a schema
    /// migration.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized entry; `Corruption` for a stored value without a
    /// TTL envelope; the wrapped store's errors.
    pub fn replace_value(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.check_open()?;
        store_api::limits::check_entry(key, value)?;
        let clock = self.clock.lock();
        let data = data_key(key);
        let Some(stored) = self.inner.get(&data)? else {
            return Ok(false);
        };
        let (expiry, _) = decode_envelope(&stored)?;
        if expiry <= self.now_of(&clock) {
            return Ok(false);
        }
        self.inner.put(&data, &envelope(expiry, value))?;
        Ok(true)
    }

    /// Deletes every entry that has expired now, however recent the last sweep, in one write
    /// of the wrapped store (up to [`sweep_limit`](TtlConfig::sweep_limit) of them). Returns
    /// how many entries it deleted. For a store on the wall clock whose input is idle: a
    /// punctuator can call it.
    ///
    /// # Errors
    /// The wrapped store's errors.
    pub fn purge_expired(&self) -> Result<usize> {
        self.apply(None, Vec::new(), true)
    }

    /// The expiry of a write made at `now` with `ttl_ms`.
    fn expiry(now: i64, ttl_ms: Option<i64>) -> i64 {
        match ttl_ms {
            // Before the first record, stream time is `i64::MIN`: count from 0, not from it.
            Some(ttl) => now.max(0).saturating_add(ttl).min(NEVER - 1),
            None => NEVER,
        }
    }

    /// One write of the wrapped store: advances stream time to `advance`, deletes what has
    /// expired (when a sweep is due, or `force`), then makes `writes`; all in one batch.
    /// Returns the number of entries the sweep deleted.
    fn apply(&self, advance: Option<i64>, writes: Vec<Write<'_>>, force: bool) -> Result<usize> {
        self.check_open()?;
        self.apply_locked(&mut self.clock.lock(), advance, writes, force)
    }

    /// As [`apply`](Self::apply), under the clock lock the caller holds.
    fn apply_locked(
        &self,
        clock: &mut Clock,
        advance: Option<i64>,
        writes: Vec<Write<'_>>,
        force: bool,
    ) -> Result<usize> {
        let mut next = *clock;
        let mut batch = WriteBatch::with_capacity(writes.len() * 2 + 1);
        if let Some(timestamp) = advance
            && timestamp > next.stream_time
        {
            next.stream_time = timestamp;
            batch.put(META_KEY, encode_ts(timestamp));
        }
        let now = self.now_of(&next);
        let mut swept = 0;
        if force
            || now
                >= next
                    .last_sweep
                    .saturating_add(self.config.sweep_interval_ms)
        {
            let complete;
            (swept, complete) = self.sweep(now, &mut batch)?;
            if complete {
                next.last_sweep = now;
            }
        }
        // The sweep's deletes come first: a write of a key it deletes wins.
        for write in writes {
            match write {
                Write::Put(key, value, ttl) => {
                    let ttl = ttl.unwrap_or(self.config.ttl_ms);
                    let expiry = Self::expiry(now, ttl);
                    batch.put(data_key(key), envelope(expiry, value));
                    if expiry != NEVER {
                        batch.put(index_key(expiry, key), Vec::new());
                    }
                }
                Write::Delete(key) => {
                    batch.delete(data_key(key));
                }
            }
        }
        if !batch.is_empty() {
            self.inner.write(batch)?;
        }
        *clock = next;
        Ok(swept)
    }

    /// Adds to `batch` the deletes of entries expired at `now`, and of the index keys that
    /// led to them. Returns how many entries, and whether every expired index key was read.
    fn sweep(&self, now: i64, batch: &mut WriteBatch) -> Result<(usize, bool)> {
        let from = [INDEX_TAG];
        let mut deleted = 0;
        // Every index key of an expiry at or before `now`.
        let upper = match now.checked_add(1) {
            Some(after) => {
                let mut key = vec![INDEX_TAG];
                key.extend_from_slice(&encode_ts(after));
                key
            }
            None => vec![INDEX_TAG + 1],
        };
        let expired = self
            .inner
            .range(Bound::Included(&from[..]), Bound::Excluded(&upper[..]))?;
        for (read, entry) in expired.enumerate() {
            let (index, _) = entry?;
            if read == self.config.sweep_limit {
                return Ok((deleted, false));
            }
            let (expiry, key) = split_index_key(&index)?;
            let data = data_key(key);
            // An overwrite since the index key was written moved the entry's expiry: only
            // the index key goes.
            if let Some(stored) = self.inner.get(&data)?
                && decode_envelope(&stored)?.0 == expiry
            {
                batch.delete(data);
                deleted += 1;
            }
            batch.delete(index);
        }
        Ok((deleted, true))
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// `range` or `reverse_range` of the wrapped store over the data keys between the bounds,
    /// without expired entries or the tag.
    fn scan_data(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        self.check_open()?;
        let from = match from {
            Bound::Included(key) => Bound::Included(data_key(key)),
            Bound::Excluded(key) => Bound::Excluded(data_key(key)),
            Bound::Unbounded => Bound::Included(vec![DATA_TAG]),
        };
        let to = match to {
            Bound::Included(key) => Bound::Included(data_key(key)),
            Bound::Excluded(key) => Bound::Excluded(data_key(key)),
            Bound::Unbounded => Bound::Excluded(vec![DATA_TAG + 1]),
        };
        let (from, to) = (
            from.as_ref().map(Vec::as_slice),
            to.as_ref().map(Vec::as_slice),
        );
        let iter = if reverse {
            self.inner.reverse_range(from, to)?
        } else {
            self.inner.range(from, to)?
        };
        let now = self.now();
        Ok(Box::new(iter.filter_map(move |entry| {
            let (key, stored) = match entry {
                Ok(pair) => pair,
                Err(err) => return Some(Err(err)),
            };
            match live_value(&stored, now) {
                Ok(Some(value)) => Some(Ok((key[1..].to_vec(), value))),
                Ok(None) => None,
                Err(err) => Some(Err(err)),
            }
        })))
    }
}

/// A write of a caller, before its layout.
enum Write<'a> {
    /// A put and its own TTL: `None` takes the store's, `Some(None)` never expires.
    Put(&'a [u8], &'a [u8], Option<Option<i64>>),
    Delete(&'a [u8]),
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

fn data_key(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(DATA_TAG);
    out.extend_from_slice(key);
    out
}

fn index_key(expiry: i64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 9);
    out.push(INDEX_TAG);
    out.extend_from_slice(&encode_ts(expiry));
    out.extend_from_slice(key);
    out
}

fn split_index_key(index: &[u8]) -> Result<(i64, &[u8])> {
    if index.len() < 9 {
        return Err(Error::Corruption(format!(
            "a TTL index key of {} bytes",
            index.len()
        )));
    }
    Ok((decode_ts(&index[1..9])?, &index[9..]))
}

fn envelope(expiry: i64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENVELOPE_LEN + value.len());
    out.push(ENVELOPE_V1);
    out.extend_from_slice(&encode_ts(expiry));
    out.extend_from_slice(value);
    out
}

/// The expiry and the value of a stored envelope.
fn decode_envelope(stored: &[u8]) -> Result<(i64, &[u8])> {
    match stored.first() {
        Some(&ENVELOPE_V1) if stored.len() >= ENVELOPE_LEN => Ok((
            decode_ts(&stored[1..ENVELOPE_LEN])?,
            &stored[ENVELOPE_LEN..],
        )),
        Some(&ENVELOPE_V1) => Err(Error::Corruption(format!(
            "a TTL envelope of {} bytes",
            stored.len()
        ))),
        Some(other) => Err(Error::Corruption(format!(
            "a TTL envelope of unknown layout {other}"
        ))),
        None => Err(Error::Corruption("an empty TTL envelope".into())),
    }
}

/// The value of a stored envelope, or `None` once it expired at `now`.
fn live_value(stored: &[u8], now: i64) -> Result<Option<Vec<u8>>> {
    let (expiry, value) = decode_envelope(stored)?;
    Ok((expiry > now).then(|| value.to_vec()))
}

impl KeyValueStore for TtlStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        let now = self.now();
        match self.inner.get(&data_key(key))? {
            Some(stored) => live_value(&stored, now),
            None => Ok(None),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        store_api::limits::check_entry(key, value)?;
        self.apply(None, vec![Write::Put(key, value, None)], false)
            .map(drop)
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        store_api::limits::check_entry(key, value)?;
        // The lock is held from the lookup to the write, so no other write slips in between.
        let mut clock = self.clock.lock();
        let now = self.now_of(&clock);
        if let Some(stored) = self.inner.get(&data_key(key))?
            && let Some(existing) = live_value(&stored, now)?
        {
            return Ok(Some(existing));
        }
        self.apply_locked(&mut clock, None, vec![Write::Put(key, value, None)], false)?;
        Ok(None)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        store_api::limits::check_key(key)?;
        self.apply(None, vec![Write::Delete(key)], false).map(drop)
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        batch.validate()?;
        let writes = batch
            .ops()
            .iter()
            .map(|op| match op {
                BatchOp::Put { key, value } => Write::Put(key, value, None),
                BatchOp::Delete { key } => Write::Delete(key),
            })
            .collect();
        self.apply(None, writes, false).map(drop)
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.scan_data(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.scan_data(from, to, true)
    }

    /// The wrapped store's estimate, which also counts index keys and expired entries not
    /// swept yet.
    fn approximate_len(&self) -> Result<u64> {
        self.check_open()?;
        self.inner.approximate_len()
    }

    fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.inner.flush()
    }

    /// Closes the wrapped store; if that fails, this store stays open, so the caller can retry.
    fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.inner.close()?;
        self.closed.store(true, Ordering::Release);
        Ok(())
    }
}

impl fmt::Debug for TtlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TtlStore")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .field("clock", &*self.clock.lock())
            .finish_non_exhaustive()
    }
}
