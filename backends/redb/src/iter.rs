//! Owned, streaming iterators over a redb read snapshot.

use redb::{AccessGuard, ReadOnlyTable};
use std::ops::Bound;

use store_api::{KvIter, KvPair, PairVisitor, Result};

use crate::error::from_redb;

/// A key or value borrowed from a page the iterator holds.
type Guard = AccessGuard<'static, &'static [u8]>;
/// What redb's range iterator yields.
type Item = Result<(Guard, Guard), redb::StorageError>;

/// Iterates over `table` between `from` and `to`, in descending order if `reverse`.
///
/// redb's `ReadOnlyTable::range` returns a `Range<'static, ..>` that holds the read
/// transaction's guard and the pages it is reading, so the iterator owns its snapshot and walks
/// the B-tree page by page: nothing is copied up front, and only the pair being returned is
/// copied into `Vec`s.
///
/// # Errors
/// An engine failure while positioning the iterator.
pub(crate) fn range(
    table: &ReadOnlyTable<&'static [u8], &'static [u8]>,
    from: Bound<&[u8]>,
    to: Bound<&[u8]>,
    reverse: bool,
) -> Result<KvIter> {
    let range = table.range::<&[u8]>((from, to)).map_err(from_redb)?;
    Ok(if reverse {
        Box::new(RedbIter::new(range.rev()))
    } else {
        Box::new(RedbIter::new(range))
    })
}

/// Visits the pairs of `table` between `from` and `to` (descending if `reverse`), lending each
/// from redb's pages, until `f` breaks or the range ends.
///
/// # Errors
/// An engine failure while positioning or stepping.
pub(crate) fn scan(
    table: &ReadOnlyTable<&'static [u8], &'static [u8]>,
    from: Bound<&[u8]>,
    to: Bound<&[u8]>,
    reverse: bool,
    f: &mut PairVisitor<'_>,
) -> Result<()> {
    let range = table.range::<&[u8]>((from, to)).map_err(from_redb)?;
    if reverse {
        visit(range.rev(), f)
    } else {
        visit(range, f)
    }
}

fn visit<I: Iterator<Item = Item>>(pairs: I, f: &mut PairVisitor<'_>) -> Result<()> {
    for pair in pairs {
        let (key, value) = pair.map_err(from_redb)?;
        if f(key.value(), value.value()).is_break() {
            break;
        }
    }
    Ok(())
}

/// Copies each pair out of redb's pages and ends after the first error.
struct RedbIter<I> {
    /// `None` once the range is exhausted or failed, which also releases the snapshot early.
    inner: Option<I>,
}

impl<I> RedbIter<I> {
    fn new(inner: I) -> Self {
        RedbIter { inner: Some(inner) }
    }
}

impl<I: Iterator<Item = Item>> Iterator for RedbIter<I> {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.as_mut()?.next();
        match item {
            Some(Ok((key, value))) => Some(Ok((key.value().to_vec(), value.value().to_vec()))),
            Some(Err(err)) => {
                self.inner = None;
                Some(Err(from_redb(err)))
            }
            None => {
                self.inner = None;
                None
            }
        }
    }
}
