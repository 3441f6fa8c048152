//! The word counts and the input position, kept together in one logged store.
//!
//! The position is a key of the same store as the counts, so one commit carries both: after a
//! crash the store holds the counts of exactly the lines before the stored position, and the
//! run resumes there.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use statestore_changelog::{
    CommitPolicy, FileLog, FileLogConfig, LoggedStore, LoggedStoreConfig, RestoreListener,
    StateDirectory, TaskDirectory, TaskId,
};
use store_api::{Error, KeyValueStore, Result};

/// The application id in the state directory.
const APPLICATION: &str = "wordcount";
/// The store name; its changelog topic is `wordcount-counts-changelog`.
const STORE: &str = "counts";
/// The key of the next line to read.
const POSITION_KEY: &[u8] = b"meta/next_line";
/// The prefix of count keys: `word/<word>`.
const WORD_PREFIX: &[u8] = b"word/";

/// The counting state: a logged store in a state directory, logged to a file log.
pub struct Counts {
    store: Arc<LoggedStore>,
    // Held for the store's lifetime; dropped after it.
    _task: TaskDirectory,
    _state: StateDirectory,
}

/// One logged store of an application, in its task directory, logged to a file log; the
/// windowed and session modes build their stores on it.
pub struct Logged {
    /// The store; every handle must be dropped before `Logged` is.
    pub store: Arc<LoggedStore>,
    // Held for the store's lifetime; dropped after it.
    _task: TaskDirectory,
    _state: StateDirectory,
}

impl Logged {
    /// Opens (restoring) store `store` of `application` in `state_dir` on `backend`, logged
    /// under `log_dir`.
    ///
    /// # Errors
    /// An unknown backend, a locked state directory, or any store, log or restore error.
    pub fn open(
        state_dir: &Path,
        log_dir: &Path,
        backend: &str,
        application: &str,
        store: &str,
    ) -> Result<Logged> {
        let factory = statestore::resolve(backend)?;
        let state = StateDirectory::open(state_dir, application)?;
        let task = state.task(TaskId::new(0, 0))?;
        let inner = task.open_store(factory, store, &Value::Null)?;
        let topic = state.changelog_topic(store)?;
        let log = Arc::new(FileLog::open(log_dir, &topic, 0, FileLogConfig::default())?);
        let checkpoint = Arc::clone(task.checkpoint());
        // Only `commit` commits, so every commit holds the position of the lines it counts.
        let config = LoggedStoreConfig {
            commit_policy: CommitPolicy::Explicit,
            ..LoggedStoreConfig::default()
        };
        let store = LoggedStore::open_with_listener(inner, log, checkpoint, config, &mut Progress)?;
        Ok(Logged {
            store: Arc::new(store),
            _task: task,
            _state: state,
        })
    }
}

/// Restore progress, printed to stderr.
struct Progress;

impl RestoreListener for Progress {
    fn on_start(&mut self, topic: &str, partition: u32, start: u64, end: u64) {
        if start < end {
            eprintln!("restoring {topic}-{partition}: offsets {start}..{end}");
        }
    }

    fn on_end(&mut self, topic: &str, partition: u32, total: u64) {
        if total > 0 {
            eprintln!("restored {total} records of {topic}-{partition}");
        }
    }
}

impl Counts {
    /// Opens (restoring) the counts in `state_dir` on `backend`, logged under `log_dir`.
    ///
    /// # Errors
    /// An unknown backend, a locked state directory, or any store, log or restore error.
    pub fn open(state_dir: &Path, log_dir: &Path, backend: &str) -> Result<Counts> {
        let logged = Logged::open(state_dir, log_dir, backend, APPLICATION, STORE)?;
        Ok(Counts {
            store: logged.store,
            _task: logged._task,
            _state: logged._state,
        })
    }

    /// The next line to read: 0 on a fresh start.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed position.
    pub fn position(&self) -> Result<u64> {
        self.store
            .get(POSITION_KEY)?
            .map_or(Ok(0), |bytes| decode(&bytes))
    }

    /// Adds one to the count of `word` (in the buffer, until the next commit).
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed count.
    pub fn add(&self, word: &str) -> Result<()> {
        let key = [WORD_PREFIX, word.as_bytes()].concat();
        let count = self
            .store
            .get(&key)?
            .map_or(Ok(0), |bytes| decode(&bytes))?;
        self.store.put(&key, &(count + 1).to_be_bytes())
    }

    /// True when the buffered counts reached the store's `commit_bytes`: commit at the end of
    /// the line.
    pub fn needs_commit(&self) -> bool {
        self.store.needs_commit()
    }

    /// Records that every line before `next_line` is counted and commits, atomically with
    /// the counts: both are in the same store, so in the same commit.
    ///
    /// # Errors
    /// Any commit error.
    pub fn commit(&self, next_line: u64) -> Result<()> {
        self.store.put(POSITION_KEY, &next_line.to_be_bytes())?;
        self.store.commit()
    }

    /// Every (word, count), in word order.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed count.
    pub fn all(&self) -> Result<Vec<(String, u64)>> {
        let (from, to) = store_api::bounds::prefix_bounds(WORD_PREFIX);
        let as_ref = store_api::bounds::as_ref_bound;
        let iter = self.store.range(as_ref(&from), as_ref(&to))?;
        iter.map(|item| {
            let (key, value) = item?;
            let word = String::from_utf8_lossy(&key[WORD_PREFIX.len()..]).into_owned();
            Ok((word, decode(&value)?))
        })
        .collect()
    }

    /// How many records the restore on open replayed.
    pub fn restored_records(&self) -> u64 {
        self.store.restored().records
    }

    /// Commits anything pending and closes the store.
    ///
    /// # Errors
    /// Any commit or close error.
    pub fn close(self) -> Result<()> {
        self.store.close()
    }
}

/// Decodes a big-endian `u64`.
pub fn decode(bytes: &[u8]) -> Result<u64> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| Error::Corruption(format!("expected 8 bytes, found {}", bytes.len())))?;
    Ok(u64::from_be_bytes(array))
}
