//! Codecs between typed keys and values and the bytes a [`KeyValueStore`] holds.
//!
//! Keys need an **order-preserving** codec, so that the byte order the store sorts by is the
//! logical order of the key type and typed ranges mean what they say: [`OrderedKeys`]. Values
//! only need to round-trip: [`Postcard`] (compact binary, the default) or [`Json`]. Records on
//! topics written by other clients are often [`Utf8`] strings, [`BigEndian`] integers or
//! [`Raw`] bytes, as Kafka's own serdes write them.
//!
//! [`KeyValueStore`]: store_api::KeyValueStore

use serde::Serialize;
use serde::de::DeserializeOwned;
use store_api::{Error, Result};

/// Turns keys of type `K` into bytes whose unsigned byte order is the order of `K`, and back.
///
/// An implementation promises, for every `a` and `b`: `a < b` if and only if
/// `encode_key(a) < encode_key(b)`, and `decode_key(encode_key(a)) == a`.
pub trait KeyCodec<K>: Send + Sync + 'static {
    /// The bytes of `key`.
    ///
    /// # Errors
    /// `InvalidArgument` when the key cannot be encoded.
    fn encode_key(key: &K) -> Result<Vec<u8>>;

    /// The key stored as `bytes`.
    ///
    /// # Errors
    /// `Corruption` when `bytes` is not the encoding of a `K`.
    fn decode_key(bytes: &[u8]) -> Result<K>;
}

/// Turns values of type `V` into bytes and back.
pub trait ValueCodec<V>: Send + Sync + 'static {
    /// The bytes of `value`.
    ///
    /// # Errors
    /// `InvalidArgument` when the value cannot be encoded.
    fn encode_value(value: &V) -> Result<Vec<u8>>;

    /// The value stored as `bytes`.
    ///
    /// # Errors
    /// `Corruption` when `bytes` is not the encoding of a `V`.
    fn decode_value(bytes: &[u8]) -> Result<V>;
}

/// The order-preserving key codec: the [`storekey`] format (maintained by SurrealDB, which
/// keys its own storage with it).
///
/// Every type that implements `storekey::Encode` and `storekey::Decode` works: integers
/// (fixed-width big-endian, signed ones with the sign bit flipped, so `-1 < 0 < 1` holds in
/// bytes), `bool`, `char`, `String` and `Vec<u8>` (escape-terminated: a 0x00 or 0x01 byte inside
/// is escaped with 0x01 and the end is a 0x00, so `"a" < "a\0" < "a\u{1}" < "ab"` holds and a
/// shorter string sorts first), `Option` (`None` first), tuples of up to six elements (compared
/// element by element, because each element is self-delimiting), and structs and enums that
/// derive `storekey::Encode, storekey::Decode` (fields in declaration order, enum variants in
/// declaration order). Floats are not order-preserving for negative values and NaN: do not key
/// by them.
///
/// Because elements are self-delimiting, the encoding of a tuple's leading elements is a byte
/// prefix of the whole tuple's, which is what a typed prefix scan relies on.
#[derive(Debug, Clone, Copy, Default)]
pub struct OrderedKeys;

impl<K> KeyCodec<K> for OrderedKeys
where
    K: storekey::Encode + storekey::Decode + 'static,
{
    fn encode_key(key: &K) -> Result<Vec<u8>> {
        storekey::encode_vec(key).map_err(|err| Error::invalid(format!("encoding a key: {err}")))
    }

    fn decode_key(bytes: &[u8]) -> Result<K> {
        storekey::decode(bytes).map_err(|err| Error::Corruption(format!("decoding a key: {err}")))
    }
}

/// Values as [`postcard`]: a compact, non-self-describing binary format of serde types (varint
/// integers, length-prefixed strings). The stored bytes depend on the field order and types of
/// `V`, so changing them needs a migration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postcard;

impl<V> ValueCodec<V> for Postcard
where
    V: Serialize + DeserializeOwned + 'static,
{
    fn encode_value(value: &V) -> Result<Vec<u8>> {
        postcard::to_allocvec(value)
            .map_err(|err| Error::invalid(format!("encoding a value: {err}")))
    }

    fn decode_value(bytes: &[u8]) -> Result<V> {
        postcard::from_bytes(bytes)
            .map_err(|err| Error::Corruption(format!("decoding a value: {err}")))
    }
}

/// Values as JSON: larger and slower than [`Postcard`], but readable by any tool (such as
/// `statestore dump`) and tolerant of added optional fields.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl<V> ValueCodec<V> for Json
where
    V: Serialize + DeserializeOwned + 'static,
{
    fn encode_value(value: &V) -> Result<Vec<u8>> {
        serde_json::to_vec(value).map_err(|err| Error::invalid(format!("encoding a value: {err}")))
    }

    fn decode_value(bytes: &[u8]) -> Result<V> {
        serde_json::from_slice(bytes)
            .map_err(|err| Error::Corruption(format!("decoding a value: {err}")))
    }
}

