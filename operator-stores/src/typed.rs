//! [`TypedStore`]: keys and values of Rust types over any byte store.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;

use store_api::{KeyValueStore, KvIter, Result, WriteBatch};

use crate::codec::{KeyCodec, OrderedKeys, Postcard, ValueCodec};
use crate::schema::{Evolving, Schema, stored_version};
use crate::ttl::TtlStore;

/// The type parameters, held without owning a value of any (so the view is `Send + Sync`).
type Types<K, V, KC, VC> = PhantomData<fn() -> (K, V, KC, VC)>;

/// A typed view over any [`KeyValueStore`]: keys of type `K` through the order-preserving key
/// codec `KC`, values of type `V` through the value codec `VC`.
///
/// # Key layout and costs
/// One store key per typed key, `KC::encode_key(key)` (for [`OrderedKeys`], the [`storekey`]
/// encoding); the store value is `VC::encode_value(value)`. A `get`, `put` or `delete` is one
/// store operation plus the encoding; a typed range is one store range over the encoded bounds,
/// so it costs what the backend's range costs, and yields keys in the logical order of `K`. The
/// `*_returning_old` methods cost one extra `get`.
///
/// The view holds no state of its own: several views may share one store, and the store's
/// guarantees (atomic batches, logging by a `LoggedStore`) carry over unchanged.
///
/// # Expiry
/// None by itself: an entry stays until it is deleted. Over a [`TtlStore`]
/// ([`with_ttl`](Self::with_ttl)) entries expire after their time to live, per store or per
/// write ([`put_with_ttl`](Self::put_with_ttl)). Other state that must age out belongs in a
/// [window](crate::window), [session](crate::session) or [versioned](crate::versioned) store,
/// which expire by time, or over an [`LruStore`](crate::LruStore), which bounds the count.
///
/// ```
/// use std::sync::Arc;
/// use statestore_memory::{Config, MemoryStore};
/// use statestore_operator_stores::TypedStore;
///
/// let counts: TypedStore<(String, u32), u64> =
///     TypedStore::new(Arc::new(MemoryStore::new(Config::default())));
/// counts.put(&("apple".to_string(), 2), &10)?;
/// counts.put(&("apple".to_string(), 10), &3)?;
/// counts.put(&("pear".to_string(), 1), &7)?;
/// // Every key whose first element is "apple", in the order of the second (2 before 10).
/// let apples: Vec<_> = counts.prefix_scan(&"apple".to_string())?.collect::<Result<_, _>>()?;
/// assert_eq!(apples, [(("apple".to_string(), 2), 10), (("apple".to_string(), 10), 3)]);
/// // The previous value comes back at the cost of one read.
/// assert_eq!(counts.put_returning_old(&("pear".to_string(), 1), &8)?, Some(7));
/// # Ok::<(), store_api::Error>(())
/// ```
pub struct TypedStore<K, V, KC = OrderedKeys, VC = Postcard> {
    store: Arc<dyn KeyValueStore>,
    /// The same store as `store` when it is a TTL store, for writes with their own TTL.
    ttl: Option<Arc<TtlStore>>,
    types: Types<K, V, KC, VC>,
}

