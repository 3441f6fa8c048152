//! The changelog's tests that start no process, in one test binary: one link instead of
//! eleven. Tests that fork a child (`crash_kill9`, `logged_state_dir`, and the Kafka tests,
//! which start brokers) stay in binaries of their own: between fork and exec a child holds a
//! copy of every descriptor of its parent, so a lock file that another test closes in that
//! window would still look held when it reopens it.

#[path = "../logged_common/mod.rs"]
mod logged_common;

mod changelog_conformance;
mod file_log;
mod file_log_compaction;
mod file_log_torn_tail;
mod logged_commit;
mod logged_faults;
mod logged_fencing;
mod logged_model;
mod logged_rates;
mod logged_reads;
mod logged_restore;
mod logged_snapshots;
