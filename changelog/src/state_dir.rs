//! The state directory: `<state_dir>/<application_id>/<task_id>/<backend>/<store_name>/`.
//!
//! One process owns an application's directory at a time, through an exclusive lock on its
//! `.lock` file held for the life of the [`StateDirectory`]. Within the process, a task
//! directory is held by at most one [`TaskDirectory`] handle, and cleanup never removes a task
//! that is held. Every directory created here is mode `0700`: state holds user data.

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use store_api::{BackendFactory, BackendOptions, Error, ErrorKind, KeyValueStore, Result};

use crate::checkpoint::{CHECKPOINT_FILE, Checkpoint};

/// The lock file of an application directory.
pub const LOCK_FILE: &str = ".lock";

/// A task: one partition of one sub-topology, written `<subtopology>_<partition>` as in Kafka
/// Streams (`0_1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// The sub-topology (processor group) number.
    pub subtopology: u32,
    /// The input partition, which is also the changelog partition of the task's stores.
    pub partition: u32,
}

impl TaskId {
    /// The task of `partition` in `subtopology`.
    pub const fn new(subtopology: u32, partition: u32) -> Self {
        TaskId {
            subtopology,
            partition,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

impl FromStr for TaskId {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "task id {text:?} is not `<subtopology>_<partition>`"
            ))
        };
        let (subtopology, partition) = text.split_once('_').ok_or_else(bad)?;
        let number = |part: &str| {
            // `u32::from_str` accepts a leading `+`; a task directory name never has one.
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            part.parse::<u32>().map_err(|_| bad())
        };
        Ok(TaskId::new(number(subtopology)?, number(partition)?))
    }
}

/// Checks that `name` is usable as one path component: not empty, not `.` or `..`, and
/// without `/` or NUL.
///
/// # Errors
/// `InvalidArgument` saying which `kind` of name (`"application id"`, `"store name"`, ...) is
/// wrong and why.
pub fn validate_name(kind: &str, name: &str) -> Result<()> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name == "." || name == ".." {
        "it names a directory itself"
    } else if name.contains('/') {
        "it contains `/`"
    } else if name.contains('\0') {
        "it contains NUL"
    } else {
        return Ok(());
    };
    Err(Error::invalid(format!(
        "{kind} {name:?} is not allowed: {why}"
    )))
}

/// Creates `dir` and any missing parent, each new directory with mode `0700`.
///
/// # Errors
/// `Io`.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|err| Error::io(format!("creating directory {}", dir.display()), err))
}

/// An application's state directory, locked by this process until dropped.
///
/// ```
/// use statestore_changelog::{StateDirectory, TaskId};
///
/// let root = tempfile::tempdir()?;
/// let state = StateDirectory::open(root.path(), "app")?;
/// let task = state.task(TaskId::new(0, 1))?;
/// let dir = task.store_dir("rocksdb", "counts")?;
/// assert!(dir.ends_with("app/0_1/rocksdb/counts"));
/// assert_eq!(state.changelog_topic("counts")?, "app-counts-changelog");
/// // A second handle, from this process or another, is refused while this one lives.
/// assert!(StateDirectory::open(root.path(), "app").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StateDirectory {
    application_id: String,
    path: PathBuf,
    /// Tasks with a live [`TaskDirectory`]; cleanup skips them.
    open_tasks: Arc<Mutex<HashSet<TaskId>>>,
    /// Holds the exclusive lock; the OS releases it when the file closes, even on a crash.
    _lock: File,
}

impl StateDirectory {
    /// Opens (creating it `0700` if needed) `<state_dir>/<application_id>/` and locks it for
    /// the life of the returned value.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad application id; `Locked` naming the directory and the
    /// holder's pid when another `StateDirectory` (in this process or another) holds it; `Io`.
    pub fn open(state_dir: &Path, application_id: &str) -> Result<StateDirectory> {
        validate_name("application id", application_id)?;
        let path = state_dir.join(application_id);
        create_private_dir(&path)?;
        let lock = lock_application(&path)?;
        Ok(StateDirectory {
            application_id: application_id.to_string(),
            path,
            open_tasks: Arc::new(Mutex::new(HashSet::new())),
            _lock: lock,
        })
    }