impl<K, V, KC, VC> TypedStore<K, V, KC, VC>
where
    KC: KeyCodec<K>,
    VC: ValueCodec<V>,
{
    /// A typed view over `store`.
    pub fn new(store: Arc<dyn KeyValueStore>) -> Self {
        TypedStore {
            store,
            ttl: None,
            types: PhantomData,
        }
    }

    /// A typed view over a [`TtlStore`]: entries expire by its TTL, or by their own through
    /// [`put_with_ttl`](Self::put_with_ttl).
    pub fn with_ttl(store: Arc<TtlStore>) -> Self {
        TypedStore {
            store: Arc::clone(&store) as Arc<dyn KeyValueStore>,
            ttl: Some(store),
            types: PhantomData,
        }
    }

    /// The TTL store underneath, for one made by [`with_ttl`](Self::with_ttl): to advance its
    /// stream time or purge it.
    pub fn ttl_store(&self) -> Option<&Arc<TtlStore>> {
        self.ttl.as_ref()
    }

    /// Sets `key` to `value`, expiring `ttl_ms` milliseconds from now on the TTL store's clock
    /// (`None`: never), whatever the store's own TTL.
    ///
    /// # Errors
    /// `Unsupported` for a view not made by [`with_ttl`](Self::with_ttl); as
    /// [`TtlStore::put_with_ttl`].
    pub fn put_with_ttl(&self, key: &K, value: &V, ttl_ms: Option<i64>) -> Result<()> {
        let Some(ttl) = &self.ttl else {
            return Err(store_api::Error::Unsupported(
                "a write with its own TTL needs a typed store over a TtlStore".into(),
            ));
        };
        ttl.put_with_ttl(&KC::encode_key(key)?, &VC::encode_value(value)?, ttl_ms)
    }

    /// The byte store underneath.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.store
    }

    /// The value at `key`, or `None`.
    ///
    /// # Errors
    /// The store's errors, or `Corruption` when the stored value does not decode as a `V`.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        self.store
            .get(&KC::encode_key(key)?)?
            .map(|bytes| VC::decode_value(&bytes))
            .transpose()
    }

    /// Sets `key` to `value`.
    ///
    /// # Errors
    /// The codecs' and the store's errors.
    pub fn put(&self, key: &K, value: &V) -> Result<()> {
        self.store
            .put(&KC::encode_key(key)?, &VC::encode_value(value)?)
    }

    /// Sets `key` to `value` and returns the value it replaced, at the cost of one `get` before
    /// the `put` (what a table aggregation needs to retract the old value).
    ///
    /// The read and the write are two store operations: a concurrent writer of the same key
    /// may slip in between. An operator's store belongs to one task, which writes it from one
    /// thread, so this does not arise there.
    ///
    /// # Errors
    /// As [`get`](Self::get) and [`put`](Self::put); if the `put` fails, nothing was written.
    pub fn put_returning_old(&self, key: &K, value: &V) -> Result<Option<V>> {
        let key = KC::encode_key(key)?;
        let value = VC::encode_value(value)?;
        let old = self.store.get(&key)?;
        self.store.put(&key, &value)?;
        old.map(|bytes| VC::decode_value(&bytes)).transpose()
    }

    /// Sets `key` to `value` only when it is absent; returns the existing value otherwise.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn put_if_absent(&self, key: &K, value: &V) -> Result<Option<V>> {
        let existing = self
            .store
            .put_if_absent(&KC::encode_key(key)?, &VC::encode_value(value)?)?;
        existing.map(|bytes| VC::decode_value(&bytes)).transpose()
    }

    /// Removes `key`; removing a missing key succeeds.
    ///
    /// # Errors
    /// The key codec's and the store's errors.
    pub fn delete(&self, key: &K) -> Result<()> {
        self.store.delete(&KC::encode_key(key)?)
    }

    /// Removes `key` and returns the value it held, at the cost of one `get` (Kafka Streams'
    /// `delete` contract). Not atomic against a concurrent writer, as
    /// [`put_returning_old`](Self::put_returning_old).
    ///
    /// # Errors
    /// As [`get`](Self::get) and [`delete`](Self::delete).
    pub fn delete_returning_old(&self, key: &K) -> Result<Option<V>> {
        let key = KC::encode_key(key)?;
        let old = self.store.get(&key)?;
        if old.is_some() {
            self.store.delete(&key)?;
        }
        old.map(|bytes| VC::decode_value(&bytes)).transpose()
    }

    /// Applies typed puts (`Some`) and deletes (`None`), in order, as one atomic store batch.
    ///
    /// # Errors
    /// The codecs' errors (then nothing is written) and the store's.
    pub fn write<'a>(&self, ops: impl IntoIterator<Item = (&'a K, Option<&'a V>)>) -> Result<()>
    where
        K: 'a,
        V: 'a,
    {
        let mut batch = WriteBatch::new();
        for (key, value) in ops {
            let key = KC::encode_key(key)?;
            match value {
                Some(value) => batch.put(key, VC::encode_value(value)?),
                None => batch.delete(key),
            };
        }
        self.store.write(batch)
    }

    /// The entries with keys between `from` and `to`, in ascending order of `K`.
    ///
    /// # Errors
    /// The key codec's and the store's errors; an entry that does not decode is an `Err` item.
    pub fn range(&self, from: Bound<&K>, to: Bound<&K>) -> Result<TypedIter<K, V, KC, VC>> {
        let (from, to) = (encode_bound::<K, KC>(from)?, encode_bound::<K, KC>(to)?);
        let iter = self.store.range(as_ref(&from), as_ref(&to))?;
        Ok(TypedIter::new(iter))
    }

    /// As [`range`](Self::range), in descending order.
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn reverse_range(&self, from: Bound<&K>, to: Bound<&K>) -> Result<TypedIter<K, V, KC, VC>> {
        let (from, to) = (encode_bound::<K, KC>(from)?, encode_bound::<K, KC>(to)?);
        let iter = self.store.reverse_range(as_ref(&from), as_ref(&to))?;
        Ok(TypedIter::new(iter))
    }

    /// Every entry, in ascending order of `K`.
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn all(&self) -> Result<TypedIter<K, V, KC, VC>> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    /// The entries whose key starts with `prefix`: for a composite key such as a tuple or a
    /// struct, `prefix` is its leading element(s), such as `a` or `(a, b)` for keys `(a, b, c)`.
    /// It works because [`OrderedKeys`] makes each element self-delimiting; it is not a prefix
    /// of a string (`"ap"` does not select `"apple"`).
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn prefix_scan<P>(&self, prefix: &P) -> Result<TypedIter<K, V, KC, VC>>
    where
        KC: KeyCodec<P>,
    {
        let prefix = <KC as KeyCodec<P>>::encode_key(prefix)?;
        Ok(TypedIter::new(self.store.prefix_scan(&prefix)?))
    }

    /// As [`prefix_scan`](Self::prefix_scan), in descending order.
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn reverse_prefix_scan<P>(&self, prefix: &P) -> Result<TypedIter<K, V, KC, VC>>
    where
        KC: KeyCodec<P>,
    {
        let prefix = <KC as KeyCodec<P>>::encode_key(prefix)?;
        Ok(TypedIter::new(self.store.reverse_prefix_scan(&prefix)?))
    }

    /// Makes completed writes durable: the store's `flush` (a commit for a `LoggedStore`).
    ///
    /// # Errors
    /// The store's.
    pub fn flush(&self) -> Result<()> {
        self.store.flush()
    }
}

