//! The one place where sled's errors become [`store_api::Error`]s.

use std::path::Path;

use store_api::Error;

/// The backend name carried by [`Error::Backend`].
pub(crate) const BACKEND: &str = "sled";

/// How sled 0.34 words a failed `flock` of its `db` file. sled reports it as a plain
/// `io::ErrorKind::Other`, so its message is the only way to tell it from other I/O errors.
const SLED_LOCK_MESSAGE: &str = "could not acquire lock";

/// Converts a sled error raised by an operation on an open store.
pub(crate) fn from_sled(err: sled::Error) -> Error {
    convert(err, None)
}

/// Converts a sled error raised while opening the store in `dir`, so a lock conflict names
/// the directory.
pub(crate) fn from_open(err: sled::Error, dir: &Path) -> Error {
    convert(err, Some(dir))
}

fn convert(err: sled::Error, dir: Option<&Path>) -> Error {
    match err {
        sled::Error::Io(source) => match dir {
            Some(dir) if source.to_string().starts_with(SLED_LOCK_MESSAGE) => {
                locked(dir, source.to_string())
            }
            Some(dir) => Error::io(format!("opening sled database {}", dir.display()), source),
            None => Error::io("accessing the sled database", source),
        },
        sled::Error::Corruption { at, .. } => Error::Corruption(match at {
            Some(at) => format!("sled found corrupt data at {at:?}"),
            None => "sled found corrupt data".to_owned(),
        }),
        other => Error::backend(BACKEND, other),
    }
}

/// The error for a store directory that another `Db` holds.
pub(crate) fn locked(dir: &Path, detail: impl Into<String>) -> Error {
    Error::locked(dir, detail)
}
