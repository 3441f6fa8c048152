//! `statestore restore`: rebuild a store of a state directory from its changelog.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use statestore_changelog::{
    Changelog, DEFAULT_RESTORE_BATCH_RECORDS, FileLog, FileLogConfig, KafkaConfig, KafkaLog,
    RestoreListener, StateDirectory, TaskDirectory, TaskId, restore, validate_name,
};
use store_api::{BackendOptions, KeyValueStore};

use crate::CliResult;
use crate::dump::parse_task;
use statestore_benches::compare::thousands;

/// Arguments of `statestore restore`.
#[derive(Debug, Args)]
#[command(
    after_help = "The changelog topic is <application>-<store>-changelog; task <s>_<p> \
restores partition p. With a file log and no --task, every partition found in the log \
directory is restored, each into the task of that partition already in the state directory \
(or 0_<p>). A store with a checkpoint the log still covers only replays the records after it; \
a store new to this backend, or --fresh (which deletes the store first), replays everything. \
The application must not be running."
)]
pub struct RestoreArgs {
    /// The state directory: the parent of the application directories.
    state_dir: PathBuf,
    /// The application id.
    #[arg(long)]
    application: String,
    /// The store's name.
    #[arg(long)]
    store: String,
    /// The backend to rebuild the store in.
    #[arg(long, value_parser = parse_persistent_backend)]
    backend: String,
    /// The embedded file log's directory, which holds TOPIC-PARTITION/ directories
    /// [default: STATE_DIR/changelog, where the wordcount example keeps it].
    #[arg(long, conflicts_with = "kafka")]
    log_dir: Option<PathBuf>,
    /// Kafka bootstrap servers (host:port,...) to read the changelog topic from.
    #[arg(long)]
    kafka: Option<String>,
    /// The tasks to restore, such as 0_1 [default with a file log: every partition in it].
    #[arg(long, value_delimiter = ',', value_parser = parse_task)]
    task: Vec<TaskId>,
    /// Delete the store and its checkpoint first, then replay the whole log.
    #[arg(long)]
    fresh: bool,
    /// Backend options as JSON, such as '{"compression":"zstd"}' [default: the defaults].
    #[arg(long, value_parser = parse_options)]
    options: Option<BackendOptions>,
    /// Records per restore batch.
    #[arg(long, default_value_t = DEFAULT_RESTORE_BATCH_RECORDS as u64, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    batch: u64,
}

impl RestoreArgs {
    /// The file log directory, or `None` when the changelog is on Kafka.
    fn file_log_dir(&self) -> Option<PathBuf> {
        match (&self.log_dir, &self.kafka) {
            (Some(dir), _) => Some(dir.clone()),
            (None, Some(_)) => None,
            (None, None) => Some(self.state_dir.join("changelog")),
        }
    }
}

fn parse_persistent_backend(name: &str) -> Result<String, String> {
    // Through the process-wide registry: the built-ins, and any backend a wrapper registered.
    statestore::resolve(name).map_err(|err| err.to_string())?;
    if name == "memory" {
        return Err(
            "the memory backend keeps nothing on disk, so there is nothing to restore \
                    into; pick a persistent backend"
                .to_string(),
        );
    }
    Ok(name.to_string())
}

fn parse_options(text: &str) -> Result<BackendOptions, String> {
    serde_json::from_str(text).map_err(|err| format!("not valid JSON: {err}"))
}

/// Restores each selected task's store from its changelog partition.
///
/// # Errors
/// A bad name, a running application, no partition to restore, or any failure of the log,
/// the store or the checkpoint.
pub fn run(args: &RestoreArgs) -> CliResult {
    // Everything that can be checked without touching the state directory is checked first,
    // so a mistyped command leaves no new directory behind.
    validate_name("application id", &args.application)?;
    validate_name("store name", &args.store)?;
    let topic = format!("{}-{}-changelog", args.application, args.store);
    let tasks = select_tasks(args, &topic)?;
    let logs = tasks
        .iter()
        .map(|task| open_log(args, &topic, task.partition))
        .collect::<CliResult<Vec<_>>>()?;
    let state = StateDirectory::open(&args.state_dir, &args.application).map_err(|err| {
        format!(
            "cannot lock application {:?} (stop it first): {err}",
            args.application
        )
    })?;
    for (task, log) in tasks.into_iter().zip(logs) {
        restore_task(args, &state, task, log.as_ref())?;
    }
    Ok(())
}

fn select_tasks(args: &RestoreArgs, topic: &str) -> CliResult<Vec<TaskId>> {
    if !args.task.is_empty() {
        return Ok(args.task.clone());
    }
    let Some(log_dir) = args.file_log_dir() else {
        return Err(
            "with --kafka, name the tasks to restore with --task (such as --task 0_0)".into(),
        );
    };
    let existing = existing_tasks(&args.state_dir.join(&args.application));
    let tasks: Vec<TaskId> = partitions_in(&log_dir, topic)?
        .into_iter()
        .map(|partition| {
            existing
                .iter()
                .copied()
                .find(|task| task.partition == partition)
                .unwrap_or(TaskId::new(0, partition))
        })
        .collect();
    if tasks.is_empty() {
        return Err(format!("{} holds no log of topic {topic}", log_dir.display()).into());
    }
    Ok(tasks)
}

