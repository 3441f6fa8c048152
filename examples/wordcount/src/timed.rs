//! The windowed and session word counts: per-word counts in tumbling one-minute windows of
//! event time, or per-word activity sessions, each on an operator store over one logged store.
//!
//! As in the plain count, the input position is a key of the same logged store (under
//! [`APP_KEY_TAG`], which the window and session stores leave alone), so one commit carries
//! the windows or sessions and the position: after a crash the run resumes exactly there.

use std::path::Path;
use std::sync::Arc;

use statestore_operator_stores::APP_KEY_TAG;
use statestore_operator_stores::session::{
    MergeOutcome, SessionStore, SessionStoreConfig, SessionWindows,
};
use statestore_operator_stores::window::{TimeWindows, WindowStore, WindowStoreConfig};
use store_api::{KeyValueStore, Result};

use crate::counts::{Logged, decode};

/// The key of the next line to read: `0x00` then a name.
const POSITION_KEY: &[u8] = &[APP_KEY_TAG, b'n', b'e', b'x', b't'];
/// One minute of event time.
const MINUTE_MS: i64 = 60_000;
/// Records up to this late after their window ends are still counted.
const GRACE_MS: i64 = 10_000;
/// Windows and sessions are kept this long after the stream time passes them.
const RETENTION_MS: i64 = 10 * MINUTE_MS;
/// A word unseen for this long ends its session.
const SESSION_GAP_MS: i64 = 5_000;

/// The store a timed count keeps its state in.
enum Timed {
    Windows(WindowStore, TimeWindows),
    Sessions(SessionStore, SessionWindows),
}

/// A windowed or session word count over one logged store.
pub struct TimedCounts {
    timed: Timed,
    logged: Logged,
}

impl TimedCounts {
    /// Opens (restoring) the windowed counts of application `windowed-wordcount`.
    ///
    /// # Errors
    /// As [`Logged::open`].
    pub fn open_windowed(state_dir: &Path, log_dir: &Path, backend: &str) -> Result<Self> {
        let logged = Logged::open(state_dir, log_dir, backend, "windowed-wordcount", "windows")?;
        let config = WindowStoreConfig::new(RETENTION_MS).with_segment_interval(MINUTE_MS);
        let store = WindowStore::open(Arc::clone(&logged.store) as _, config)?;
        let windows = TimeWindows::tumbling(MINUTE_MS)?.with_grace(GRACE_MS)?;
        Ok(TimedCounts {
            timed: Timed::Windows(store, windows),
            logged,
        })
    }

    /// Opens (restoring) the session counts of application `session-wordcount`.
    ///
    /// # Errors
    /// As [`Logged::open`].
    pub fn open_sessions(state_dir: &Path, log_dir: &Path, backend: &str) -> Result<Self> {
        let logged = Logged::open(state_dir, log_dir, backend, "session-wordcount", "sessions")?;
        let config = SessionStoreConfig::new(RETENTION_MS).with_segment_interval(MINUTE_MS);
        let store = SessionStore::open(Arc::clone(&logged.store) as _, config)?;
        let sessions = SessionWindows::with_gap(SESSION_GAP_MS)?.with_grace(GRACE_MS)?;
        Ok(TimedCounts {
            timed: Timed::Sessions(store, sessions),
            logged,
        })
    }

    /// The next line to read: 0 on a fresh start.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed position.
    pub fn position(&self) -> Result<u64> {
        let stored = self.logged.store.get(POSITION_KEY)?;
        stored.map_or(Ok(0), |bytes| decode(&bytes))
    }

    /// Counts `word` seen at event time `ts`; a late record is counted by the store as
    /// dropped, not here.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed count.
    pub fn add(&self, word: &str, ts: i64) -> Result<()> {
        match &self.timed {
            Timed::Windows(store, windows) => {
                let mut failed = None;
                let _ = store.aggregate(word.as_bytes(), ts, windows, |current| {
                    let count = current.map_or(Ok(0), decode).unwrap_or_else(|err| {
                        failed = Some(err);
                        0
                    });
                    (count + 1).to_be_bytes().to_vec()
                })?;
                failed.map_or(Ok(()), Err)
            }
            Timed::Sessions(store, sessions) => {
                let mut failed = None;
                let one = 1_u64.to_be_bytes();
                let _: MergeOutcome =
                    store.merge_record(word.as_bytes(), ts, sessions, &one, |a, b| {
                        let sum = decode(a).and_then(|a| Ok(a + decode(b)?));
                        sum.unwrap_or_else(|err| {
                            failed = Some(err);
                            0
                        })
                        .to_be_bytes()
                        .to_vec()
                    })?;
                failed.map_or(Ok(()), Err)
            }
        }
    }

    /// True when the buffered state reached the store's `commit_bytes`: commit at the end of
    /// the line.
    pub fn needs_commit(&self) -> bool {
        self.logged.store.needs_commit()
    }

    /// Records that every line before `next_line` is counted and commits, atomically with
    /// the windows or sessions.
    ///
    /// # Errors
    /// Any commit error.
    pub fn commit(&self, next_line: u64) -> Result<()> {
        self.logged
            .store
            .put(POSITION_KEY, &next_line.to_be_bytes())?;
        self.logged.store.commit()
    }

    /// Every retained window or session as a `start<TAB>end<TAB>word<TAB>count` line (end
    /// exclusive for windows, inclusive for sessions), in the store's order.
    ///
    /// # Errors
    /// A store error, or `Corruption` for a malformed count.
    pub fn rows(&self, words: &[&str]) -> Result<Vec<String>> {
        let mut rows = Vec::new();
        match &self.timed {
            Timed::Windows(store, windows) => {
                for entry in store.fetch_all(i64::MIN, i64::MAX)? {
                    let entry = entry?;
                    let word = String::from_utf8_lossy(&entry.key);
                    let end = windows.end_of(entry.start);
                    let count = decode(&entry.value)?;
                    rows.push(format!("{}\t{end}\t{word}\t{count}", entry.start));
                }
            }
            Timed::Sessions(store, _) => {
                for word in words {
                    for found in store.find_sessions(word.as_bytes(), i64::MIN, i64::MAX)? {
                        let (session, value) = found?;
                        let count = decode(&value)?;
                        rows.push(format!(
                            "{}\t{}\t{word}\t{count}",
                            session.start, session.end
                        ));
                    }
                }
            }
        }
        Ok(rows)
    }

    /// Records refused as later than the grace period since this run started.
    pub fn late_records(&self) -> u64 {
        match &self.timed {
            Timed::Windows(store, _) => store.dropped().late,
            Timed::Sessions(store, _) => store.dropped().late,
        }
    }

    /// How many records the restore on open replayed.
    pub fn restored_records(&self) -> u64 {
        self.logged.store.restored().records
    }

    /// Commits anything pending and closes the store.
    ///
    /// # Errors
    /// Any commit or close error.
    pub fn close(self) -> Result<()> {
        let TimedCounts { timed, logged } = self;
        drop(timed);
        logged.store.close()
    }
}
