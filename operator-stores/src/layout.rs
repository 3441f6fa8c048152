//! Byte layouts shared by the window, session and versioned stores: timestamps that sort like
//! numbers, keys that sort like themselves and never prefix one another, and time segments.

use std::ops::Bound;

use store_api::{Error, KeyValueStore, Result};

/// The key of a store's own bookkeeping (its stream time).
pub(crate) const META_KEY: &[u8] = b"";

/// The first byte of every data key of the window and session stores. The stores never read
/// or write a key starting with `0x00` ([`APP_KEY_TAG`]) other than [`META_KEY`].
pub(crate) const DATA_TAG: u8 = 0x01;

/// The first byte of keys an application may keep in the same underlying store as a window,
/// session or versioned store, such as its input position, so that one commit of a
/// `LoggedStore` carries both.
pub const APP_KEY_TAG: u8 = 0x00;

/// The prefix of every data key in `segment`: [`DATA_TAG`] and the segment id.
pub(crate) fn segment_prefix(segment: i64) -> [u8; 9] {
    let mut out = [DATA_TAG; 9];
    out[1..].copy_from_slice(&encode_ts(segment));
    out
}

/// A timestamp as 8 big-endian bytes with the sign bit flipped, so byte order is numeric order.
pub(crate) fn encode_ts(ts: i64) -> [u8; 8] {
    ((ts as u64) ^ (1 << 63)).to_be_bytes()
}

/// The inverse of [`encode_ts`].
///
/// # Errors
/// `Corruption` when `bytes` is not 8 bytes long.
pub(crate) fn decode_ts(bytes: &[u8]) -> Result<i64> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| Error::Corruption(format!("a timestamp of {} bytes", bytes.len())))?;
    Ok((u64::from_be_bytes(array) ^ (1 << 63)) as i64)
}

/// Appends `key` escaped and terminated: `0x00` becomes `0x00 0xFF` and `0x00 0x00` ends it.
/// The result sorts exactly as the keys do and no encoded key is a prefix of another, so a
/// range over one key's entries never reaches into a longer key's.
pub(crate) fn push_key(out: &mut Vec<u8>, key: &[u8]) {
    for &byte in key {
        out.push(byte);
        if byte == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Reads a key written by [`push_key`] from the start of `bytes`; returns it and the number of
/// bytes it took.
///
/// # Errors
/// `Corruption` for a bad escape or a missing terminator.
pub(crate) fn read_key(bytes: &[u8]) -> Result<(Vec<u8>, usize)> {
    let mut key = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if byte != 0 {
            key.push(byte);
            at += 1;
            continue;
        }
        match bytes.get(at + 1) {
            Some(0) => return Ok((key, at + 2)),
            Some(0xFF) => key.push(0),
            _ => return Err(Error::Corruption("a bad escape in a stored key".into())),
        }
        at += 2;
    }
    Err(Error::Corruption("a stored key without terminator".into()))
}

/// Reads the persisted stream time, `i64::MIN` when none was written.
///
/// # Errors
/// A store error, or `Corruption` for a malformed value.
pub(crate) fn read_stream_time(store: &dyn KeyValueStore) -> Result<i64> {
    read_time(store, META_KEY)
}

/// Reads a timestamp persisted under `key`, `i64::MIN` when none was written.
///
/// # Errors
/// A store error, or `Corruption` for a malformed value.
pub(crate) fn read_time(store: &dyn KeyValueStore, key: &[u8]) -> Result<i64> {
    store
        .get(key)?
        .map_or(Ok(i64::MIN), |bytes| decode_ts(&bytes))
}

/// `grace_ms` as a grace period of windows or sessions.
///
/// # Errors
/// `InvalidArgument` for a negative grace period.
pub(crate) fn checked_grace(grace_ms: i64) -> Result<i64> {
    if grace_ms < 0 {
        return Err(Error::invalid(format!(
            "negative grace period {grace_ms} ms"
        )));
    }
    Ok(grace_ms)
}

/// Time cut into segments of `interval` milliseconds: segment `ts.div_euclid(interval)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segments {
    pub(crate) interval: i64,
    pub(crate) retention: i64,
}

/// Live segments are capped so that a fetch opens a bounded number of ranges.
pub(crate) const MAX_LIVE_SEGMENTS: i64 = 4096;

