//! Writes as data: an ordered batch of puts and deletes applied atomically.

use crate::Result;
use crate::limits::check_ops;

/// One operation of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BatchOp {
    /// Set `key` to `value`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
    },
    /// Remove `key`; removing a missing key is not an error.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

impl BatchOp {
    /// The key this operation writes.
    pub fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
        }
    }

    /// The value written, or `None` for a delete (a tombstone).
    pub fn value(&self) -> Option<&[u8]> {
        match self {
            BatchOp::Put { value, .. } => Some(value),
            BatchOp::Delete { .. } => None,
        }
    }
}

/// An ordered list of puts and deletes that a store applies atomically.
///
/// After a crash either every operation of the batch is visible or none is. Operations apply in
/// the order they were added, so when two touch the same key the later one wins.
///
/// ```
/// use store_api::WriteBatch;
/// let mut batch = WriteBatch::new();
/// batch.put(b"a", b"1").put(b"b", b"2").delete(b"a");
/// assert_eq!(batch.len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
    bytes: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `ops` operations.
    pub fn with_capacity(ops: usize) -> Self {
        WriteBatch {
            ops: Vec::with_capacity(ops),
            bytes: 0,
        }
    }

    /// Appends a put of `value` at `key`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.push(BatchOp::Put {
            key: key.into(),
            value: value.into(),
        })
    }

    /// Appends a delete of `key`.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.push(BatchOp::Delete { key: key.into() })
    }

    /// Appends an operation.
    pub fn push(&mut self, op: BatchOp) -> &mut Self {
        self.bytes += op.key().len() + op.value().map_or(0, <[u8]>::len);
        self.ops.push(op);
        self
    }

    /// The operations, in order.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// Takes the operations out, in order.
    pub fn into_ops(self) -> Vec<BatchOp> {
        self.ops
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The total size of the keys and values held, in bytes.
    pub fn payload_bytes(&self) -> usize {
        self.bytes
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.bytes = 0;
    }

    /// Checks every key and value against the [limits](crate::limits).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the first operation
    /// over a limit. Backends call this before applying anything, so a rejected batch writes
    /// nothing.
    pub fn validate(&self) -> Result<()> {
        check_ops(&self.ops)
    }
}

impl FromIterator<BatchOp> for WriteBatch {
    fn from_iter<I: IntoIterator<Item = BatchOp>>(iter: I) -> Self {
        let mut batch = WriteBatch::new();
        for op in iter {
            batch.push(op);
        }
        batch
    }
}

impl IntoIterator for WriteBatch {
    type Item = BatchOp;
    type IntoIter = std::vec::IntoIter<BatchOp>;

    fn into_iter(self) -> Self::IntoIter {
        self.ops.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_payload_bytes() {
        let mut batch = WriteBatch::new();
        batch
            .put(b"ab".to_vec(), b"cde".to_vec())
            .delete(b"f".to_vec());
        assert_eq!(batch.payload_bytes(), 6);
        batch.clear();
        assert_eq!((batch.len(), batch.payload_bytes()), (0, 0));
    }
}
