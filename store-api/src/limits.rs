//! Size limits every backend enforces, so a key that one engine accepts is accepted by all.

use crate::{BatchOp, Error, Result};

/// The longest key accepted, in bytes (64 KiB, RocksDB's practical ceiling for a key that
/// stays in a block).
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// The longest value accepted, in bytes (1 GiB, below redb's and Kafka's hard limits for one
/// value).
pub const MAX_VALUE_LEN: usize = 1 << 30;

/// Checks a key against [`MAX_KEY_LEN`].
///
/// # Errors
/// [`Error::InvalidArgument`] when the key is too long.
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_LEN} bytes",
            key.len()
        )));
    }
    Ok(())
}

/// Checks a value against [`MAX_VALUE_LEN`].
///
/// # Errors
/// [`Error::InvalidArgument`] when the value is too long.
pub fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::invalid(format!(
            "value of {} bytes exceeds the limit of {MAX_VALUE_LEN} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// Checks every key and value of `ops`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the first operation over a limit.
pub fn check_ops(ops: &[BatchOp]) -> Result<()> {
    for op in ops {
        check_key(op.key())?;
        if let Some(value) = op.value() {
            check_value(value)?;
        }
    }
    Ok(())
}

/// Checks a key and a value.
///
/// # Errors
/// [`Error::InvalidArgument`] when either is too long.
pub fn check_entry(key: &[u8], value: &[u8]) -> Result<()> {
    check_key(key)?;
    check_value(value)
}
