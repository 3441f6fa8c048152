//! The one error type of the store API.

use std::path::PathBuf;

/// The result type of every fallible store operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed native error, kept as the source of [`Error::Backend`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure a store, a backend factory or a changelog can report.
///
/// A missing key is not an error: lookups return `Ok(None)`. Backends convert their native
/// errors into this type in one place, keeping the native error as a source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something the contract rejects (an oversized key, a bad name, an
    /// unknown option). Nothing was written.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The path is already open, by this process or another one.
    #[error("{path} is locked: {detail}")]
    Locked {
        /// The locked file or directory.
        path: PathBuf,
        /// Who holds it, as far as is known.
        detail: String,
    },

    /// Stored data failed a checksum or could not be decoded.
    #[error("corruption: {0}")]
    Corruption(String),

    /// An operating-system I/O error.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The store or log was closed; no operation succeeds after `close`.
    #[error("the store is closed")]
    Closed,

    /// The operation or option is not supported by this backend.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// A remote dependency (such as a Kafka broker) did not answer in time.
    #[error("timed out: {0}")]
    Timeout(String),

    /// A newer writer took over the changelog this writer appends to (a task moved to another
    /// instance while this one was paused): what this writer appends is ignored from now on.
    #[error("fenced: {0}")]
    Fenced(String),

    /// A stored value names a schema version its reader does not know (newer than the
    /// reader's, or one it has no migration from), or has no version header where one is
    /// required: the value is not decoded, rather than decoded as the wrong type.
    #[error("{type_name}: a value of schema version {found:?} cannot be read as version {current}")]
    SchemaVersion {
        /// The value type being read.
        type_name: &'static str,
        /// The version the value names; `None` when it has no version header.
        found: Option<u32>,
        /// The version the reader writes.
        current: u32,
    },

    /// A native engine error that fits no other kind.
    #[error("{backend} error: {source}")]
    Backend {
        /// The engine's registered name, such as `"rocksdb"`.
        backend: &'static str,
        /// The native error.
        #[source]
        source: BoxError,
    },
}

/// The kind of an [`Error`], for matching without destructuring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`Error::InvalidArgument`].
    InvalidArgument,
    /// See [`Error::Locked`].
    Locked,
    /// See [`Error::Corruption`].
    Corruption,
    /// See [`Error::Io`].
    Io,
    /// See [`Error::Closed`].
    Closed,
    /// See [`Error::Unsupported`].
    Unsupported,
    /// See [`Error::Timeout`].
    Timeout,
    /// See [`Error::Fenced`].
    Fenced,
    /// See [`Error::SchemaVersion`].
    SchemaVersion,
    /// See [`Error::Backend`].
    Backend,
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Locked { .. } => ErrorKind::Locked,
            Error::Corruption(_) => ErrorKind::Corruption,
            Error::Io { .. } => ErrorKind::Io,
            Error::Closed => ErrorKind::Closed,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::Timeout(_) => ErrorKind::Timeout,
            Error::Fenced(_) => ErrorKind::Fenced,
            Error::SchemaVersion { .. } => ErrorKind::SchemaVersion,
            Error::Backend { .. } => ErrorKind::Backend,
        }
    }

    /// An [`Error::InvalidArgument`] with the given message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(message.into())
    }

    /// An [`Error::Io`] that says what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`Error::Backend`] wrapping a native error of the named engine.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            backend,
            source: source.into(),
        }
    }

    /// An [`Error::Locked`] for `path`.
    pub fn locked(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Error::Locked {
            path: path.into(),
            detail: detail.into(),
        }
    }
}
