//! [`VersionedStore`]: every value of a key with the timestamp it became valid at, so reads
//! can ask what a key held at any time within a history retention (Kafka's KIP-889), over any
//! [`KeyValueStore`].
//!
//! # Semantics
//! A put at `ts` makes a version valid from `ts` until the next version's timestamp; puts may
//! arrive out of order. A delete puts a tombstone version. The stream time is the latest
//! timestamp put; `stream_time - history_retention` is the cutoff. A put or delete older than
//! the cutoff is refused and counted ([`PutOutcome::Expired`]). The latest version of a key
//! never expires: [`get`] always answers it, and [`get_as_of`] a time older than the cutoff
//! answers it when it is a value put at or before that time, else `None`, exactly as Kafka
//! Streams' `RocksDBVersionedStore` does. [`get_versions`] is KIP-968's multi-version query.
//!
//! # Kafka Streams
//! Same answers as Kafka Streams' versioned store for puts, deletes, `get`, `get(key,
//! asOf)` and the put's `validTo` ([`put_version`]); its own tests are ported to the
//! conformance suite (`conformance::kafka_versioned`). One deliberate difference, in
//! [`get_versions`]: Kafka Streams drops old versions a segment at a time, so a range query
//! reaching before the cutoff may or may not see versions that stopped being valid before
//! it; this store never returns them, so the answer does not depend on segment boundaries.
//!
//! # Key layout
//! In the underlying store (keys starting with [`APP_KEY_TAG`](crate::APP_KEY_TAG), `0x00`, are
//! the application's):
//! ```text
//! 0x01 | key, escaped and terminated | timestamp (8)                    a version: 0x01 value, or 0x00 (tombstone)
//! 0x02 | dead time (8) | key, escaped and terminated | timestamp (8)    cleanup index, empty value
//! (the empty key)                                                       the stream time
//! ```
//! with the [window store](crate::window)'s encodings. A version's dead time is when it stops
//! being queryable: for a value, the timestamp of the next version (a latest value has none
//! and no index entry); for a tombstone, its own timestamp.
//!
//! # What a read costs
//! [`get`] is one reverse seek in the key's versions; [`get_as_of`] a reverse seek to the
//! version at or before the time and a forward seek to the next one (its `valid_to`). A put
//! reads the versions around its timestamp (three seeks) and writes one batch.
//!
//! # Expiry
//! A version whose dead time is at or before the cutoff can answer no query. The write that
//! moves the stream time reads the cleanup index up to the cutoff (that range holds only such
//! versions) and deletes them and their index entries in its own batch: the cost is the number
//! of expired versions, never a scan of the live ones.
//!
//! [`get`]: VersionedStore::get
//! [`get_as_of`]: VersionedStore::get_as_of
//! [`get_versions`]: VersionedStore::get_versions
//! [`put_version`]: VersionedStore::put_version

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use store_api::{Error, KeyValueStore, KvIter, Result, WriteBatch};

use crate::layout::{META_KEY, decode_ts, encode_ts, push_key, read_stream_time};
use crate::window::PutOutcome;

const VERSION_TAG: u8 = 0x01;
const INDEX_TAG: u8 = 0x02;

/// A value and the span of time it was valid for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedRecord {
    /// The value.
    pub value: Vec<u8>,
    /// When it became valid, in milliseconds.
    pub timestamp: i64,
    /// When the next version replaced it (exclusive), `None` while it is the latest.
    pub valid_to: Option<i64>,
}

/// What [`VersionedStore::put_version`] did: Kafka Streams' put return code (KIP-914).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum VersionPut {
    /// Written. The new version is valid until `valid_to` (exclusive), the timestamp of the
    /// next version, `None` while it is the latest (Kafka's
    /// `PUT_RETURN_CODE_VALID_TO_UNDEFINED`).
    Written {
        /// When the next version replaces this one.
        valid_to: Option<i64>,
    },
    /// Refused, older than the history retention (Kafka's `PUT_RETURN_CODE_NOT_PUT`), and
    /// counted in [`VersionedStore::expired_writes`].
    Expired,
}

/// The order of [`VersionedStore::get_versions`]: by the versions' timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultOrder {
    /// Oldest first (Kafka's `withAscendingTimestamps`).
    Ascending,
    /// Newest first (Kafka's `withDescendingTimestamps`, and what its RocksDB store gives for
    /// `ResultOrder.ANY`).
    Descending,
}

