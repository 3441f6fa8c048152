//! The one place where fjall's errors become [`store_api::Error`]s.

use std::path::Path;

use store_api::Error;

/// The backend's registered name, carried by [`Error::Backend`].
pub(crate) const BACKEND: &str = "fjall";

/// Converts an error of an operation on an open store.
pub(crate) fn from_fjall(err: fjall::Error) -> Error {
    convert(err, None)
}

/// Converts an error of opening the store in `dir`, so a lock conflict names the directory.
pub(crate) fn from_open(err: fjall::Error, dir: &Path) -> Error {
    convert(err, Some(dir))
}

fn convert(err: fjall::Error, dir: Option<&Path>) -> Error {
    match err {
        fjall::Error::Locked => Error::locked(
            dir.unwrap_or(Path::new("")),
            "another fjall database holds its lock file",
        ),
        fjall::Error::Io(source) => match dir {
            Some(dir) => Error::io(format!("opening fjall database {}", dir.display()), source),
            None => Error::io("accessing the fjall database", source),
        },
        err @ (fjall::Error::JournalRecovery(_)
        | fjall::Error::Decompress(_)
        | fjall::Error::InvalidTrailer
        | fjall::Error::InvalidTag(_)
        | fjall::Error::Unrecoverable) => Error::Corruption(format!("fjall: {err}")),
        // `Poisoned` (a failed journal sync: fjall refuses writes after it), `Storage`,
        // `InvalidVersion`, and what later fjall versions add.
        other => Error::backend(BACKEND, other),
    }
}
