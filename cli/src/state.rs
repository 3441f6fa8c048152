//! Reading a state directory without changing it: `<state_dir>/<application_id>/<task_id>/
//! <backend>/<store_name>/`, with a `.checkpoint` per task and a `.lock` per application.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use statestore_benches::dir_size;
use statestore_changelog::{
    CHECKPOINT_FILE, CheckpointEntries, LOCK_FILE, StateDirectory, TaskId, read_checkpoint,
};

use crate::CliResult;

/// One application directory.
#[derive(Debug)]
pub struct App {
    /// The application id (the directory name).
    pub id: String,
    /// `<state_dir>/<application_id>`.
    pub path: PathBuf,
    /// Who holds the application's lock, when a process does.
    pub held_by: Option<String>,
    /// Its task directories, in order.
    pub tasks: Vec<Task>,
}

/// One task directory.
#[derive(Debug)]
pub struct Task {
    /// The task id.
    pub id: TaskId,
    /// `<app>/<task_id>`.
    pub path: PathBuf,
    /// The checkpoint entries, or why they could not be read.
    pub checkpoint: Result<CheckpointEntries, String>,
    /// The task's stores, by backend then name.
    pub stores: Vec<Store>,
}

/// One store directory.
#[derive(Debug, Clone)]
pub struct Store {
    /// The backend directory's name.
    pub backend: String,
    /// The store's name.
    pub name: String,
    /// `<task>/<backend>/<store>`.
    pub path: PathBuf,
    /// The bytes of its files.
    pub bytes: u64,
}

impl Task {
    /// The checkpointed offset of `store`'s changelog partition for this task, if any.
    pub fn checkpointed(&self, app: &str, store: &str) -> Option<u64> {
        let topic = format!("{app}-{store}-changelog");
        let entries = self.checkpoint.as_ref().ok()?;
        entries
            .iter()
            .find(|(tp, _)| tp.topic == topic && tp.partition == self.id.partition)
            .map(|(_, offset)| *offset)
    }
}

fn subdirs(path: &Path) -> CliResult<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let entries =
        fs::read_dir(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    for entry in entries {
        let entry = entry.map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
            out.push((name.to_string(), entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads every application under `state_dir`. A directory counts as an application when it
/// holds a `.lock` file or at least one task directory.
///
/// # Errors
/// A state directory that does not exist or cannot be listed.
pub fn scan(state_dir: &Path) -> CliResult<Vec<App>> {
    if !state_dir.is_dir() {
        return Err(format!("{} is not a directory", state_dir.display()).into());
    }
    let mut apps = Vec::new();
    for (id, path) in subdirs(state_dir)? {
        let tasks = scan_tasks(&path)?;
        if tasks.is_empty() && !path.join(LOCK_FILE).exists() {
            continue;
        }
        apps.push(App {
            held_by: lock_holder(&path),
            id,
            path,
            tasks,
        });
    }
    Ok(apps)
}

fn scan_tasks(app_dir: &Path) -> CliResult<Vec<Task>> {
    let mut tasks = Vec::new();
    for (name, path) in subdirs(app_dir)? {
        let Ok(id) = name.parse::<TaskId>() else {
            continue;
        };
        let checkpoint = read_checkpoint(&path.join(CHECKPOINT_FILE))
            .map(Option::unwrap_or_default)
            .map_err(|err| err.to_string());
        let mut stores = Vec::new();
        for (backend, backend_dir) in subdirs(&path)? {
            for (name, store_dir) in subdirs(&backend_dir)? {
                stores.push(Store {
                    bytes: dir_size(&store_dir),
                    backend: backend.clone(),
                    name,
                    path: store_dir,
                });
            }
        }
        tasks.push(Task {
            id,
            path,
            checkpoint,
            stores,
        });
    }
    Ok(tasks)
}

/// The process holding the application's lock, or `None` when it is free. Probes with a
/// shared lock released at once, so it never blocks, and reads the pid the holder wrote.
fn lock_holder(app_dir: &Path) -> Option<String> {
    let path = app_dir.join(LOCK_FILE);
    let file = File::open(&path).ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            // Dropping the file would release it too; unlocking first says so.
            let _ = file.unlock();
            None
        }
        Err(_) => {
            let pid = fs::read_to_string(&path).unwrap_or_default();
            Some(match pid.trim() {
                "" => "another process".to_string(),
                pid => format!("process {pid}"),
            })
        }
    }
}

/// Picks the application: the one named, or the only one there is.
///
/// # Errors
/// No application, an unknown one, or several without `--application`.
pub fn pick_app<'a>(apps: &'a [App], wanted: Option<&str>, state_dir: &Path) -> CliResult<&'a App> {
    let names = || {
        apps.iter()
            .map(|app| app.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match wanted {
        Some(name) => apps.iter().find(|app| app.id == name).ok_or_else(|| {
            format!(
                "no application {name:?} in {}; found: {}",
                state_dir.display(),
                names()
            )
            .into()
        }),
        None => match apps {
            [] => Err(format!("no application in {}", state_dir.display()).into()),
            [only] => Ok(only),
            _ => Err(format!(
                "several applications in {}; pick one with --application: {}",
                state_dir.display(),
                names()
            )
            .into()),
        },
    }
}

/// Locks the application directory, as the application itself does, so nothing writes to its
/// stores while we use them.
///
/// # Errors
/// The application is running (`Locked`, with its pid), or the lock file cannot be taken.
pub fn lock_app(state_dir: &Path, app: &App) -> CliResult<StateDirectory> {
    StateDirectory::open(state_dir, &app.id).map_err(|err| {
        format!(
            "cannot lock application {:?} (stop it first): {err}",
            app.id
        )
        .into()
    })
}

/// A partition of an embedded file log: a `<topic>-<partition>` directory.
#[derive(Debug)]
pub struct LogPartition {
    /// `<topic>-<partition>`.
    pub name: String,
    /// The bytes of its segments.
    pub bytes: u64,
}

/// The embedded file logs kept inside the state directory (as wordcount keeps its log in
/// `<state_dir>/changelog`): each directory that is not an application and holds
/// `<something>-changelog-<partition>` directories.
///
/// # Errors
/// A state directory that cannot be listed.
pub fn file_logs(state_dir: &Path, apps: &[App]) -> CliResult<Vec<(PathBuf, Vec<LogPartition>)>> {
    let mut logs = Vec::new();
    for (name, path) in subdirs(state_dir)? {
        if apps.iter().any(|app| app.id == name) {
            continue;
        }
        let partitions: Vec<LogPartition> = subdirs(&path)?
            .into_iter()
            .filter(|(name, _)| is_log_partition(name))
            .map(|(name, dir)| LogPartition {
                bytes: dir_size(&dir),
                name,
            })
            .collect();
        if !partitions.is_empty() {
            logs.push((path, partitions));
        }
    }
    Ok(logs)
}

fn is_log_partition(name: &str) -> bool {
    name.rsplit_once('-').is_some_and(|(topic, partition)| {
        topic.ends_with("-changelog") && partition.parse::<u32>().is_ok()
    })
}
