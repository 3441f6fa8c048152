//! The one place where redb's errors become [`store_api::Error`]s.

use std::path::Path;

use store_api::Error;

/// The backend name carried by [`Error::Backend`].
pub(crate) const BACKEND: &str = "redb";

/// Converts any redb error (they all convert into `redb::Error`) into the store's error.
pub(crate) fn from_redb(err: impl Into<redb::Error>) -> Error {
    convert(err.into(), None)
}

/// As [`from_redb`], for errors raised while opening the database file at `path`, so a lock
/// conflict names the file.
pub(crate) fn from_open(err: redb::DatabaseError, path: &Path) -> Error {
    convert(err.into(), Some(path))
}

fn convert(err: redb::Error, path: Option<&Path>) -> Error {
    match err {
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => Error::locked(
            path.unwrap_or_else(|| Path::new("<redb database>")),
            err.to_string(),
        ),
        redb::Error::Corrupted(message) => Error::Corruption(message),
        // A file of another format version cannot be read as this one: to the caller that is
        // an unreadable store, exactly like a damaged one.
        redb::Error::UpgradeRequired(_) => Error::Corruption(err.to_string()),
        // redb reports a file that is not a redb database (a bad magic number) as an I/O
        // error of kind `InvalidData`: to the caller it is an unreadable store.
        redb::Error::Io(source) if source.kind() == std::io::ErrorKind::InvalidData => {
            Error::Corruption(source.to_string())
        }
        redb::Error::Io(source) => {
            let context = match path {
                Some(path) => format!("opening redb database {}", path.display()),
                None => "accessing the redb database".to_owned(),
            };
            Error::io(context, source)
        }
        // A read transaction (a live iterator) that outlived `close` reports this.
        redb::Error::DatabaseClosed => Error::Closed,
        redb::Error::ValueTooLarge(len) => {
            Error::invalid(format!("value of {len} bytes is too large for redb"))
        }
        other => Error::backend(BACKEND, other),
    }
}