/// A version as stored: a value or a tombstone, at a timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    ts: i64,
    value: Option<Vec<u8>>,
}

/// A versioned key-value store over any [`KeyValueStore`]; see the [module docs](self).
///
/// ```
/// use std::sync::Arc;
/// use statestore_operator_stores::versioned::VersionedStore;
/// use statestore_memory::{Config, MemoryStore};
///
/// let prices = VersionedStore::open(Arc::new(MemoryStore::new(Config::default())), 86_400_000)?;
/// let _ = prices.put(b"apple", b"3", 1_000)?;
/// let _ = prices.put(b"apple", b"4", 5_000)?;
/// assert_eq!(prices.get_as_of(b"apple", 4_999)?.map(|r| r.value), Some(b"3".to_vec()));
/// assert_eq!(prices.get(b"apple")?.map(|r| r.value), Some(b"4".to_vec()));
/// assert_eq!(prices.get_as_of(b"apple", 999)?, None);
/// # Ok::<(), store_api::Error>(())
/// ```
#[derive(Debug)]
pub struct VersionedStore {
    store: Arc<dyn KeyValueStore>,
    history_retention: i64,
    stream_time: Mutex<i64>,
    expired: AtomicU64,
}

impl VersionedStore {
    /// Opens a versioned store kept in `store`, which holds nothing else but keys starting with
    /// [`APP_KEY_TAG`](crate::APP_KEY_TAG), keeping history for
    /// `history_retention_ms` before the stream time.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative retention, or a store error.
    pub fn open(store: Arc<dyn KeyValueStore>, history_retention_ms: i64) -> Result<Self> {
        if history_retention_ms < 0 {
            return Err(Error::invalid(format!(
                "negative history retention {history_retention_ms} ms"
            )));
        }
        let stream_time = read_stream_time(store.as_ref())?;
        Ok(VersionedStore {
            store,
            history_retention: history_retention_ms,
            stream_time: Mutex::new(stream_time),
            expired: AtomicU64::new(0),
        })
    }

