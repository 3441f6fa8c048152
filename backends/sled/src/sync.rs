//! A durable `flush` for sled.
//!
//! sled 0.34's own `flush` writes its log buffers with `pwrite` and
//! `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)` (`pagecache/iobuf.rs`): the bytes reach
//! the device's queue, but neither the file's metadata (its grown length) nor the device's
//! volatile cache is flushed, so a power loss can take back a flush that returned. It writes
//! large values to `blobs/<lsn>` files with no sync at all. (Its background flusher, every
//! `flush_every_ms`, does `fsync` the log, but never a blob.) A process crash loses nothing
//! either way: the kernel keeps what was written.
//!
//! So after sled's flush this module `fdatasync`s the log file `db`, `fsync`s every blob file
//! not synced before and then the `blobs` directory, and `fsync`s the store directory when its
//! entries changed (sled renames snapshot files into it), and at open every file and both
//! directories once. Then it checks that the directory is still the one the store opened: a
//! removed directory's files are synced without complaint, but cannot survive a restart.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use store_api::{Error, Result, StoreDirIdentity};

/// sled's log file, inside the store directory.
const LOG_FILE: &str = "db";
/// sled's directory of large values, inside the store directory.
const BLOBS_DIR: &str = "blobs";

/// What the last sync saw, so the next one syncs only what is new.
#[derive(Debug, Default)]
struct Seen {
    /// Names in the store directory at the last directory sync.
    entries: Vec<OsString>,
    /// Blob files already synced.
    blobs: HashSet<OsString>,
}

/// Syncs one sled store's files; see the module docs.
#[derive(Debug)]
pub(crate) struct Syncer {
    dir: StoreDirIdentity,
    log: File,
    seen: Mutex<Seen>,
}

fn io_err(what: &str, path: &Path) -> impl FnOnce(io::Error) -> Error {
    let context = format!("{what} {}", path.display());
    move |err| Error::io(context, err)
}

fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(io_err("syncing the directory", path))
}

/// The sorted names in `path`; none when it does not exist.
fn names(path: &Path) -> Result<Vec<OsString>> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(io_err("listing", path)(err)),
    };
    let mut names = entries
        .map(|entry| entry.map(|entry| entry.file_name()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_err("listing", path))?;
    names.sort_unstable();
    Ok(names)
}

impl Syncer {
    /// Syncs every file of the freshly opened store in `dir`, and the directories, so that
    /// what sled created or recovered at open is durable too.
    ///
    /// # Errors
    /// `Io` when a file or directory cannot be opened or synced.
    pub(crate) fn open(dir: &Path) -> Result<Syncer> {
        let log_path = dir.join(LOG_FILE);
        let log = File::open(&log_path).map_err(io_err("opening", &log_path))?;
        let syncer = Syncer {
            dir: StoreDirIdentity::capture(dir)?,
            log,
            seen: Mutex::new(Seen::default()),
        };
        for name in names(dir)? {
            let path = dir.join(&name);
            if path.is_file() {
                File::open(&path)
                    .and_then(|file| file.sync_all())
                    .map_err(io_err("syncing", &path))?;
            }
        }
        syncer.sync()?;
        Ok(syncer)
    }

    /// Makes what sled's `flush` wrote durable, then checks that the directory is the store's.
    ///
    /// # Errors
    /// `Io` when a sync fails or the directory was removed or replaced.
    pub(crate) fn sync(&self) -> Result<()> {
        let synced = self.sync_files();
        // A removed directory is the likelier reason for a failed sync, and the clearer error.
        self.dir.verify()?;
        synced
    }

    fn sync_files(&self) -> Result<()> {
        let dir = self.dir.path();
        let mut seen = self.seen.lock();
        self.log
            .sync_data()
            .map_err(io_err("syncing", &dir.join(LOG_FILE)))?;
        self.sync_new_blobs(&dir.join(BLOBS_DIR), &mut seen.blobs)?;
        let entries = names(dir)?;
        if entries != seen.entries {
            sync_dir(dir)?;
            seen.entries = entries;
        }
        Ok(())
    }

    fn sync_new_blobs(&self, blobs: &Path, synced: &mut HashSet<OsString>) -> Result<()> {
        let present = names(blobs)?;
        let mut new = false;
        for name in &present {
            if synced.contains(name) {
                continue;
            }
            let path: PathBuf = blobs.join(name);
            match File::open(&path).and_then(|file| file.sync_data()) {
                Ok(()) => new = true,
                // sled collected it between the listing and the sync.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(io_err("syncing", &path)(err)),
            }
            synced.insert(name.clone());
        }
        if new {
            sync_dir(blobs)?;
        }
        if synced.len() > present.len() {
            let present: HashSet<&OsString> = present.iter().collect();
            synced.retain(|name| present.contains(name));
        }
        Ok(())
    }
}
