//! The changelog cases: one public function per clause of the
//! [`Changelog`] contract, each taking the
//! [`ChangelogFactory`] under test and panicking when the log breaks the clause.
//!
//! [`changelog_suite!`](crate::changelog_suite) turns them all into `#[test]`s;
//! [`CHANGELOG_CASES`] lists them for running by hand.
//!
//! # What it checks
//! - append order, offsets consecutive within an append and ascending across appends, the
//!   empty append, oversized keys rejected without writing;
//! - tombstones, the empty key and value, binary bytes, a 1 MiB value;
//! - reads from every offset, past the end, `max_records`, reads in batches (as a restore
//!   does), records readable before `sync`;
//! - `start_offset` and `end_offset` as records are appended;
//! - reopen: records, tombstones and the end offset survive, appends continue at the old end;
//! - readers on several threads while one appends, and appenders racing each other;
//! - commit framing: markers close commits, unframed records restore one by one, a
//!   commit torn at the tail after any number of its records is not restored, commits
//!   abandoned halfway by dying writers are never applied by any later restore, a tailing
//!   [`CommitReader`](statestore_changelog::CommitReader) releases whole commits only;
//! - the largest record the log declares round-trips, one byte more is refused.
//!
//! # Reopen
//! The cases of the `reopen` group (see [`ChangelogCase::reopens`]) drop the log and call the
//! factory again with the same directory, topic and partition, expecting the same log. A file
//! log reopens its directory; a remote log (Kafka) connects again and finds the same topic; a
//! memory log needs a factory that keeps its handles by topic and partition. Before dropping,
//! the cases call `sync`, the point from which the contract promises durability.
//!
//! Every case uses its own topic, named after the case plus the process id, a timestamp and a
//! counter, so cases sharing a broker, and reruns against the same broker, never meet each
//! other's records; the partition is always 0, which every topic has.

mod basic;
mod concurrency;
mod fixture;
mod framing;
pub(crate) mod map_store;
mod reads;
mod reopen;

use std::path::Path;

use statestore_changelog::Changelog;
use store_api::Result;

pub use fixture::ChangelogFixture;

/// Opens a changelog partition. The suite calls it once per case with a fresh temporary
/// directory and a fresh topic, and again with the same arguments to reopen the same log.
///
/// Any `Fn(&Path, &str, u32) -> Result<Box<dyn Changelog>>` is a factory:
///
/// ```
/// use statestore_changelog::{Changelog, FileLog, FileLogConfig};
/// use statestore_conformance::changelog::ChangelogFactory;
///
/// let factory = |dir: &std::path::Path, topic: &str, partition: u32| {
///     FileLog::open(dir, topic, partition, FileLogConfig::default())
///         .map(|log| Box::new(log) as Box<dyn Changelog>)
/// };
/// statestore_conformance::changelog::appends_keep_order(&factory);
/// ```
pub trait ChangelogFactory {
    /// Opens, creating if needed, `partition` of `topic`, keeping any local files in `dir`.
    ///
    /// # Errors
    /// Whatever the log reports; every case treats an error as a failure.
    fn open(&self, dir: &Path, topic: &str, partition: u32) -> Result<Box<dyn Changelog>>;
}

impl<F> ChangelogFactory for F
where
    F: Fn(&Path, &str, u32) -> Result<Box<dyn Changelog>>,
{
    fn open(&self, dir: &Path, topic: &str, partition: u32) -> Result<Box<dyn Changelog>> {
        self(dir, topic, partition)
    }
}

/// One changelog case: its name, its group, and its function.
#[derive(Debug, Clone, Copy)]
pub struct ChangelogCase {
    /// The function's name, which is also the name of the test `changelog_suite!` generates.
    pub name: &'static str,
    /// The group of contract clauses it checks, such as `"reads"`.
    pub concern: &'static str,
    /// True for the cases that drop the log and open it again through the factory.
    pub reopens: bool,
    /// Runs the case; it panics when the log fails it.
    pub run: fn(&dyn ChangelogFactory),
}

/// Calls back `$crate::$callback!` with `($args)` followed by every changelog case, grouped
/// by module. This is the one list of cases: a new case is one line here.
#[doc(hidden)]
#[macro_export]
macro_rules! __changelog_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! {
            ($($args)*)
            basic {
                fresh_log_is_empty
                appends_keep_order
                offsets_are_consecutive_and_ascending
                empty_append_writes_nothing
                tombstones_round_trip
                empty_key_and_value_round_trip
                binary_keys_and_values_round_trip
                end_offset_follows_appends
                start_offset_of_unretained_log_is_zero
                oversized_key_writes_nothing
                topic_and_partition_are_reported
                sync_keeps_records_readable
            }
            reads {
                read_from_every_offset
                read_past_end_is_empty
                read_respects_max_records
                read_of_zero_records_is_empty
                read_in_batches_sees_everything
                records_are_readable_before_sync
                large_value_round_trips
            }
            reopen {
                reopen_keeps_records
                reopen_continues_offsets
                reopen_of_empty_log
                reopen_many_times
                reopen_keeps_large_value
            }
            concurrency {
                concurrent_readers_while_appending
                concurrent_appenders_get_distinct_offsets
            }
            framing {
                commit_marker_closes_each_commit
                unframed_records_restore_one_by_one
                torn_commit_at_tail_is_not_restored
                abandoned_commits_are_never_applied
                commit_reader_releases_whole_commits
                largest_record_round_trips
                record_over_the_largest_writes_nothing
            }
        }
    };
}

/// Re-exports every listed case from its module and builds [`CHANGELOG_CASES`].
#[doc(hidden)]
#[macro_export]
macro_rules! __changelog_case_table {
    (() $($concern:ident { $($case:ident)* })*) => {
        $($(pub use $concern::$case;)*)*

        /// Every changelog case, in suite order.
        pub const CHANGELOG_CASES: &[ChangelogCase] = &[
            $($(ChangelogCase {
                name: stringify!($case),
                concern: stringify!($concern),
                reopens: matches!(stringify!($concern).as_bytes(), b"reopen"),
                run: $case,
            },)*)*
        ];
    };
}

crate::__changelog_cases!(__changelog_case_table!());

/// Expands to one `#[test]` per changelog case, each running
/// `statestore_conformance::changelog::<case>(&$factory)`; the factory expression is
/// evaluated once per test.
///
/// ```text
/// statestore_conformance::changelog_suite!(|dir: &Path, topic: &str, partition: u32| {
///     FileLog::open(dir, topic, partition, FileLogConfig::default())
///         .map(|log| Box::new(log) as Box<dyn Changelog>)
/// });
/// ```
#[macro_export]
macro_rules! changelog_suite {
    ($factory:expr $(,)?) => {
        $crate::__changelog_cases!(__changelog_suite_tests!($factory));
    };
}

/// Writes the `#[test]` functions of [`changelog_suite!`] from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __changelog_suite_tests {
    (($factory:expr) $($concern:ident { $($case:ident)* })*) => {
        $($(
            #[test]
            fn $case() {
                $crate::changelog::$case(&$factory);
            }
        )*)*
    };
}

#[cfg(test)]
mod tests {
    use super::CHANGELOG_CASES;

    #[test]
    fn case_names_are_unique_and_reopen_cases_marked() {
        let mut names: Vec<&str> = CHANGELOG_CASES.iter().map(|case| case.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CHANGELOG_CASES.len());
        for case in CHANGELOG_CASES {
            assert_eq!(
                case.reopens,
                case.name.starts_with("reopen"),
                "{}",
                case.name
            );
        }
    }
}