    /// The application id.
    pub fn application_id(&self) -> &str {
        &self.application_id
    }

    /// The application directory, `<state_dir>/<application_id>`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The changelog topic of a store of this application: `<application_id>-<store>-changelog`.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad store name.
    pub fn changelog_topic(&self, store_name: &str) -> Result<String> {
        validate_name("store name", store_name)?;
        Ok(format!("{}-{store_name}-changelog", self.application_id))
    }

    /// Opens the directory of task `id` (creating it `0700`), reading its checkpoint, and holds
    /// it until the returned handle is dropped.
    ///
    /// # Errors
    /// `Locked` when the task is already open in this process, `Corruption` for a bad
    /// checkpoint file, or `Io`.
    pub fn task(&self, id: TaskId) -> Result<TaskDirectory> {
        let path = self.path.join(id.to_string());
        let mut open = self.open_tasks.lock();
        if open.contains(&id) {
            return Err(Error::locked(
                path,
                "the task is already open in this process",
            ));
        }
        create_private_dir(&path)?;
        let checkpoint = Arc::new(Checkpoint::open(path.join(CHECKPOINT_FILE))?);
        open.insert(id);
        Ok(TaskDirectory {
            id,
            path,
            checkpoint,
            open_tasks: Arc::clone(&self.open_tasks),
        })
    }

    /// The tasks that have a directory here, in order. Entries that are not task directories
    /// (such as `.lock`) are ignored.
    ///
    /// # Errors
    /// `Io`.
    pub fn task_ids(&self) -> Result<Vec<TaskId>> {
        let io = |err| Error::io(format!("listing {}", self.path.display()), err);
        let mut ids = Vec::new();
        for entry in fs::read_dir(&self.path).map_err(io)? {
            let entry = entry.map_err(io)?;
            let is_dir = entry.file_type().map_err(io)?.is_dir();
            let id = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse().ok());
            if let (true, Some(id)) = (is_dir, id) {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Removes the directory of every task that is not in `assigned`, not open, and not
    /// modified for at least `delay`, and returns the removed tasks. A checkpoint rewrite
    /// touches the task directory, so a task in use is never older than its last commit.
    ///
    /// # Errors
    /// `Io`; tasks removed before the failure stay removed.
    pub fn cleanup(&self, assigned: &[TaskId], delay: Duration) -> Result<Vec<TaskId>> {
        let now = SystemTime::now();
        let mut removed = Vec::new();
        for id in self.task_ids()? {
            if assigned.contains(&id) {
                continue;
            }
            // Held while checking and removing, so `task()` cannot open it in between.
            let open = self.open_tasks.lock();
            let dir = self.path.join(id.to_string());
            if open.contains(&id) || !older_than(&dir, now, delay)? {
                continue;
            }
            fs::remove_dir_all(&dir)
                .map_err(|err| Error::io(format!("removing {}", dir.display()), err))?;
            tracing::info!(task = %id, dir = %dir.display(), "removed unassigned task directory");
            removed.push(id);
        }
        Ok(removed)
    }
}

/// True when `dir` was last modified at least `delay` before `now`.
fn older_than(dir: &Path, now: SystemTime, delay: Duration) -> Result<bool> {
    let modified = fs::metadata(dir)
        .and_then(|meta| meta.modified())
        .map_err(|err| Error::io(format!("reading the age of {}", dir.display()), err))?;
    // A modification time in the future counts as age zero.
    Ok(now.duration_since(modified).unwrap_or_default() >= delay)
}

/// Takes the exclusive lock on `<app_dir>/.lock` and writes this process's pid into it.
fn lock_application(app_dir: &Path) -> Result<File> {
    let lock_path = app_dir.join(LOCK_FILE);
    let io = |what: &str, err| Error::io(format!("{what} {}", lock_path.display()), err);
    // Not truncated on open: the holder's pid must survive a failed attempt to take the lock.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|err| io("opening", err))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            // The pid is informative only: an unreadable one still yields `Locked`.
            let _ = file.read_to_string(&mut holder);
            let detail = match holder.trim() {
                "" => "held by another state directory handle".to_string(),
                pid => format!("held by process {pid}"),
            };
            return Err(Error::locked(app_dir, detail));
        }
        Err(std::fs::TryLockError::Error(err)) => return Err(io("locking", err)),
    }
    file.set_len(0).map_err(|err| io("truncating", err))?;
    file.rewind().map_err(|err| io("rewinding", err))?;
    writeln!(file, "{}", std::process::id()).map_err(|err| io("writing", err))?;
    Ok(file)
}