/// The tasks that already have a directory in `app_dir` (none when it does not exist).
fn existing_tasks(app_dir: &Path) -> Vec<TaskId> {
    let Ok(entries) = std::fs::read_dir(app_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// The partitions of `topic` that have a directory `<topic>-<partition>` in `log_dir`.
fn partitions_in(log_dir: &Path, topic: &str) -> CliResult<Vec<u32>> {
    let entries = std::fs::read_dir(log_dir)
        .map_err(|err| format!("cannot read the log directory {}: {err}", log_dir.display()))?;
    let prefix = format!("{topic}-");
    let mut partitions: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.strip_prefix(&prefix)?.parse().ok()
        })
        .collect();
    partitions.sort_unstable();
    Ok(partitions)
}

fn open_log(args: &RestoreArgs, topic: &str, partition: u32) -> CliResult<Box<dyn Changelog>> {
    let Some(log_dir) = args.file_log_dir() else {
        return open_kafka(args, partition);
    };
    let dir = log_dir.join(format!("{topic}-{partition}"));
    if !dir.is_dir() {
        return Err(format!(
            "no log of {topic} partition {partition}: {} is missing",
            dir.display()
        )
        .into());
    }
    let log = FileLog::open(&log_dir, topic, partition, FileLogConfig::default())?;
    Ok(Box::new(log))
}

fn open_kafka(args: &RestoreArgs, partition: u32) -> CliResult<Box<dyn Changelog>> {
    let config = KafkaConfig {
        bootstrap_servers: args.kafka.clone().unwrap_or_default(),
        application_id: args.application.clone(),
        store_name: args.store.clone(),
        ..KafkaConfig::default()
    };
    Ok(Box::new(KafkaLog::open(config, partition)?))
}

fn restore_task(
    args: &RestoreArgs,
    state: &StateDirectory,
    id: TaskId,
    log: &dyn Changelog,
) -> CliResult {
    let task = state.task(id)?;
    let store_dir = task.path().join(&args.backend).join(&args.store);
    // The checkpoint is per changelog partition, not per backend: it vouches for the store
    // the task had. A store new on this backend must not trust it, so it replays everything.
    if args.fresh || !store_dir.exists() {
        wipe_store(&store_dir, &task, log)?;
    }
    let factory = statestore::resolve(&args.backend)?;
    let options = args.options.clone().unwrap_or(BackendOptions::Null);
    let store: Arc<dyn KeyValueStore> = task.open_store(factory, &args.store, &options)?;
    let mut progress = Progress::new(format!("task {id} {}/{}", args.backend, args.store));
    let started = Instant::now();
    let batch = usize::try_from(args.batch).unwrap_or(usize::MAX);
    let outcome = restore(store.as_ref(), log, task.checkpoint(), batch, &mut progress)?;
    store.close()?;
    let secs = started.elapsed().as_secs_f64();
    let how = if outcome.wiped {
        "full replay"
    } else {
        "after the checkpoint"
    };
    let checkpoint = outcome
        .checkpoint
        .map_or("none (empty log)".to_string(), |offset| offset.to_string());
    outln!(
        "task {id}: restored {} records into {}/{} from offset {} ({how}), checkpoint {checkpoint}, \
         in {secs:.2}s ({} records/s)",
        outcome.records,
        args.backend,
        args.store,
        outcome.from,
        thousands(outcome.records as f64 / secs.max(1e-9)),
    )?;
    Ok(())
}

/// Deletes the store's directory, if any, and forgets its checkpoint, so the restore replays
/// the whole log into an empty store.
fn wipe_store(store_dir: &Path, task: &TaskDirectory, log: &dyn Changelog) -> CliResult {
    match std::fs::remove_dir_all(store_dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(format!("removing {}: {err}", store_dir.display()).into()),
    }
    task.checkpoint().remove(log.topic(), log.partition())?;
    Ok(())
}

/// A progress bar driven by the restore's listener callbacks.
struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(prefix: String) -> Progress {
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} records, {per_sec}, eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(prefix);
        Progress { bar }
    }
}

impl RestoreListener for Progress {
    fn on_start(&mut self, _topic: &str, _partition: u32, start: u64, end: u64) {
        self.bar.set_length(end.saturating_sub(start));
    }

    fn on_batch(&mut self, _topic: &str, _partition: u32, _end: u64, records: usize) {
        self.bar.inc(records as u64);
    }

    fn on_end(&mut self, _topic: &str, _partition: u32, _total: u64) {
        self.bar.finish_and_clear();
    }
}