/// Bytes as they are (Kafka's `ByteArraySerde`): keys and values of type `Vec<u8>`. Byte
/// order is the key order, so it is a key codec too.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl KeyCodec<Vec<u8>> for Raw {
    fn encode_key(key: &Vec<u8>) -> Result<Vec<u8>> {
        Ok(key.clone())
    }

    fn decode_key(bytes: &[u8]) -> Result<Vec<u8>> {
        Ok(bytes.to_vec())
    }
}

impl ValueCodec<Vec<u8>> for Raw {
    fn encode_value(value: &Vec<u8>) -> Result<Vec<u8>> {
        Ok(value.clone())
    }

    fn decode_value(bytes: &[u8]) -> Result<Vec<u8>> {
        Ok(bytes.to_vec())
    }
}

/// Strings as their UTF-8 bytes (Kafka's `StringSerde`). UTF-8's byte order is the order of
/// code points, so it is a key codec too. Bytes that are not UTF-8 are a `Corruption` error.
#[derive(Debug, Clone, Copy, Default)]
pub struct Utf8;

impl KeyCodec<String> for Utf8 {
    fn encode_key(key: &String) -> Result<Vec<u8>> {
        Ok(key.as_bytes().to_vec())
    }

    fn decode_key(bytes: &[u8]) -> Result<String> {
        utf8(bytes)
    }
}

impl ValueCodec<String> for Utf8 {
    fn encode_value(value: &String) -> Result<Vec<u8>> {
        Ok(value.as_bytes().to_vec())
    }

    fn decode_value(bytes: &[u8]) -> Result<String> {
        utf8(bytes)
    }
}

fn utf8(bytes: &[u8]) -> Result<String> {
    String::from_utf8(bytes.to_vec())
        .map_err(|err| Error::Corruption(format!("decoding a UTF-8 string: {err}")))
}

/// Integers as fixed-width big-endian bytes (Kafka's `LongSerde`, `IntegerSerde`): values of
/// `i32`, `i64`, `u32` and `u64`; keys of `u32` and `u64` only, the unsigned ones whose
/// big-endian bytes sort as the numbers do (for signed keys in order use [`OrderedKeys`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct BigEndian;

macro_rules! big_endian {
    ($($int:ty),*) => {$(
        impl ValueCodec<$int> for BigEndian {
            fn encode_value(value: &$int) -> Result<Vec<u8>> {
                Ok(value.to_be_bytes().to_vec())
            }

            fn decode_value(bytes: &[u8]) -> Result<$int> {
                let bytes = <[u8; std::mem::size_of::<$int>()]>::try_from(bytes).map_err(|_| {
                    Error::Corruption(format!(
                        "decoding a {}: {} bytes, not {}",
                        stringify!($int),
                        bytes.len(),
                        std::mem::size_of::<$int>()
                    ))
                })?;
                Ok(<$int>::from_be_bytes(bytes))
            }
        }
    )*};
}

big_endian!(i32, i64, u32, u64);

impl KeyCodec<u32> for BigEndian {
    fn encode_key(key: &u32) -> Result<Vec<u8>> {
        <BigEndian as ValueCodec<u32>>::encode_value(key)
    }

    fn decode_key(bytes: &[u8]) -> Result<u32> {
        <BigEndian as ValueCodec<u32>>::decode_value(bytes)
    }
}

impl KeyCodec<u64> for BigEndian {
    fn encode_key(key: &u64) -> Result<Vec<u8>> {
        <BigEndian as ValueCodec<u64>>::encode_value(key)
    }

    fn decode_key(bytes: &[u8]) -> Result<u64> {
        <BigEndian as ValueCodec<u64>>::decode_value(bytes)
    }
}

#[cfg(test)]
mod tests {
    //! The codecs' promises, proved by property: for every supported key type,
    //! `a < b` if and only if `encode(a) < encode(b)`, and every encoding decodes back.

    use std::fmt::Debug;

    use proptest::prelude::*;

    use super::*;

    fn order_and_round_trip<K>(a: &K, b: &K) -> Result<(), TestCaseError>
    where
        K: Ord + Debug + storekey::Encode + storekey::Decode + 'static,
    {
        let (ea, eb) = (OrderedKeys::encode_key(a)?, OrderedKeys::encode_key(b)?);
        prop_assert_eq!(
            a.cmp(b),
            ea.cmp(&eb),
            "{:?} vs {:?}: {:?} vs {:?}",
            a,
            b,
            ea,
            eb
        );
        prop_assert_eq!(&<OrderedKeys as KeyCodec<K>>::decode_key(&ea)?, a);
        prop_assert_eq!(&<OrderedKeys as KeyCodec<K>>::decode_key(&eb)?, b);
        Ok(())
    }