    /// The underlying store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.store
    }

    /// The latest timestamp put, `None` before the first put.
    pub fn stream_time(&self) -> Option<i64> {
        let time = *self.stream_time.lock();
        (time != i64::MIN).then_some(time)
    }

    /// How many puts and deletes were refused as older than the history retention.
    pub fn expired_writes(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// Stores `value` as the version of `key` valid from `timestamp`.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or value, or a store error.
    pub fn put(&self, key: &[u8], value: &[u8], timestamp: i64) -> Result<PutOutcome> {
        self.write_version(key, Some(value), timestamp)
            .map(|written| written.outcome)
    }

    /// Stores `value` (`None`: a tombstone) as the version of `key` valid from `timestamp`,
    /// and says until when it is valid: Kafka Streams' `put(key, value, timestamp)` with its
    /// return code. A version put at the timestamp of an existing one replaces it.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or value, or a store error.
    pub fn put_version(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
    ) -> Result<VersionPut> {
        let written = self.write_version(key, value, timestamp)?;
        Ok(match written.outcome {
            PutOutcome::Written(_) => VersionPut::Written {
                valid_to: written.next,
            },
            PutOutcome::Expired | PutOutcome::Late => VersionPut::Expired,
        })
    }

    /// Puts a tombstone for `key` at `timestamp` and returns the record it ends: the one valid
    /// at `timestamp` before the delete. A refused delete returns `None` and is counted.
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key, or a store error.
    pub fn delete(&self, key: &[u8], timestamp: i64) -> Result<Option<VersionedRecord>> {
        self.write_version(key, None, timestamp)
            .map(|written| written.before)
    }

    /// The latest version of `key`, or `None` when it has none or it is a tombstone.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed entry.
    pub fn get(&self, key: &[u8]) -> Result<Option<VersionedRecord>> {
        let latest = self.floor(key, i64::MAX)?;
        Ok(latest.and_then(|version| {
            version.value.map(|value| VersionedRecord {
                value,
                timestamp: version.ts,
                valid_to: None,
            })
        }))
    }

    /// The version of `key` valid at `timestamp`: the latest at or before it, or `None` when
    /// there is none or it is a tombstone. Older than the history retention, only the latest
    /// version answers (when it is a value put at or before `timestamp`), as in Kafka Streams:
    /// the latest version never expires, and older history is `None` whether or not it is
    /// still stored.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed entry.
    pub fn get_as_of(&self, key: &[u8], timestamp: i64) -> Result<Option<VersionedRecord>> {
        let stream_time = *self.stream_time.lock();
        if timestamp < self.cutoff(stream_time) {
            return Ok(self
                .get(key)?
                .filter(|latest| latest.timestamp <= timestamp));
        }
        self.as_of(key, timestamp)
    }

    /// Every value version of `key` valid at some time in `[from, to]` (both inclusive), with
    /// its validity, in `order`: KIP-968's `VersionedKeyQuery` with `fromTime` and `toTime`. A
    /// version `[timestamp, valid_to)` qualifies when `timestamp <= to` and it is still valid
    /// after `from` (`valid_to > from`, or it is the latest). Tombstones end versions and are
    /// never returned. `from` after `to` yields nothing.
    ///
    /// History retention, as in Kafka Streams: when `to` is older than the cutoff only the
    /// latest version can answer (a value put at or before `to`). Otherwise versions that
    /// stopped being valid at or before the cutoff are never returned; Kafka Streams may
    /// return them until their segment is dropped, which depends on its segment interval.
    ///
    /// Returns a `Vec`: one key's versions within the retention, read in one range.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed entry.
    pub fn get_versions(
        &self,
        key: &[u8],
        from: i64,
        to: i64,
        order: ResultOrder,
    ) -> Result<Vec<VersionedRecord>> {
        if from > to {
            return Ok(Vec::new());
        }
        let cutoff = self.cutoff(*self.stream_time.lock());
        if to < cutoff {
            let latest = self.get(key)?.filter(|latest| latest.timestamp <= to);
            return Ok(latest.into_iter().collect());
        }
        let lower = from.max(cutoff);
        // Newest first from `to` down; each version is valid until the one visited before it.
        let mut valid_to = self.after(key, to)?.map(|next| next.ts);
        let mut found = Vec::new();
        let (low, high) = (version_key(key, i64::MIN), version_key(key, to));
        for item in self
            .store
            .reverse_range(Bound::Included(&low), Bound::Included(&high))?
        {
            if valid_to.is_some_and(|end| end <= lower) {
                break;
            }
            let (entry, value) = item?;
            let version = decode_version(&entry, &value)?;
            if let Some(value) = version.value {
                found.push(VersionedRecord {
                    value,
                    timestamp: version.ts,
                    valid_to,
                });
            }
            valid_to = Some(version.ts);
        }
        if order == ResultOrder::Ascending {
            found.reverse();
        }
        Ok(found)
    }

    fn as_of(&self, key: &[u8], timestamp: i64) -> Result<Option<VersionedRecord>> {
        let Some(Version {
            ts,
            value: Some(value),
        }) = self.floor(key, timestamp)?
        else {
            return Ok(None);
        };
        let valid_to = self.after(key, ts)?.map(|next| next.ts);
        Ok(Some(VersionedRecord {
            value,
            timestamp: ts,
            valid_to,
        }))
    }

    fn cutoff(&self, stream_time: i64) -> i64 {
        stream_time.saturating_sub(self.history_retention)
    }

    fn write_version(&self, key: &[u8], value: Option<&[u8]>, ts: i64) -> Result<Written> {
        let entry = version_key(key, ts);
        store_api::limits::check_key(&index_key(ts, &entry))?;
        if let Some(value) = value {
            store_api::limits::check_value(value)?;
        }
        let mut stream_time = self.stream_time.lock();
        let mut batch = WriteBatch::new();
        if ts > *stream_time {
            *stream_time = ts;
            batch.put(META_KEY.to_vec(), encode_ts(ts).to_vec());
            self.clean(&mut batch, self.cutoff(ts))?;
        }
        if ts < self.cutoff(*stream_time) {
            self.store.write(batch)?;
            self.expired.fetch_add(1, Ordering::Relaxed);
            return Ok(Written {
                outcome: PutOutcome::Expired,
                before: None,
                next: None,
            });
        }
        let before = self.as_of(key, ts)?;
        let prev = self.floor(key, ts.saturating_sub(1))?.filter(|p| p.ts < ts);
        let same = self
            .store
            .get(&entry)?
            .map(|bytes| decode_value(&bytes))
            .transpose()?;
        let next = self.after(key, ts)?;
        let next_ts = next.as_ref().map(|n| n.ts);
        // Old and new dead times of the versions this write touches; see the module docs.
        if let Some(Version {
            ts: prev_ts,
            value: Some(_),
        }) = prev
        {
            let old_dead = if same.is_some() { Some(ts) } else { next_ts };
            let prev_entry = version_key(key, prev_ts);
            self.move_index(&mut batch, &prev_entry, old_dead, Some(ts));
        }
        let old_dead = same.map(|value| if value.is_some() { next_ts } else { Some(ts) });
        let new_dead = if value.is_some() { next_ts } else { Some(ts) };
        self.move_index(&mut batch, &entry, old_dead.flatten(), new_dead);
        batch.put(entry, encode_value(value));
        self.store.write(batch)?;
        Ok(Written {
            outcome: PutOutcome::Written(1),
            before,
            next: next_ts,
        })
    }

    /// Replaces the index entry of `entry` at `old` by one at `new`.
    fn move_index(&self, batch: &mut WriteBatch, entry: &[u8], old: Option<i64>, new: Option<i64>) {
        if old == new {
            return;
        }
        if let Some(old) = old {
            batch.delete(index_key(old, entry));
        }
        if let Some(new) = new {
            batch.put(index_key(new, entry), Vec::new());
        }
    }

    /// Deletes every version dead at or before `cutoff`, with its index entry.
    fn clean(&self, batch: &mut WriteBatch, cutoff: i64) -> Result<()> {
        let from = [INDEX_TAG];
        let mut to = vec![INDEX_TAG];
        to.extend_from_slice(&encode_ts(cutoff));
        to.push(0xFF);
        for item in self
            .store
            .range(Bound::Included(&from), Bound::Excluded(&to))?
        {
            let (index, _) = item?;
            let body = index
                .get(9..)
                .ok_or_else(|| Error::Corruption("a short version index key".into()))?;
            let mut version = vec![VERSION_TAG];
            version.extend_from_slice(body);
            batch.delete(version);
            batch.delete(index);
        }
        Ok(())
    }

    /// The latest version of `key` at or before `ts`.
    fn floor(&self, key: &[u8], ts: i64) -> Result<Option<Version>> {
        let (low, high) = (version_key(key, i64::MIN), version_key(key, ts));
        first_version(
            self.store
                .reverse_range(Bound::Included(&low), Bound::Included(&high))?,
        )
    }

    /// The earliest version of `key` after `ts`.
    fn after(&self, key: &[u8], ts: i64) -> Result<Option<Version>> {
        let (low, high) = (version_key(key, ts), version_key(key, i64::MAX));
        first_version(
            self.store
                .range(Bound::Excluded(&low), Bound::Included(&high))?,
        )
    }
}

