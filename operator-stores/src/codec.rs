//! Codecs between typed keys and values and the bytes a [`KeyValueStore`] holds.
//!
//! Keys need an **order-preserving** codec, so that the byte order the store sorts by is the
//! logical order of the key type and typed ranges mean what they say: [`OrderedKeys`]. Values
//! only need to round-trip: [`Postcard`] (compact binary, the default) or [`Json`].
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
}
