//! The adapter that lets one workload drive any engine: the store API or a native API.
//!
//! Workloads are written once against [`Target`]. [`ApiTarget`] runs them through
//! `&dyn KeyValueStore`, which is how users call statestore; the [`native`](crate::native)
//! adapters run the same code against each engine's own API, so the difference between the
//! two is the cost of the abstraction and nothing else.

use std::ops::{Bound, ControlFlow};

use store_api::{KeyValueStore, Result, WriteBatch};

/// The operations the workloads issue. Implementations do the cheapest natural thing on their
/// engine: values and pairs are read in place where the engine lends them, natively and
/// through the store API's borrowing reads (`get_with`, `scan`) alike, and every byte read is
/// looked at with [`read_bytes`], as a caller that decodes what it reads does.
pub trait Target {
    /// Reads `key`; the value's length, or `None` when absent.
    ///
    /// # Errors
    /// Any engine failure.
    fn get(&self, key: &[u8]) -> Result<Option<usize>>;

    /// Writes one key without syncing.
    ///
    /// # Errors
    /// Any engine failure.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Writes `entries` as one atomic batch, without syncing.
    ///
    /// # Errors
    /// Any engine failure.
    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()>;

    /// Reads up to `limit` pairs in key order from `from` (inclusive); how many were read.
    ///
    /// # Errors
    /// Any engine failure.
    fn scan(&self, from: &[u8], limit: usize) -> Result<usize>;

    /// Makes every write so far durable.
    ///
    /// # Errors
    /// Any engine failure.
    fn flush(&self) -> Result<()>;
}

/// Looks at every byte of `bytes`, as decoding a value or key would, and nothing more.
///
/// Every [`Target`] calls it on each value it gets and each key and value it scans. Without
/// it the two sides of a pair did different work: a side that only takes a slice's length
/// never touches the value's memory, while the store API's memory backend, which lends a
/// value by taking a reference count on it, does; at 1M keys that one cache miss per value
/// was most of the difference.
pub fn read_bytes(bytes: &[u8]) {
    std::hint::black_box(bytes.iter().fold(0u8, |acc, byte| acc ^ byte));
}

/// Drives a store through the store API, as a user of statestore does.
#[derive(Debug, Clone, Copy)]
pub struct ApiTarget<'a>(pub &'a dyn KeyValueStore);

impl Target for ApiTarget<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let mut len = None;
        self.0.get_with(key, &mut |value| {
            len = value.map(|value| {
                read_bytes(value);
                value.len()
            });
        })?;
        Ok(len)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0.put(key, value)
    }

    fn write_batch(&self, entries: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = WriteBatch::with_capacity(entries.len());
        for (key, value) in entries {
            batch.put(key.to_vec(), value.to_vec());
        }
        self.0.write(batch)
    }

    fn scan(&self, from: &[u8], limit: usize) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let mut read = 0;
        self.0.scan(
            Bound::Included(from),
            Bound::Unbounded,
            false,
            &mut |key, value| {
                read_bytes(key);
                read_bytes(value);
                read += 1;
                if read == limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        Ok(read)
    }

    fn flush(&self) -> Result<()> {
        self.0.flush()
    }
}