    /// Strings drawn mostly from the bytes that need escaping, so NULs, 0x01 and prefixes of
    /// one another are common.
    fn text() -> impl Strategy<Value = String> {
        "[\\x00\\x01\\x02ab\u{ff}\u{10000}]{0,6}"
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![Just(0_u8), Just(1), Just(2), Just(255), any::<u8>()],
            0..6,
        )
    }

    /// A struct key whose derived `Ord` is field order, as the derived codec writes them.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, storekey::Encode, storekey::Decode)]
    struct Composite {
        partition: u16,
        name: String,
        offset: i64,
        tag: Option<u8>,
    }

    fn composite() -> impl Strategy<Value = Composite> {
        (0_u16..3, text(), any::<i64>(), any::<Option<u8>>()).prop_map(
            |(partition, name, offset, tag)| Composite {
                partition,
                name,
                offset,
                tag,
            },
        )
    }

    proptest! {
        #[test]
        fn signed_integers(a: i64, b: i64, c: i8, d: i8, e: i32, f: i32) {
            order_and_round_trip(&a, &b)?;
            order_and_round_trip(&c, &d)?;
            order_and_round_trip(&e, &f)?;
        }

        #[test]
        fn unsigned_integers(a: u64, b: u64, c: u16, d: u16, e: u128, f: u128) {
            order_and_round_trip(&a, &b)?;
            order_and_round_trip(&c, &d)?;
            order_and_round_trip(&e, &f)?;
        }

        #[test]
        fn strings(a in text(), b in text()) {
            order_and_round_trip(&a, &b)?;
        }

        #[test]
        fn byte_strings(a in bytes(), b in bytes()) {
            order_and_round_trip(&a, &b)?;
        }

        #[test]
        fn tuples(a in (text(), any::<i32>(), bytes()), b in (text(), any::<i32>(), bytes())) {
            order_and_round_trip(&a, &b)?;
        }

        #[test]
        fn tuples_of_strings(a in (text(), text()), b in (text(), text())) {
            order_and_round_trip(&a, &b)?;
        }

        #[test]
        fn derived_structs(a in composite(), b in composite()) {
            order_and_round_trip(&a, &b)?;
        }

        #[test]
        fn options_and_bools(a: Option<bool>, b: Option<bool>, c: Option<String>, d: Option<String>) {
            order_and_round_trip(&a, &b)?;
            order_and_round_trip(&c, &d)?;
        }

        /// Arbitrary bytes decode to a key or fail with `Corruption`; they never panic.
        #[test]
        fn garbage_keys_are_errors(raw in prop::collection::vec(any::<u8>(), 0..24)) {
            for result in [
                <OrderedKeys as KeyCodec<(String, i64)>>::decode_key(&raw).map(drop),
                <OrderedKeys as KeyCodec<Composite>>::decode_key(&raw).map(drop),
                <OrderedKeys as KeyCodec<Vec<u8>>>::decode_key(&raw).map(drop),
            ] {
                if let Err(err) = result {
                    prop_assert_eq!(err.kind(), store_api::ErrorKind::Corruption);
                }
            }
        }

        #[test]
        fn values_round_trip(value in (any::<i64>(), text(), bytes(), any::<Option<f64>>())) {
            let postcard = Postcard::encode_value(&value)?;
            let back: (i64, String, Vec<u8>, Option<f64>) = Postcard::decode_value(&postcard)?;
            prop_assert_eq!(format!("{back:?}"), format!("{value:?}"));
            let json = Json::encode_value(&value.0)?;
            prop_assert_eq!(<Json as ValueCodec<i64>>::decode_value(&json)?, value.0);
        }
    }

    #[test]
    fn escapes_order_strings_with_nuls() {
        let keys = [
            "", "\0", "\0\0", "\u{1}", "a", "a\0", "a\0b", "a\u{1}", "ab",
        ];
        let encoded: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| OrderedKeys::encode_key(&key.to_string()))
            .collect::<Result<_>>()
            .expect("strings encode");
        assert!(
            encoded.windows(2).all(|pair| pair[0] < pair[1]),
            "{encoded:?}"
        );
    }

    /// Kafka's serdes' bytes: `StringSerializer` writes UTF-8, `LongSerializer` eight
    /// big-endian bytes; what is not such an encoding is a `Corruption` error, never a panic.
    #[test]
    fn wire_codecs_read_what_kafka_serdes_write() {
        assert_eq!(
            <BigEndian as ValueCodec<i64>>::encode_value(&-2).expect("encodes"),
            vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]
        );
        assert_eq!(
            <BigEndian as ValueCodec<i64>>::decode_value(&[0, 0, 0, 0, 0, 0, 1, 0]).ok(),
            Some(256)
        );
        let short = <BigEndian as ValueCodec<i64>>::decode_value(&[1, 2, 3]);
        assert!(matches!(short, Err(Error::Corruption(_))), "{short:?}");
        assert_eq!(
            <BigEndian as KeyCodec<u32>>::encode_key(&7).ok(),
            Some(vec![0, 0, 0, 7])
        );
        assert_eq!(
            <Utf8 as KeyCodec<String>>::decode_key("é".as_bytes()).ok(),
            Some("é".into())
        );
        let invalid = <Utf8 as ValueCodec<String>>::decode_value(&[0xff, 0xfe]);
        assert!(matches!(invalid, Err(Error::Corruption(_))), "{invalid:?}");
        assert_eq!(
            <Raw as ValueCodec<Vec<u8>>>::decode_value(&[0, 255]).ok(),
            Some(vec![0, 255])
        );
    }
}
