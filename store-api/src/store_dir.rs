//! Whether a store's directory is still the one it opened.
//!
//! Engines write through file descriptors they opened at start. When the store's directory
//! is removed (or replaced) under an open store, those descriptors point at unlinked files:
//! writes and even fsyncs succeed, but nothing of it can survive a restart. RocksDB, sled and
//! redb all keep answering `Ok` then, so a backend captures its directory's identity at open
//! and checks it after every flush: a flush that cannot be durable fails.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The identity of a store directory, captured when the store opens: on Unix an open handle
/// on the directory, whose device and inode the path must still lead to (the handle keeps the
/// inode from being reused by a directory created at the same path); elsewhere only that a
/// directory exists at the path.
///
/// ```
/// use store_api::StoreDirIdentity;
///
/// let dir = tempfile::tempdir()?;
/// let identity = StoreDirIdentity::capture(dir.path())?;
/// identity.verify()?;
/// let path = dir.path().to_path_buf();
/// dir.close()?;
/// std::fs::create_dir(&path)?; // same path, another directory
/// assert!(identity.verify().is_err());
/// # std::fs::remove_dir(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StoreDirIdentity {
    path: PathBuf,
    #[cfg(unix)]
    handle: std::fs::File,
}

impl StoreDirIdentity {
    /// The identity of the directory `dir` as it is now.
    ///
    /// # Errors
    /// `Io` when `dir` cannot be opened or is not a directory.
    pub fn capture(dir: &Path) -> Result<Self> {
        metadata(dir)?;
        Ok(StoreDirIdentity {
            path: dir.to_path_buf(),
            #[cfg(unix)]
            handle: std::fs::File::open(dir).map_err(|err| Error::io(context(dir), err))?,
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that the path still names the directory captured.
    ///
    /// # Errors
    /// `Io` (with an OS error of kind `NotFound`) when the directory was removed, and `Io`
    /// when another directory took its place or it cannot be examined.
    pub fn verify(&self) -> Result<()> {
        let now = metadata(&self.path)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let held = self
                .handle
                .metadata()
                .map_err(|err| Error::io(context(&self.path), err))?;
            if (held.dev(), held.ino()) != (now.dev(), now.ino()) {
                return Err(Error::io(
                    context(&self.path),
                    io::Error::other(
                        "the directory was replaced while the store was open; the store's \
                         files are gone",
                    ),
                ));
            }
        }
        #[cfg(not(unix))]
        let _ = now;
        Ok(())
    }
}

fn context(dir: &Path) -> String {
    format!("checking the store directory {}", dir.display())
}

/// The directory's metadata; a clear `NotFound` when it was removed.
fn metadata(dir: &Path) -> Result<std::fs::Metadata> {
    let meta = std::fs::metadata(dir).map_err(|err| {
        let err = if err.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                io::ErrorKind::NotFound,
                "the directory was removed while the store was open; the store's files are gone",
            )
        } else {
            err
        };
        Error::io(context(dir), err)
    })?;
    if !meta.is_dir() {
        return Err(Error::io(
            context(dir),
            io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::StoreDirIdentity;
    use crate::ErrorKind;

    #[test]
    fn removed_directory_fails_verify() {
        let dir = tempfile::tempdir().expect("tempdir");
        let identity = StoreDirIdentity::capture(dir.path()).expect("capture");
        identity.verify().expect("still there");
        std::fs::remove_dir(dir.path()).expect("remove");
        let err = identity.verify().expect_err("removed");
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.to_string().contains("removed"), "{err}");
    }

    #[test]
    fn capture_of_a_missing_directory_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        let err = StoreDirIdentity::capture(&missing).expect_err("missing");
        assert_eq!(err.kind(), ErrorKind::Io);
    }
}
