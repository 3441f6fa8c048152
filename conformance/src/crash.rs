//! A real crash, for persistent stores: a child process (the test binary itself, running an
//! ignored test) opens a store, writes, and dies by `abort` with everything still open; the
//! parent then reopens the directory and counts what survived.
//!
//! The child writes batch `a` (100 keys), calls `flush`, writes batch `b` (100 keys) and puts
//! `c`, then aborts. The contract allows the crash to lose `b` and `c` but never part of `b`,
//! and never `a`: see [`Survivors::assert_flushed_kept_and_batches_whole`].
//!
//! [`store_suite!`](crate::store_suite) generates the child test [`CHILD_TEST`] for the suite's
//! factory, and the case
//! [`crash_keeps_flushed_writes_and_whole_batches`](crate::store::crash_keeps_flushed_writes_and_whole_batches)
//! runs it. A backend checks its own durability modes with its own child test, which calls
//! [`child`] with an opener for each mode, and [`run_child_then_reopen`]:
//!
//! ```text
//! #[test]
//! #[ignore = "run as a child process by the crash tests"]
//! fn crash_child() {
//!     statestore_conformance::crash::child(|dir, mode| open_in_mode(dir, mode));
//! }
//!
//! #[test]
//! fn synced_mode_keeps_everything() {
//!     let reopen = |dir: &Path| open_in_mode(dir, "default");
//!     statestore_conformance::crash::run_child_then_reopen("crash_child", "synced", &reopen)
//!         .assert_everything_kept("synced");
//! }
//! ```
//!
//! The same child test also serves [`kills::kill_at_random`]: started by it, the child
//! writes batches and flushes in a loop until the parent kills it with SIGKILL at a random
//! moment, many times over one directory (see [`kills`]).

pub mod kills;

use std::path::Path;
use std::process::Command;

use store_api::{BatchOp, KeyValueStore, Result, WriteBatch};

use crate::StoreFactory;

/// The name of the ignored child test that [`store_suite!`](crate::store_suite) generates. It
/// is unique enough to select that test alone without `--exact`, wherever the macro is invoked.
pub const CHILD_TEST: &str = "statestore_conformance_crash_child";

/// Tells the child which directory to open; a child started without it does nothing.
const DIR_VAR: &str = "STATESTORE_CONFORMANCE_CRASH_DIR";
/// Tells the child which scenario (opening mode) to pass to its opener.
const SCENARIO_VAR: &str = "STATESTORE_CONFORMANCE_CRASH_SCENARIO";

/// Keys in each of the child's two batches.
pub const BATCH_KEYS: usize = 100;
/// The value of the child's last `put`, of key `c`.
const LAST_VALUE: &[u8] = b"last";

fn batch(prefix: &str) -> WriteBatch {
    (0..BATCH_KEYS)
        .map(|i| BatchOp::Put {
            key: format!("{prefix}{i:03}").into_bytes(),
            value: vec![7; 64],
        })
        .collect()
}

/// The child's half. When started by [`run_child`], opens the directory it was given with
/// `open(dir, scenario)`, writes batch `a`, flushes, writes batch `b` and puts `c`, then aborts
/// the process with the store still open. When started by [`kills::kill_at_random`], it writes
/// batches and flushes in a loop until it is killed instead. Started any other way (say by
/// `cargo test -- --ignored`), it returns at once: the parent sees the child exit normally and
/// fails, so a child that never crashes cannot pass for one that did.
///
/// # Panics
/// When opening or writing fails: the child then exits with a panic, which the parent reports.
pub fn child(open: impl Fn(&Path, &str) -> Result<Box<dyn KeyValueStore>>) {
    let (Some(dir), Some(scenario)) = (std::env::var_os(DIR_VAR), std::env::var_os(SCENARIO_VAR))
    else {
        return;
    };
    let scenario = scenario.to_string_lossy();
    let store = open(Path::new(&dir), &scenario)
        .unwrap_or_else(|err| panic!("the crash child could not open the store: {err}"));
    if let Some(acks) = std::env::var_os(kills::ACKS_VAR) {
        kills::write_until_killed(store.as_ref(), Path::new(&acks));
        return;
    }
    store.write(batch("a")).expect("write of batch a");
    store.flush().expect("flush after batch a");
    store.write(batch("b")).expect("write of batch b");
    store.put(b"c", LAST_VALUE).expect("put of c");
    std::process::abort();
}

