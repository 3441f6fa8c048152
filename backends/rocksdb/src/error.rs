//! The one place where RocksDB's errors become [`store_api::Error`]s.
//!
//! RocksDB reports every failure as a status string (`"<Kind>: <detail>"`), which the `rocksdb`
//! crate exposes as [`rocksdb::Error`] with a kind parsed from the prefix.

use std::path::Path;

use rocksdb::ErrorKind as NativeKind;
use store_api::Error;

/// The backend name carried by [`Error::Backend`].
pub(crate) const BACKEND: &str = "rocksdb";

/// Maps an error from an operation on an open database.
///
/// Corruption keeps its own kind, because callers act on it (rebuild from the changelog);
/// RocksDB's own argument checks become `InvalidArgument`; everything else is
/// [`Error::Backend`] with the native error as its source.
pub(crate) fn from_rocksdb(err: rocksdb::Error) -> Error {
    match err.kind() {
        NativeKind::Corruption => Error::Corruption(err.into_string()),
        NativeKind::InvalidArgument => Error::InvalidArgument(err.into_string()),
        _ => Error::backend(BACKEND, err),
    }
}

/// Maps an error from opening the database in `dir`. A held `LOCK` file becomes
/// [`Error::Locked`]: RocksDB reports `"While lock file: …"` when another process holds it and
/// `"lock hold by current process …"` when this process already has the database open.
pub(crate) fn from_open(dir: &Path, err: rocksdb::Error) -> Error {
    if is_lock_failure(&err) {
        return Error::locked(dir, err.into_string());
    }
    from_rocksdb(err)
}

fn is_lock_failure(err: &rocksdb::Error) -> bool {
    let message = err.as_ref();
    err.kind() == NativeKind::IOError
        && (message.contains("While lock file") || message.contains("lock hold by current process"))
}
