//! Schema evolution of typed values: a versioned envelope ([`Evolving`]) and the migrations
//! of a value type from its older versions ([`Schema`]).

use std::marker::PhantomData;

use store_api::{Error, Result};

use crate::codec::{Postcard, ValueCodec};

/// The first two bytes of a value in a schema envelope; then the version, 2 bytes big-endian,
/// then the value's bytes in its codec.
pub const SCHEMA_MAGIC: [u8; 2] = [0xF5, 0x5E];

/// The length of the envelope's header.
const HEADER_LEN: usize = 4;

/// A value type whose stored form evolves: the version this code writes, and how to read
/// each older one.
///
/// ```
/// use std::sync::Arc;
/// use serde::{Deserialize, Serialize};
/// use statestore_memory::{Config, MemoryStore};
/// use statestore_operator_stores::{Evolving, OrderedKeys, Postcard, Schema, TypedStore, ValueCodec};
///
/// /// Version 1 had no currency.
/// #[derive(Serialize, Deserialize)]
/// struct PriceV1 {
///     cents: u64,
/// }
///
/// impl Schema for PriceV1 {
///     const VERSION: u16 = 1;
///     fn migrate(_: u16, _: &[u8]) -> store_api::Result<Option<Self>> {
///         Ok(None)
///     }
/// }
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Price {
///     cents: u64,
///     currency: String,
/// }
///
/// impl Schema for Price {
///     const VERSION: u16 = 2;
///
///     fn migrate(version: u16, bytes: &[u8]) -> store_api::Result<Option<Self>> {
///         Ok(match version {
///             1 => {
///                 let old: PriceV1 = Postcard::decode_value(bytes)?;
///                 Some(Price { cents: old.cents, currency: "EUR".into() })
///             }
///             _ => None, // unknown: a typed error, never a guess
///         })
///     }
/// }
///
/// let store = Arc::new(MemoryStore::new(Config::default()));
/// let v1: TypedStore<String, PriceV1, OrderedKeys, Evolving> = TypedStore::new(store.clone());
/// v1.put(&"apple".into(), &PriceV1 { cents: 120 })?;
/// // The next release reads the same store with version 2.
/// let v2: TypedStore<String, Price, OrderedKeys, Evolving> = TypedStore::new(store);
/// assert_eq!(
///     v2.get(&"apple".into())?,
///     Some(Price { cents: 120, currency: "EUR".into() })
/// );
/// # Ok::<(), store_api::Error>(())
/// ```
pub trait Schema: Sized {
    /// The version this code writes, at least 1.
    const VERSION: u16;

    /// The version of values stored without an envelope, by a store that did not use
    /// [`Evolving`] yet; `None` (the default) makes such a value an error. An old value whose
    /// first two bytes happen to be [`SCHEMA_MAGIC`] is taken for an enveloped one (read as
    /// the version its next two bytes name, or refused as unknown): set this only while old
    /// values exist, and rewrite them
    /// ([`TypedStore::rewrite_old_versions`](crate::TypedStore::rewrite_old_versions)).
    const UNVERSIONED: Option<u16> = None;

    /// The value stored as `bytes` by `version`, an older version than
    /// [`VERSION`](Self::VERSION); `Ok(None)` for a version this code cannot read, which
    /// the reader reports as [`Error::SchemaVersion`].
    ///
    /// # Errors
    /// `Corruption` when `bytes` is not a value of `version`.
    fn migrate(version: u16, bytes: &[u8]) -> Result<Option<Self>>;
}

/// The value codec of a store whose values evolve: each value is stored as
/// `SCHEMA_MAGIC, version (u16 big-endian), VC's bytes`, written at [`Schema::VERSION`] and
/// read from any version `V` knows: the current one by `VC`, older ones through
/// [`Schema::migrate`], on every read (so on values a restore brought back, too). A version
/// newer than the reader's, or one `migrate` does not know, is [`Error::SchemaVersion`]; a
/// value without the envelope is read as [`Schema::UNVERSIONED`], or is that error.
///
/// Opt-in per store: a `TypedStore<K, V, OrderedKeys, Evolving>` writes envelopes, a
/// `TypedStore<K, V>` (plain [`Postcard`]) never does, so existing stores read as before.
/// Over a [`TtlStore`](crate::TtlStore) the two envelopes nest: the TTL store's expiry
/// outside, this header inside the value it keeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Evolving<VC = Postcard>(PhantomData<fn() -> VC>);

impl<V: Schema, VC: ValueCodec<V>> ValueCodec<V> for Evolving<VC> {
    fn encode_value(value: &V) -> Result<Vec<u8>> {
        let encoded = VC::encode_value(value)?;
        let mut bytes = Vec::with_capacity(HEADER_LEN + encoded.len());
        bytes.extend_from_slice(&SCHEMA_MAGIC);
        bytes.extend_from_slice(&V::VERSION.to_be_bytes());
        bytes.extend_from_slice(&encoded);
        Ok(bytes)
    }

    fn decode_value(bytes: &[u8]) -> Result<V> {
        let (version, payload) = match (stored_version(bytes), V::UNVERSIONED) {
            (Some(version), _) => (version, &bytes[HEADER_LEN..]),
            (None, Some(version)) => (version, bytes),
            (None, None) => return Err(unknown::<V>(None)),
        };
        if version == V::VERSION {
            return VC::decode_value(payload);
        }
        if version > V::VERSION || version == 0 {
            return Err(unknown::<V>(Some(version)));
        }
        V::migrate(version, payload)?.ok_or_else(|| unknown::<V>(Some(version)))
    }
}

/// The version a stored value's envelope names, `None` without an envelope.
pub fn stored_version(bytes: &[u8]) -> Option<u16> {
    match bytes {
        [m0, m1, hi, lo, ..] if [*m0, *m1] == SCHEMA_MAGIC => Some(u16::from_be_bytes([*hi, *lo])),
        _ => None,
    }
}

fn unknown<V: Schema>(found: Option<u16>) -> Error {
    Error::SchemaVersion {
        type_name: std::any::type_name::<V>(),
        found: found.map(u32::from),
        current: u32::from(V::VERSION),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Two(u32, u32);

    impl Schema for Two {
        const VERSION: u16 = 2;
        const UNVERSIONED: Option<u16> = Some(1);

        fn migrate(version: u16, bytes: &[u8]) -> Result<Option<Self>> {
            Ok(match version {
                1 => Some(Two(Postcard::decode_value(bytes)?, 0)),
                _ => None,
            })
        }
    }

    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Strict(u32);

    impl Schema for Strict {
        const VERSION: u16 = 1;

        fn migrate(_: u16, _: &[u8]) -> Result<Option<Self>> {
            Ok(None)
        }
    }

    #[test]
    fn versions_round_trip_migrate_or_fail() {
        let bytes = <Evolving as ValueCodec<Two>>::encode_value(&Two(1, 2)).expect("encode");
        assert_eq!(&bytes[..4], &[0xF5, 0x5E, 0, 2]);
        assert_eq!(stored_version(&bytes), Some(2));
        let read: Two = Evolving::<Postcard>::decode_value(&bytes).expect("current");
        assert_eq!(read, Two(1, 2));
        let v1 = <Postcard as ValueCodec<u32>>::encode_value(&7).expect("v1");
        let mut enveloped = vec![0xF5, 0x5E, 0, 1];
        enveloped.extend_from_slice(&v1);
        let read: Two = Evolving::<Postcard>::decode_value(&enveloped).expect("v1 enveloped");
        assert_eq!(read, Two(7, 0));
        let read: Two = Evolving::<Postcard>::decode_value(&v1).expect("v1 unversioned");
        assert_eq!(read, Two(7, 0));
        let err = <Evolving as ValueCodec<Strict>>::decode_value(&v1)
            .map(|_| ())
            .expect_err("no envelope");
        assert_eq!(err.kind(), store_api::ErrorKind::SchemaVersion, "{err}");
        for version in [0u16, 3, 900] {
            let mut bytes = vec![0xF5, 0x5E];
            bytes.extend_from_slice(&version.to_be_bytes());
            bytes.extend_from_slice(&v1);
            let err = <Evolving as ValueCodec<Two>>::decode_value(&bytes)
                .map(|_| ())
                .expect_err("an unknown version");
            assert_eq!(err.kind(), store_api::ErrorKind::SchemaVersion, "{err}");
        }
    }
}