/// Runs `child_test` of the running test binary in a child process on `dir`, passing it
/// `scenario`, and checks that it died rather than exited. `child_test` must be a test that
/// calls [`child`]; it is selected by name without `--exact`, so its full path does not matter.
///
/// # Panics
/// When the child cannot be started or exits successfully (it did not run, or did not crash).
pub fn run_child(child_test: &str, dir: &Path, scenario: &str) {
    let exe = std::env::current_exe().expect("the path of the running test binary");
    let output = Command::new(exe)
        .args([child_test, "--ignored", "--nocapture", "--test-threads=1"])
        .env(DIR_VAR, dir)
        .env(SCENARIO_VAR, scenario)
        .output()
        .expect("starting the crash child");
    assert!(
        !output.status.success(),
        "the crash child exited normally instead of aborting; is `{child_test}` a test in this \
         binary (store_suite! generates `{CHILD_TEST}`)?\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

/// What a reopened store holds of the child's writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survivors {
    /// Keys of batch `a`, written and flushed before the crash.
    pub flushed: usize,
    /// Keys of batch `b`, written after the flush.
    pub unflushed: usize,
    /// The value of `c`, the last write before the crash, if it survived.
    pub last: Option<Vec<u8>>,
}

impl Survivors {
    /// Counts the child's writes in a store reopened after the crash.
    ///
    /// # Panics
    /// When a read fails.
    pub fn count(store: &dyn KeyValueStore) -> Self {
        let count = |prefix: &[u8]| {
            store
                .prefix_scan(prefix)
                .expect("prefix_scan after the crash")
                .collect::<Result<Vec<_>>>()
                .expect("an entry after the crash")
                .len()
        };
        Survivors {
            flushed: count(b"a"),
            unflushed: count(b"b"),
            last: store.get(b"c").expect("get after the crash"),
        }
    }

    /// The contract for every store: the flushed batch is all there, and the unflushed one is
    /// all there or not at all. `what` names the scenario in the failure message.
    ///
    /// # Panics
    /// When either does not hold.
    pub fn assert_flushed_kept_and_batches_whole(&self, what: &str) {
        assert_eq!(
            self.flushed, BATCH_KEYS,
            "{what}: a flushed batch lost keys in a crash"
        );
        assert!(
            self.unflushed == 0 || self.unflushed == BATCH_KEYS,
            "{what}: an unflushed batch must survive whole or not at all, {} of {BATCH_KEYS} did",
            self.unflushed
        );
    }

    /// For stores that make every write durable before it returns: nothing was lost.
    ///
    /// # Panics
    /// When a write that returned is missing.
    pub fn assert_everything_kept(&self, what: &str) {
        let everything = Survivors {
            flushed: BATCH_KEYS,
            unflushed: BATCH_KEYS,
            last: Some(LAST_VALUE.to_vec()),
        };
        assert_eq!(self, &everything, "{what}: a write that returned was lost");
    }
}

/// The parent's half in a fresh temporary directory: [`run_child`] with `child_test` and
/// `scenario`, then `reopen` the directory and count what survived.
///
/// # Panics
/// As [`run_child`], or when the directory cannot be created or reopened.
pub fn run_child_then_reopen(
    child_test: &str,
    scenario: &str,
    reopen: &dyn StoreFactory,
) -> Survivors {
    let dir = tempfile::Builder::new()
        .prefix("statestore-crash-")
        .tempdir()
        .expect("creating a temporary directory for the crash");
    run_child(child_test, dir.path(), scenario);
    let store = reopen
        .open(dir.path())
        .unwrap_or_else(|err| panic!("reopening after the crash ({scenario}) failed: {err}"));
    let survivors = Survivors::count(store.as_ref());
    store.close().expect("close after the crash");
    survivors
}