/// What a write of a version did.
struct Written {
    outcome: PutOutcome,
    /// The record valid at the write's timestamp before it.
    before: Option<VersionedRecord>,
    /// The timestamp of the next version, where the written one stops being valid.
    next: Option<i64>,
}

/// The first version a scan of version keys yields.
fn first_version(mut versions: KvIter) -> Result<Option<Version>> {
    versions
        .next()
        .transpose()?
        .map(|(entry, value)| decode_version(&entry, &value))
        .transpose()
}

fn version_key(key: &[u8], ts: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 11);
    out.push(VERSION_TAG);
    push_key(&mut out, key);
    out.extend_from_slice(&encode_ts(ts));
    out
}

fn index_key(dead: i64, version_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(version_key.len() + 8);
    out.push(INDEX_TAG);
    out.extend_from_slice(&encode_ts(dead));
    out.extend_from_slice(version_key.get(1..).unwrap_or_default());
    out
}

fn encode_value(value: Option<&[u8]>) -> Vec<u8> {
    match value {
        None => vec![0],
        Some(value) => {
            let mut out = Vec::with_capacity(value.len() + 1);
            out.push(1);
            out.extend_from_slice(value);
            out
        }
    }
}

fn decode_value(bytes: &[u8]) -> Result<Option<Vec<u8>>> {
    match bytes.split_first() {
        Some((0, [])) => Ok(None),
        Some((1, value)) => Ok(Some(value.to_vec())),
        _ => Err(Error::Corruption("a malformed version value".into())),
    }
}

fn decode_version(entry: &[u8], value: &[u8]) -> Result<Version> {
    let ts_at = entry
        .len()
        .checked_sub(8)
        .ok_or_else(|| Error::Corruption("a short version key".into()))?;
    Ok(Version {
        ts: decode_ts(&entry[ts_at..])?,
        value: decode_value(value)?,
    })
}
