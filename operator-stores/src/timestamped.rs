//! The timestamped key-value store: each value carries the timestamp of the record that wrote
//! it (Kafka Streams' `TimestampedKeyValueStore`).

use std::marker::PhantomData;

use store_api::{Error, Result};

use crate::codec::{OrderedKeys, Postcard, ValueCodec};
use crate::typed::TypedStore;

/// A value and the timestamp (milliseconds since the epoch, the record's event time) of the
/// record that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ValueAndTimestamp<V> {
    /// The value.
    pub value: V,
    /// The record timestamp, in milliseconds.
    pub timestamp: i64,
}

impl<V> ValueAndTimestamp<V> {
    /// `value` written by a record of time `timestamp`.
    pub fn new(value: V, timestamp: i64) -> Self {
        ValueAndTimestamp { value, timestamp }
    }
}

/// The value codec of a timestamped store: the timestamp as 8 bytes big-endian, then the
/// value through `VC` (Kafka Streams' layout for timestamped stores, so the timestamp is read
/// without decoding the value).
#[derive(Debug, Clone, Copy, Default)]
pub struct Timestamped<VC = Postcard>(PhantomData<fn() -> VC>);

impl<V, VC: ValueCodec<V>> ValueCodec<ValueAndTimestamp<V>> for Timestamped<VC> {
    fn encode_value(value: &ValueAndTimestamp<V>) -> Result<Vec<u8>> {
        let encoded = VC::encode_value(&value.value)?;
        let mut bytes = Vec::with_capacity(8 + encoded.len());
        bytes.extend_from_slice(&value.timestamp.to_be_bytes());
        bytes.extend_from_slice(&encoded);
        Ok(bytes)
    }

    fn decode_value(bytes: &[u8]) -> Result<ValueAndTimestamp<V>> {
        let Some((timestamp, value)) = bytes.split_first_chunk::<8>() else {
            return Err(Error::Corruption(format!(
                "a timestamped value needs at least 8 bytes, found {}",
                bytes.len()
            )));
        };
        Ok(ValueAndTimestamp {
            value: VC::decode_value(value)?,
            timestamp: i64::from_be_bytes(*timestamp),
        })
    }
}

/// A timestamped key-value store: a [`TypedStore`] whose values are [`ValueAndTimestamp`].
///
/// # Key layout and costs
/// As [`TypedStore`]: one store key per key, so gets, puts and ranges cost what they cost on
/// the backend; each value is 8 bytes longer. Operators that must ignore out-of-order updates
/// compare the stored timestamp with the record's (see
/// [`put_if_newer`](TypedStore::put_if_newer)).
///
/// # Expiry
/// None, as for [`TypedStore`]: the timestamp records when the value was written, it is not a
/// time to live.
///
/// ```
/// use std::sync::Arc;
/// use statestore_memory::{Config, MemoryStore};
/// use statestore_operator_stores::{TimestampedStore, ValueAndTimestamp};
///
/// let latest: TimestampedStore<String, f64> =
///     TimestampedStore::new(Arc::new(MemoryStore::new(Config::default())));
/// latest.put(&"sensor-1".to_string(), &ValueAndTimestamp::new(21.5, 1_000))?;
/// // An older reading does not replace a newer one.
/// assert!(!latest.put_if_newer(&"sensor-1".to_string(), &ValueAndTimestamp::new(19.0, 900))?);
/// assert_eq!(latest.get(&"sensor-1".to_string())?, Some(ValueAndTimestamp::new(21.5, 1_000)));
/// # Ok::<(), store_api::Error>(())
/// ```
pub type TimestampedStore<K, V, KC = OrderedKeys, VC = Postcard> =
    TypedStore<K, ValueAndTimestamp<V>, KC, Timestamped<VC>>;

impl<K, V, KC, VC> TypedStore<K, ValueAndTimestamp<V>, KC, Timestamped<VC>>
where
    KC: crate::codec::KeyCodec<K>,
    VC: ValueCodec<V>,
{
    /// Writes `value` unless the key holds a value with a later timestamp; returns whether it
    /// wrote. Equal timestamps write (the later record wins), as Kafka Streams does. One
    /// `get` and, when newer, one `put`; not atomic against a concurrent writer of the key.
    ///
    /// # Errors
    /// As [`get`](TypedStore::get) and [`put`](TypedStore::put).
    pub fn put_if_newer(&self, key: &K, value: &ValueAndTimestamp<V>) -> Result<bool> {
        let key = KC::encode_key(key)?;
        // Only the stored timestamp is read: the old value is never decoded.
        if let Some(existing) = self.inner().get(&key)? {
            let Some(timestamp) = existing.first_chunk::<8>() else {
                return Err(Error::Corruption(format!(
                    "a timestamped value needs at least 8 bytes, found {}",
                    existing.len()
                )));
            };
            if i64::from_be_bytes(*timestamp) > value.timestamp {
                return Ok(false);
            }
        }
        self.inner()
            .put(&key, &Timestamped::<VC>::encode_value(value)?)?;
        Ok(true)
    }
}
