//! sled's directory lock, seen from outside.
//!
//! sled 0.34 `flock`s the `db` file of its directory for as long as the database lives, and
//! reports a held lock as an untyped I/O error. Two of its habits need care:
//! - a second open of an open directory must fail fast with a typed error, so [`check_free`]
//!   probes the lock before sled is asked to open;
//! - dropping a `Db` does not wait for sled's I/O threads to let go of the file, so reopening
//!   right after a close would race them (spacejam/sled#1234, #1289); [`wait_released`] makes
//!   `close` return only once the lock is free.
//!
//! Both use the same `flock` sled does (std's `File::try_lock` on Linux and macOS, `LockFileEx`
//! on Windows, like sled's fs2).

use std::fs::{File, TryLockError};
use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};

use store_api::{Error, Result};

use crate::error::locked;

/// The file sled locks, inside the store directory.
const LOCKED_FILE: &str = "db";

/// How long `close` waits for sled's threads to release the lock.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the lock on the directory's `db` file could be taken right now.
enum Probe {
    /// Nobody holds it (or the file does not exist yet).
    Free,
    /// Someone does.
    Held,
}

fn probe(dir: &Path) -> Result<Probe> {
    let path = dir.join(LOCKED_FILE);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Probe::Free),
        Err(err) => return Err(Error::io(format!("opening {}", path.display()), err)),
    };
    // Dropping `file` releases the lock taken here.
    match file.try_lock() {
        Ok(()) => Ok(Probe::Free),
        Err(TryLockError::WouldBlock) => Ok(Probe::Held),
        Err(TryLockError::Error(err)) => Err(Error::io(format!("locking {}", path.display()), err)),
    }
}

/// Fails with `Locked` when a sled database in `dir` is open.
///
/// # Errors
/// `Locked`, or `Io` when the lock file cannot be opened.
pub(crate) fn check_free(dir: &Path) -> Result<()> {
    match probe(dir)? {
        Probe::Free => Ok(()),
        Probe::Held => Err(locked(dir, "a sled database is open in this directory")),
    }
}

/// Waits, up to five seconds, until nobody holds the lock of the sled database in `dir`.
/// Returns whether it was released; a probe error counts as released, because it is not a lock
/// held by sled. Dropping a `sled::Db` does not wait for sled's threads to let go of the lock,
/// so a program that reopens a directory it opened through the `sled` crate calls this first.
pub fn wait_released(dir: &Path) -> bool {
    let deadline = Instant::now() + RELEASE_TIMEOUT;
    let mut pause = Duration::from_micros(200);
    loop {
        match probe(dir) {
            Ok(Probe::Held) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Ok(Probe::Held) => return false,
            Ok(Probe::Free) | Err(_) => return true,
        }
    }
}
