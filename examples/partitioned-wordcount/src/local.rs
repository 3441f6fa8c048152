//! `local-restore`: the restore of the example's 4 tasks from changelogs in local segment files
//! (`FileLog`) instead of Kafka topics, one task after another and then several at a time, the
//! way a rebalance restores them (`statestore-tasks`' `restore_parallelism`). Against a broker
//! the restore can be no faster than the broker serves fetches; from local files it shows what
//! restoring tasks in parallel gains when the log keeps up.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use statestore_changelog::{
    FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig, StateDirectory, TaskDirectory, TaskId,
};
use store_api::{Error, KeyValueStore, Result};

use crate::STORES;

const TASKS: u32 = 4;
const APPLICATION_ID: &str = "local-restore";
/// Keys per commit while writing the logs: about what one commit interval of the Kafka run
/// holds (its letters store restores 4 commits a task at 400 000 keys).
const COMMIT_KEYS: u64 = 25_000;

/// Writes the changelogs of `keys` distinct keys under `dir`, then restores every task from
/// them into a fresh state directory with parallelism 1 and `parallelism`, and prints both
/// times.
///
/// # Errors
/// Any error of the logs, the stores or the state directories.
pub fn run(dir: &Path, keys: u64, backend: &str, parallelism: usize) -> Result<()> {
    if parallelism == 0 {
        return Err(Error::invalid("--parallelism must be at least 1"));
    }
    let logs = dir.join("logs");
    remove(&logs)?;
    let written = Instant::now();
    let mut logged = 0;
    for partition in 0..TASKS {
        logged += write_logs(&logs, partition, keys)?;
    }
    eprintln!(
        "wrote the changelogs of {keys} keys over {TASKS} tasks to {} in {} ms",
        logs.display(),
        written.elapsed().as_millis()
    );
    let mut serial = None;
    for threads in [1, parallelism] {
        let state = dir.join(format!("state-{threads}"));
        remove(&state)?;
        let cpu_before = process_cpu();
        let (elapsed, records) = restore_all(&state, &logs, backend, threads, keys)?;
        let cpu = process_cpu().saturating_sub(cpu_before);
        if records != logged {
            return Err(Error::Corruption(format!(
                "the restore with parallelism {threads} replayed {records} of the {logged} \
                 records logged"
            )));
        }
        let ratio = serial.map_or(String::new(), |s: Duration| {
            format!(" ({:.2}x)", s.as_secs_f64() / elapsed.as_secs_f64())
        });
        println!(
            "local restore of {TASKS} tasks ({keys} keys, {records} records) from FileLogs into \
             {backend}, restore_parallelism {threads}: {} ms{ratio}, CPU time {} ms ({:.2} cores)",
            elapsed.as_millis(),
            cpu.as_millis(),
            cpu.as_secs_f64() / elapsed.as_secs_f64()
        );
        serial.get_or_insert(elapsed);
        remove(&state)?;
    }
    remove(&logs)
}

/// The CPU time every thread of this process used so far: whether a restore is bound by CPU,
/// and by how many cores.
pub(crate) fn process_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

fn topic(store: &str) -> String {
    format!("{APPLICATION_ID}-{store}-changelog")
}

