//! The store cases: one public function per clause of the [`KeyValueStore`] contract, each
//! taking the [`StoreFactory`] under test and panicking when the store breaks the clause.
//!
//! [`store_suite!`](crate::store_suite) turns them all into `#[test]`s; [`STORE_CASES`] lists
//! them for running by hand. Cases for optional behaviour check the store's declared
//! [`Capabilities`](store_api::Capabilities): without `persistent` the persistence cases print
//! a `statestore-conformance: SKIP` line and pass; `snapshot_iterators` selects which
//! iterator-consistency checks apply, and those cases always run.
//!
//! [`KeyValueStore`]: store_api::KeyValueStore

mod basic;
mod batch;
mod borrowed;
mod concurrency;
mod conditional;
mod delete_range;
mod errors;
mod large;
mod model;
mod order;
mod persistence;
mod prefix;
mod ranges;
mod readers;
mod restore;
mod support;

use crate::StoreFactory;

/// One store case: its name, the concern (module) it belongs to, and its function.
#[derive(Debug, Clone, Copy)]
pub struct StoreCase {
    /// The function's name, which is also the name of the test `store_suite!` generates.
    pub name: &'static str,
    /// The group of contract clauses it checks, such as `"ranges"`.
    pub concern: &'static str,
    /// Runs the case; it panics when the store fails it.
    pub run: fn(&dyn StoreFactory),
}

/// Calls back `$crate::$callback!` with `($args)` followed by every store case, grouped by
/// module. This is the one list of cases: a new case is one line here (and the compiler
/// reports a public case function missing from it as dead code).
#[doc(hidden)]
#[macro_export]
macro_rules! __store_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! {
            ($($args)*)
            basic {
                get_missing_is_none
                put_then_get
                put_overwrites
                delete_removes
                delete_missing_succeeds
                put_after_delete
                empty_key_is_ordinary
                empty_value_is_present
                binary_keys_round_trip
                binary_values_round_trip
                trailing_zero_bytes_are_significant
                flush_succeeds
                name_and_capabilities_are_stable
            }
            order {
                scan_order_is_unsigned_bytewise
                prefix_sorts_first
                empty_key_sorts_first
                reverse_scan_descends
                scans_show_latest_values
            }
            ranges {
                range_from_included
                range_from_excluded
                range_from_unbounded
                reverse_range_from_included
                reverse_range_from_excluded
                reverse_range_from_unbounded
                range_from_after_to_is_empty
                range_with_equal_bounds
                range_bounds_between_keys
                range_bounds_outside_keys
                range_on_empty_store
                range_with_empty_key_bounds
                range_with_ff_bounds
            }
            prefix {
                prefix_scan_selects_prefixed_keys
                prefix_scan_empty_prefix_selects_all
                prefix_scan_ff_prefix
                prefix_scan_double_ff_prefix
                prefix_scan_trailing_ff_prefix
                prefix_scan_longer_than_every_key
                prefix_scan_includes_the_prefix_itself
                prefix_scan_stops_at_boundaries
                prefix_scan_zero_byte_prefix
                prefix_scan_without_match_is_empty
                prefix_scan_reflects_writes
            }
            batch {
                batch_applies_every_operation
                batch_put_then_delete
                batch_delete_then_put
                batch_put_twice_last_wins
                empty_batch_writes_nothing
                batch_delete_of_missing_keys
                batch_with_oversized_key_writes_nothing
                batch_is_atomic_for_concurrent_readers
            }
            conditional {
                put_if_absent_writes_when_absent
                put_if_absent_keeps_existing
                put_if_absent_respects_empty_value
                put_if_absent_after_delete
                put_if_absent_empty_key
                put_if_absent_race_has_one_winner
            }
            large {
                value_of_8_mib
                value_of_16_mib
                large_values_in_batches
                key_of_max_len_is_accepted
                hundred_thousand_keys_full_scan
                hundred_thousand_keys_bounded_scans
                approximate_len_of_new_store_is_zero
                approximate_len_tracks_inserts
            }
            persistence {
                reopen_keeps_flushed_writes
                reopen_keeps_deletes
                reopen_keeps_batches
                reopen_keeps_empty_key_and_value
                close_flushes
                reopen_many_times
                reopen_keeps_large_value
                double_open_is_locked
                close_releases_the_directory
                crash_keeps_flushed_writes_and_whole_batches
                random_kills_keep_flushed_batches_whole
                flush_fails_when_the_directory_is_gone
            }
            concurrency {
                writes_are_visible_across_threads
                concurrent_writers_lose_nothing
                iterators_are_owned_and_send
                iterator_consistency_forward
                iterator_consistency_reverse
            }
            readers {
                readers_and_writer_threads
            }
            errors {
                closed_store_rejects_reads
                closed_store_rejects_writes
                closed_store_rejects_scans
                closed_store_rejects_flush
                close_twice_succeeds
                iterator_after_close_ends_cleanly
                oversized_key_rejected_by_writes
                oversized_key_rejected_by_reads
                store_usable_after_errors
            }
            model {
                random_operations_match_model
            }
            delete_range {
                delete_range_removes_exactly_the_range
                delete_range_of_nothing_succeeds
                delete_range_then_writes_in_range
                delete_range_survives_reopen
            }
            restore {
                restore_from_empty_matches_replay
                restore_over_stale_content_matches_replay
                bulk_loader_applies_writes_in_order
            }
            borrowed {
                get_with_lends_what_get_returns
                scan_matches_range_under_every_bound
                scan_of_nothing_visits_nothing
                scan_stops_when_the_visitor_breaks
                scan_lends_empty_bytes_and_latest_values
                scan_lends_values_of_every_size
                closed_store_rejects_borrowed_reads
                get_with_rejects_oversized_keys
                scan_visitor_may_call_the_store
                write_ops_applies_like_write
                write_ops_non_atomic_applies_like_write_ops
            }
        }
    };
}

/// Re-exports every listed case from its module and builds [`STORE_CASES`].
#[doc(hidden)]
#[macro_export]
macro_rules! __store_case_table {
    (() $($concern:ident { $($case:ident)* })*) => {
        $($(pub use $concern::$case;)*)*

        /// Every store case, in suite order.
        pub const STORE_CASES: &[StoreCase] = &[
            $($(StoreCase { name: stringify!($case), concern: stringify!($concern), run: $case },)*)*
        ];
    };
}

crate::__store_cases!(__store_case_table!());

#[cfg(test)]
mod tests {
    use super::STORE_CASES;

    #[test]
    fn at_least_sixty_cases() {
        assert!(
            STORE_CASES.len() >= 60,
            "only {} store cases",
            STORE_CASES.len()
        );
    }

    #[test]
    fn case_names_are_unique() {
        let mut names: Vec<&str> = STORE_CASES.iter().map(|case| case.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), STORE_CASES.len());
    }
}