/// One task's directory, held open (see [`StateDirectory::task`]) until dropped.
#[derive(Debug)]
pub struct TaskDirectory {
    id: TaskId,
    path: PathBuf,
    checkpoint: Arc<Checkpoint>,
    open_tasks: Arc<Mutex<HashSet<TaskId>>>,
}

impl TaskDirectory {
    /// The task.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// `<state_dir>/<application_id>/<task_id>`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The task's checkpoint file, shared by every store of the task.
    pub fn checkpoint(&self) -> &Arc<Checkpoint> {
        &self.checkpoint
    }

    /// The directory of store `store_name` on `backend`, `<task_dir>/<backend>/<store_name>`,
    /// created `0700` if missing.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad backend or store name, or `Io`.
    pub fn store_dir(&self, backend: &str, store_name: &str) -> Result<PathBuf> {
        validate_name("backend name", backend)?;
        validate_name("store name", store_name)?;
        let dir = self.path.join(backend).join(store_name);
        create_private_dir(&dir)?;
        Ok(dir)
    }

    /// Opens store `store_name` through `factory` in its directory (see
    /// [`store_dir`](TaskDirectory::store_dir)).
    ///
    /// # Errors
    /// As [`store_dir`](TaskDirectory::store_dir) and [`BackendFactory::open`].
    pub fn open_store(
        &self,
        factory: &dyn BackendFactory,
        store_name: &str,
        options: &BackendOptions,
    ) -> Result<Arc<dyn KeyValueStore>> {
        let dir = self.store_dir(factory.name(), store_name)?;
        Ok(Arc::from(factory.open(&dir, options)?))
    }

    /// Opens store `store_name` as [`open_store`](TaskDirectory::open_store) does, for a store
    /// that its changelog restores: a store its backend finds damaged (`Corruption`, as a
    /// backend that is not crash-safe can leave it after a kill) is wiped and opened empty,
    /// and the restore then replays its whole changelog, since a checkpoint never vouches for
    /// an empty store. Kafka Streams treats corrupted task state the same way. Returns the
    /// store and whether it was wiped.
    ///
    /// # Errors
    /// As [`open_store`](TaskDirectory::open_store), except `Corruption`; `Io` when the
    /// damaged store cannot be removed.
    pub fn open_logged_store(
        &self,
        factory: &dyn BackendFactory,
        store_name: &str,
        options: &BackendOptions,
    ) -> Result<(Arc<dyn KeyValueStore>, bool)> {
        let dir = self.store_dir(factory.name(), store_name)?;
        match factory.open(&dir, options) {
            Ok(store) => Ok((Arc::from(store), false)),
            Err(err) if err.kind() == ErrorKind::Corruption => {
                tracing::warn!(
                    task = %self.id,
                    store = store_name,
                    %err,
                    "the local store is damaged: wiped, to be restored from its changelog"
                );
                fs::remove_dir_all(&dir)
                    .map_err(|err| Error::io(format!("removing {}", dir.display()), err))?;
                let dir = self.store_dir(factory.name(), store_name)?;
                Ok((Arc::from(factory.open(&dir, options)?), true))
            }
            Err(err) => Err(err),
        }
    }
}

impl Drop for TaskDirectory {
    fn drop(&mut self) {
        self.open_tasks.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_round_trip_and_reject_garbage() {
        let id: TaskId = "0_12".parse().expect("valid");
        assert_eq!(id, TaskId::new(0, 12));
        assert_eq!(id.to_string(), "0_12");
        for bad in [
            "",
            "0",
            "_1",
            "1_",
            "a_1",
            "1_+2",
            "1_2_3",
            "4294967296_0",
            ".lock",
        ] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn names_are_validated() {
        for bad in ["", ".", "..", "a/b", "/", "a\0b"] {
            let err = validate_name("store name", bad).expect_err(bad);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
        }
        for good in ["counts", "a.b", "...", "a-b_c", "ünïcode"] {
            validate_name("store name", good).expect(good);
        }
    }
}
