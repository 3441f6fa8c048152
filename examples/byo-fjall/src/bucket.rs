//! Keys longer than fjall takes. fjall's keys stop at 65535 bytes and the store API's at
//! [`MAX_KEY_LEN`](store_api::limits::MAX_KEY_LEN) (65536), so every key of 65535 bytes or
//! more lives in a *bucket*: one fjall entry under the key's first 65535 bytes, holding the
//! value of that prefix itself (if it is a key) and of each one-byte extension of it.
//!
//! Order is kept: no key shorter than 65535 bytes sorts between a prefix and its extensions,
//! so a bucket expands in place, the prefix first, then the extensions by their last byte.

use std::ops::{Bound, RangeBounds};

use store_api::{Error, KvPair, Result};

/// The longest key fjall takes, and the length of every bucket's fjall key.
pub(crate) const BUCKET_LEN: usize = u16::MAX as usize;

/// A bucket's entries: the byte after the prefix (`None` for the prefix itself) and its value,
/// sorted with `None` first.
pub(crate) type Entries = Vec<(Option<u8>, Vec<u8>)>;

/// Whether `key` is kept in a bucket; then its bucket's fjall key and its extra byte.
pub(crate) fn split(key: &[u8]) -> Option<(&[u8], Option<u8>)> {
    if key.len() < BUCKET_LEN {
        return None;
    }
    let (prefix, extra) = key.split_at(BUCKET_LEN);
    Some((prefix, extra.first().copied()))
}

/// Encodes `entries`: per entry a tag (0 for the prefix, 1 then the byte for an extension),
/// the value's length as a big-endian u32, then the value.
pub(crate) fn encode(entries: &Entries) -> Vec<u8> {
    let size: usize = entries.iter().map(|(_, value)| value.len() + 6).sum();
    let mut out = Vec::with_capacity(size);
    for (extra, value) in entries {
        match extra {
            None => out.push(0),
            Some(byte) => out.extend_from_slice(&[1, *byte]),
        }
        // Values are at most MAX_VALUE_LEN (1 GiB), which fits a u32.
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// Decodes what [`encode`] wrote.
///
/// # Errors
/// `Corruption` for bytes it did not write.
pub(crate) fn decode(mut bytes: &[u8]) -> Result<Entries> {
    let bad = || Error::Corruption("fjall: a long-key bucket does not decode".into());
    let mut entries = Entries::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        let (extra, rest) = match (tag, rest.split_first()) {
            (0, _) => (None, rest),
            (1, Some((&byte, rest))) => (Some(byte), rest),
            _ => return Err(bad()),
        };
        let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_be_bytes(*len) as usize;
        if rest.len() < len {
            return Err(bad());
        }
        let (value, rest) = rest.split_at(len);
        entries.push((extra, value.to_vec()));
        bytes = rest;
    }
    Ok(entries)
}

/// Sets (`Some`) or removes (`None`) the value of `extra` in `entries`, keeping them sorted.
pub(crate) fn set(entries: &mut Entries, extra: Option<u8>, value: Option<&[u8]>) {
    match (entries.binary_search_by_key(&extra, |(e, _)| *e), value) {
        (Ok(at), Some(value)) => entries[at].1 = value.to_vec(),
        (Ok(at), None) => {
            entries.remove(at);
        }
        (Err(at), Some(value)) => entries.insert(at, (extra, value.to_vec())),
        (Err(_), None) => {}
    }
}

/// The value of `extra` in `entries`.
pub(crate) fn find(entries: &Entries, extra: Option<u8>) -> Option<&[u8]> {
    let at = entries.binary_search_by_key(&extra, |(e, _)| *e).ok()?;
    Some(&entries[at].1)
}

/// The pairs of the bucket under `prefix` that lie within `from` and `to`, in key order.
///
/// # Errors
/// `Corruption` when the bucket does not decode.
pub(crate) fn expand(
    prefix: &[u8],
    bucket: &[u8],
    from: Bound<&[u8]>,
    to: Bound<&[u8]>,
) -> Result<Vec<KvPair>> {
    let pairs = decode(bucket)?.into_iter().map(|(extra, value)| {
        let mut key = prefix.to_vec();
        key.extend(extra);
        (key, value)
    });
    Ok(pairs
        .filter(|(key, _)| RangeBounds::<[u8]>::contains(&(from, to), key.as_slice()))
        .collect())
}

/// Bounds for fjall that select every key the store's `from` and `to` select, with each
/// bound on a long key widened to its bucket (whose entries [`expand`] then filters).
pub(crate) fn widen<'a>(
    from: Bound<&'a [u8]>,
    to: Bound<&'a [u8]>,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    let widen = |bound: Bound<&'a [u8]>| match bound {
        Bound::Included(key) | Bound::Excluded(key) if key.len() >= BUCKET_LEN => {
            Bound::Included(&key[..BUCKET_LEN])
        }
        other => other,
    };
    (widen(from), widen(to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_in_order() {
        let mut entries = Entries::new();
        set(&mut entries, Some(7), Some(b"seven"));
        set(&mut entries, None, Some(b""));
        set(&mut entries, Some(0), Some(b"zero"));
        set(&mut entries, Some(7), Some(b"SEVEN"));
        set(&mut entries, Some(9), None);
        let decoded = decode(&encode(&entries)).expect("decode");
        assert_eq!(decoded, entries);
        assert_eq!(
            entries.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
            [None, Some(0), Some(7)]
        );
        assert_eq!(find(&entries, Some(7)), Some(&b"SEVEN"[..]));
        assert!(decode(&[1]).is_err() && decode(&[0, 0, 0, 0, 9]).is_err());
    }
}
