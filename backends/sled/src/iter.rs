//! Owned iterators over a sled tree.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use store_api::{Error, KvPair, PairVisitor, Result};

use crate::error::from_sled;

/// Wraps a sled iterator (forward or reversed): copies each pair out of sled's `IVec`s, ends
/// after the first error, and stops with `Closed` once the store is closed.
///
/// sled's `Iter` owns a handle on the tree, which keeps the whole database, and its file
/// lock, alive. So the iterator lets go of it as soon as it ends, fails, or sees the store
/// closed; and it holds a clone of the store's `closed` flag while running, which `close` counts
/// to know whether a live iterator may still be holding the database open.
pub(crate) struct SledIter<I> {
    inner: Option<(I, Arc<AtomicBool>)>,
}

impl<I> SledIter<I> {
    pub(crate) fn new(inner: I, closed: Arc<AtomicBool>) -> Self {
        SledIter {
            inner: Some((inner, closed)),
        }
    }
}

impl<I> Iterator for SledIter<I>
where
    I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
{
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        let (inner, closed) = self.inner.as_mut()?;
        if closed.load(Ordering::Acquire) {
            self.inner = None;
            return Some(Err(Error::Closed));
        }
        match inner.next() {
            Some(Ok((key, value))) => Some(Ok((key.to_vec(), value.to_vec()))),
            Some(Err(err)) => {
                self.inner = None;
                Some(Err(from_sled(err)))
            }
            None => {
                self.inner = None;
                None
            }
        }
    }
}

/// Visits the pairs of a sled iterator (forward or reversed) until `f` breaks, the range ends,
/// or the store is closed (then `Closed`, as [`SledIter`] reports it).
///
/// # Errors
/// `Closed`, or an engine failure while stepping.
pub(crate) fn scan<I>(inner: I, closed: &AtomicBool, f: &mut PairVisitor<'_>) -> Result<()>
where
    I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
{
    for pair in inner {
        if closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let (key, value) = pair.map_err(from_sled)?;
        if f(&key, &value).is_break() {
            break;
        }
    }
    Ok(())
}
