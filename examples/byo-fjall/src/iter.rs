//! Owned iterators and lending scans over a fjall snapshot, with the empty key (kept in its
//! own keyspace) put back in its place: first going forward, last going backward.

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use store_api::{Error, KvPair, PairVisitor, Result};

use crate::bucket::{self, BUCKET_LEN};
use crate::error::from_fjall;

/// Whether the range between `from` and `to` (not inverted) holds the empty key, the
/// smallest of all keys.
pub(crate) fn includes_empty(from: Bound<&[u8]>, to: Bound<&[u8]>) -> bool {
    let from_ok = match from {
        Bound::Unbounded => true,
        Bound::Included(from) => from.is_empty(),
        Bound::Excluded(_) => false,
    };
    let to_ok = match to {
        Bound::Unbounded | Bound::Included(_) => true,
        Bound::Excluded(to) => !to.is_empty(),
    };
    from_ok && to_ok
}

/// A snapshot's pairs in order, the empty key's and the buckets' among them; `Closed` once,
/// then the end, after the store closes.
pub(crate) struct FjallIter {
    /// The empty key's pair, until it is yielded.
    empty: Option<KvPair>,
    data: fjall::Iter,
    /// The range asked for, which a bucket's entries are filtered by.
    bounds: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    /// What is left of the bucket being expanded, in reverse order of yielding.
    pending: Vec<KvPair>,
    reverse: bool,
    closed: Arc<AtomicBool>,
    done: bool,
}

impl FjallIter {
    pub(crate) fn new(
        empty: Option<KvPair>,
        data: fjall::Iter,
        bounds: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        reverse: bool,
        closed: Arc<AtomicBool>,
    ) -> Self {
        FjallIter {
            empty,
            data,
            bounds,
            pending: Vec::new(),
            reverse,
            closed,
            done: false,
        }
    }

    /// The next pair of the data keyspace, expanding buckets.
    fn next_data(&mut self) -> Option<Result<KvPair>> {
        loop {
            if let Some(pair) = self.pending.pop() {
                return Some(Ok(pair));
            }
            let guard = if self.reverse {
                self.data.next_back()
            } else {
                self.data.next()
            }?;
            let (key, value) = match guard.into_inner() {
                Ok(pair) => pair,
                Err(err) => return Some(Err(from_fjall(err))),
            };
            if key.len() < BUCKET_LEN {
                return Some(Ok((key.to_vec(), value.to_vec())));
            }
            let (from, to) = (&self.bounds.0, &self.bounds.1);
            let bounds = (as_ref(from), as_ref(to));
            match bucket::expand(&key, &value, bounds.0, bounds.1) {
                Ok(mut pairs) => {
                    if !self.reverse {
                        pairs.reverse();
                    }
                    self.pending = pairs;
                }
                Err(err) => return Some(Err(err)),
            }
        }
    }
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

impl Iterator for FjallIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.closed.load(Ordering::Acquire) {
            self.done = true;
            return Some(Err(Error::Closed));
        }
        if !self.reverse
            && let Some(pair) = self.empty.take()
        {
            return Some(Ok(pair));
        }
        let item = match self.next_data() {
            Some(item) => item,
            None => {
                self.done = true;
                return self.empty.take().map(Ok);
            }
        };
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }
}

/// Lends each pair of `guards` to `f`, expanding buckets (filtered by `bounds`, in reverse
/// when `reverse`); `Ok(true)` when they ran out, `Ok(false)` when `f` stopped the scan.
pub(crate) fn visit(
    guards: impl Iterator<Item = fjall::Guard>,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    reverse: bool,
    f: &mut PairVisitor<'_>,
) -> Result<bool> {
    for guard in guards {
        let (key, value) = guard.into_inner().map_err(from_fjall)?;
        if key.len() < BUCKET_LEN {
            if let ControlFlow::Break(()) = f(&key, &value) {
                return Ok(false);
            }
            continue;
        }
        let mut pairs = bucket::expand(&key, &value, bounds.0, bounds.1)?;
        if reverse {
            pairs.reverse();
        }
        for (key, value) in pairs {
            if let ControlFlow::Break(()) = f(&key, &value) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}