impl Segments {
    /// Checks the parameters.
    ///
    /// # Errors
    /// `InvalidArgument` for a non-positive retention or interval, or more than
    /// [`MAX_LIVE_SEGMENTS`] segments within the retention.
    pub(crate) fn new(retention: i64, interval: i64) -> Result<Segments> {
        if retention <= 0 || interval <= 0 {
            return Err(Error::invalid(format!(
                "retention ({retention} ms) and segment interval ({interval} ms) must be positive"
            )));
        }
        if retention / interval > MAX_LIVE_SEGMENTS {
            return Err(Error::invalid(format!(
                "retention {retention} ms over segments of {interval} ms keeps more than \
                 {MAX_LIVE_SEGMENTS} segments live; use a longer segment interval"
            )));
        }
        Ok(Segments {
            interval,
            retention,
        })
    }

    /// The segment holding timestamp `ts`.
    pub(crate) fn segment(&self, ts: i64) -> i64 {
        ts.div_euclid(self.interval)
    }

    /// The oldest timestamp still retained at `stream_time`.
    pub(crate) fn min_live(&self, stream_time: i64) -> i64 {
        stream_time.saturating_sub(self.retention).saturating_add(1)
    }

    /// The segment ids overlapping `[from, to]` among the live ones at `stream_time`, oldest
    /// first.
    pub(crate) fn live_overlapping(&self, stream_time: i64, from: i64, to: i64) -> Vec<i64> {
        if stream_time == i64::MIN {
            return Vec::new();
        }
        let low = self.segment(from.max(self.min_live(stream_time)));
        let high = self.segment(to.min(stream_time));
        if low > high {
            return Vec::new();
        }
        (low..=high).collect()
    }

    /// The first segment live at `stream_time`: the one holding
    /// [`min_live`](Self::min_live)`(stream_time)`. Every segment before it has expired.
    pub(crate) fn first_live(&self, stream_time: i64) -> i64 {
        self.segment(self.min_live(stream_time))
    }

    /// Removes every record in the segments from `cleaned_below` up to, not including,
    /// `first_live`, with one [`delete_range`](KeyValueStore::delete_range) of the store (one
    /// range tombstone on RocksDB; a scan of the expired range only and per-key deletes
    /// elsewhere, and on a changelogged store, which logs a tombstone per key).
    ///
    /// # Errors
    /// A store error; then a lower part of the range may be removed.
    pub(crate) fn expire(
        &self,
        store: &dyn KeyValueStore,
        cleaned_below: i64,
        first_live: i64,
    ) -> Result<()> {
        let from = segment_prefix(cleaned_below);
        let to = segment_prefix(first_live);
        store.delete_range(Bound::Included(&from), Bound::Excluded(&to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_sort_numerically() {
        let values = [i64::MIN, -5, -1, 0, 1, 60_000, i64::MAX];
        for pair in values.windows(2) {
            assert!(encode_ts(pair[0]) < encode_ts(pair[1]));
        }
        for value in values {
            assert_eq!(decode_ts(&encode_ts(value)).unwrap(), value);
        }
    }

    #[test]
    fn keys_sort_and_round_trip() {
        let keys: [&[u8]; 6] = [b"", b"\x00", b"\x00\x00", b"\x00\x01", b"a", b"a\x00b"];
        let encoded: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| {
                let mut out = Vec::new();
                push_key(&mut out, key);
                out
            })
            .collect();
        for pair in encoded.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(!pair[1].starts_with(&pair[0]));
        }
        for (key, bytes) in keys.iter().zip(&encoded) {
            assert_eq!(read_key(bytes).unwrap(), (key.to_vec(), bytes.len()));
        }
        assert!(read_key(b"ab").is_err());
        assert!(read_key(b"a\x00\x01").is_err());
    }

    #[test]
    fn live_segments_are_bounded_by_retention() {
        let segments = Segments::new(100, 10).unwrap();
        assert_eq!(
            segments.live_overlapping(i64::MIN, i64::MIN, i64::MAX),
            Vec::<i64>::new()
        );
        assert_eq!(segments.live_overlapping(250, i64::MIN, i64::MAX).len(), 11);
        assert_eq!(segments.live_overlapping(250, 200, 219), vec![20, 21]);
        assert!(Segments::new(1 << 40, 1).is_err());
        assert!(Segments::new(0, 1).is_err());
    }
}