/// Logs the keys `k<n>` with `n % TASKS == partition` to the task's counts changelog, and a
/// running total to its letters changelog, committing both every [`COMMIT_KEYS`] keys, as the
/// example's processing of `produce --distinct-keys` does. Returns the updates logged.
fn write_logs(logs: &Path, partition: u32, keys: u64) -> Result<u64> {
    let open = |store: &str| -> Result<LoggedStore> {
        let dir = logs.join(format!("memory-{store}-{partition}"));
        let memory = statestore::resolve("memory")?;
        let inner: Arc<dyn KeyValueStore> = Arc::from(memory.open(&dir, &serde_json::Value::Null)?);
        let log = FileLog::open(logs, &topic(store), partition, FileLogConfig::default())?;
        let checkpoint = Arc::new(statestore_changelog::Checkpoint::open(
            logs.join(format!(".checkpoint-{store}-{partition}")),
        )?);
        LoggedStore::open(
            inner,
            Arc::new(log),
            checkpoint,
            LoggedStoreConfig::default(),
        )
    };
    let [counts, letters] = [open(STORES[0])?, open(STORES[1])?];
    let mut total = 0u64;
    for n in (u64::from(partition)..keys).step_by(TASKS as usize) {
        counts.put(format!("k{n}").as_bytes(), &1u64.to_be_bytes())?;
        total += 1;
        letters.put(b"k", &total.to_be_bytes())?;
        if total.is_multiple_of(COMMIT_KEYS) {
            counts.commit()?;
            letters.commit()?;
        }
    }
    let commits = total.div_ceil(COMMIT_KEYS);
    counts.commit()?;
    letters.commit()?;
    counts.close()?;
    letters.close()?;
    // One update of the letters store per commit: the buffer keeps a key's latest write.
    Ok(total + commits)
}

/// An opened task: its partition, its stores, then its directory (released after them).
type Opened = (u32, Vec<LoggedStore>, TaskDirectory);

/// Opens and restores every task into `state`, `threads` tasks at a time, as
/// `statestore-tasks` does on an assignment; returns the time until all are restored and the
/// records replayed.
fn restore_all(
    state: &Path,
    logs: &Path,
    backend: &str,
    threads: usize,
    keys: u64,
) -> Result<(Duration, u64)> {
    let state = StateDirectory::open(state, APPLICATION_ID)?;
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let opened: Vec<Result<Opened>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(TASKS as usize))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    while let Ok(partition) = u32::try_from(next.fetch_add(1, Ordering::Relaxed))
                        && partition < TASKS
                    {
                        mine.push(open_task(&state, logs, backend, partition));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let mut records = 0;
    for task in opened {
        let (partition, stores, _dir) = task?;
        check(partition, &stores, keys)?;
        for store in stores {
            records += store.restored().records;
            store.close()?;
        }
    }
    Ok((elapsed, records))
}

/// Opens the stores of task `0_<partition>` on their local changelogs, restoring each, as
/// `statestore-tasks`' `Task::open` does on Kafka changelogs.
fn open_task(state: &StateDirectory, logs: &Path, backend: &str, partition: u32) -> Result<Opened> {
    let dir = state.task(TaskId::new(0, partition))?;
    let factory = statestore::resolve(backend)?;
    let mut stores = Vec::with_capacity(STORES.len());
    for store in STORES {
        let inner = dir.open_store(factory, store, &serde_json::Value::Null)?;
        let log = FileLog::open(logs, &topic(store), partition, FileLogConfig::default())?;
        stores.push(LoggedStore::open(
            inner,
            Arc::new(log),
            Arc::clone(dir.checkpoint()),
            LoggedStoreConfig::default(),
        )?);
    }
    Ok((partition, stores, dir))
}

/// Checks that the restored stores of task `0_<partition>` hold its first key and its total.
fn check(partition: u32, stores: &[LoggedStore], keys: u64) -> Result<()> {
    let (Some(counts), Some(letters)) = (stores.first(), stores.get(1)) else {
        return Err(Error::invalid("a task without its two stores"));
    };
    let task_keys = keys
        .saturating_sub(u64::from(partition))
        .div_ceil(u64::from(TASKS));
    let first = counts.get(format!("k{partition}").as_bytes())?;
    let total = letters.get(b"k")?;
    let expected_first = (task_keys > 0).then(|| 1u64.to_be_bytes().to_vec());
    let expected_total = (task_keys > 0).then(|| task_keys.to_be_bytes().to_vec());
    if first != expected_first || total != expected_total {
        return Err(Error::Corruption(format!(
            "task 0_{partition} restored k{partition} = {first:?} and a total of {total:?}, \
             not {expected_first:?} and {expected_total:?}"
        )));
    }
    Ok(())
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("removing {}", path.display()), err))
        }
        _ => Ok(()),
    }
}