impl<K, V, KC, IC> TypedStore<K, V, KC, Evolving<IC>>
where
    KC: KeyCodec<K>,
    V: Schema,
    IC: ValueCodec<V>,
{
    /// Rewrites every value stored in an older schema version (or without an envelope) in
    /// the current one, so the store, and its changelog once committed, no longer need the
    /// migrations. Over a TTL store each entry keeps its expiry. Returns how many values it
    /// rewrote. Reads migrate old values anyway: this is for retiring a migration, or for
    /// ending [`Schema::UNVERSIONED`].
    ///
    /// It reads the whole store first and keeps the rewritten values in memory until it
    /// writes them; writes made meanwhile by another thread may be overwritten.
    ///
    /// # Errors
    /// [`SchemaVersion`](store_api::Error::SchemaVersion) for a value no migration reads
    /// (then nothing was written); the codecs' and the store's errors.
    pub fn rewrite_old_versions(&self) -> Result<usize> {
        let mut rewritten = Vec::new();
        for entry in self.store.range(Bound::Unbounded, Bound::Unbounded)? {
            let (key, bytes) = entry?;
            if stored_version(&bytes) == Some(V::VERSION) {
                continue;
            }
            let value: V = Evolving::<IC>::decode_value(&bytes)?;
            rewritten.push((key, Evolving::<IC>::encode_value(&value)?));
        }
        for (key, bytes) in &rewritten {
            match &self.ttl {
                Some(ttl) => {
                    ttl.replace_value(key, bytes)?;
                }
                None => self.store.put(key, bytes)?,
            }
        }
        Ok(rewritten.len())
    }
}

impl<K, V, KC, VC> Clone for TypedStore<K, V, KC, VC> {
    fn clone(&self) -> Self {
        TypedStore {
            store: Arc::clone(&self.store),
            ttl: self.ttl.clone(),
            types: PhantomData,
        }
    }
}

impl<K, V, KC, VC> fmt::Debug for TypedStore<K, V, KC, VC> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedStore")
            .field("store", &self.store)
            .field("key", &std::any::type_name::<K>())
            .field("value", &std::any::type_name::<V>())
            .finish()
    }
}

/// An iterator of decoded `(key, value)` entries. It ends after the first `Err` item.
pub struct TypedIter<K, V, KC, VC> {
    inner: Option<KvIter>,
    types: Types<K, V, KC, VC>,
}

impl<K, V, KC, VC> TypedIter<K, V, KC, VC> {
    fn new(inner: KvIter) -> Self {
        TypedIter {
            inner: Some(inner),
            types: PhantomData,
        }
    }
}

impl<K, V, KC, VC> Iterator for TypedIter<K, V, KC, VC>
where
    KC: KeyCodec<K>,
    VC: ValueCodec<V>,
{
    type Item = Result<(K, V)>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.as_mut()?.next()?;
        let decoded =
            item.and_then(|(key, value)| Ok((KC::decode_key(&key)?, VC::decode_value(&value)?)));
        if decoded.is_err() {
            self.inner = None;
        }
        Some(decoded)
    }
}

impl<K, V, KC, VC> fmt::Debug for TypedIter<K, V, KC, VC> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedIter")
            .field("done", &self.inner.is_none())
            .finish()
    }
}

fn encode_bound<K, KC: KeyCodec<K>>(bound: Bound<&K>) -> Result<Bound<Vec<u8>>> {
    Ok(match bound {
        Bound::Included(key) => Bound::Included(KC::encode_key(key)?),
        Bound::Excluded(key) => Bound::Excluded(KC::encode_key(key)?),
        Bound::Unbounded => Bound::Unbounded,
    })
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}
