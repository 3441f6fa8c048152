//! Conformance suites for the operator stores, run on any backend, plain and logged.
//!
//! Each store type has a module of cases: public functions taking the backend's
//! [`StoreFactory`] and a [`Mode`], panicking when the store type breaks its contract. Every
//! module has a proptest state machine against a simple model, and a few named cases.
//! `kafka_window`, `kafka_session` and `kafka_versioned` are Kafka Streams' own store tests,
//! ported case by case and named after them, so every backend answers as Kafka Streams'
//! stores do.
//! [`operator_suite!`](crate::operator_suite) turns every case of every module into a
//! `#[test]`, once per mode:
//!
//! ```text
//! mod rocksdb {
//!     statestore_operator_stores::operator_suite!(statestore_conformance::backend(
//!         statestore_rocksdb::RocksDbFactory,
//!         serde_json::Value::Null
//!     ));
//! }
//! ```
//!
//! expands to tests such as `rocksdb::typed::plain::model` and `rocksdb::typed::logged::model`.
//!
//! # Modes
//! - [`Mode::Plain`]: the operator store over the backend's store itself. "Reopen" closes and
//!   reopens the directory for a persistent backend, and does nothing for an in-memory one.
//! - [`Mode::Logged`]: the operator store over a `LoggedStore` (a `MemoryLog`, commits every
//!   few KiB so both the write buffer and the store hold data). "Reopen" closes it and restores
//!   a new, empty store of the backend from the changelog alone: the answers must not change.
//!
//! The proptest case count is `PROPTEST_CASES` when set, else 16 per test, which keeps the
//! four backends in debug builds to seconds.

pub mod kafka_session;
pub mod kafka_versioned;
pub mod kafka_window;
pub mod lru;
pub mod schema;
pub mod session;
pub mod ttl;
pub mod typed;
pub mod versioned;
pub mod window;

mod fixture;
mod support;

pub use fixture::{Mode, OperatorFixture};

/// The number of random sequences a model test runs: `PROPTEST_CASES`, else 16.
pub fn proptest_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(16)
}

/// Expands, inside the module where it is invoked, to one module per store type, each with
/// `plain` and `logged` modules holding one `#[test]` per case, on stores opened by the
/// factory expression (a [`StoreFactory`], evaluated once per test).
///
/// Invoke it once per backend, each in its own module.
#[macro_export]
macro_rules! operator_suite {
    ($factory:expr $(,)?) => {
        $crate::__operator_cases!(__operator_suite_tests!($factory));
    };
}

/// Calls back `$crate::$callback!` with `($args)` followed by every case of every store type,
/// grouped by module of [`conformance`](crate::conformance). This is the one list of cases.
#[doc(hidden)]
#[macro_export]
macro_rules! __operator_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! {
            ($($args)*)
            typed {
                model
                logical_key_order
                prefix_scan_by_leading_elements
                old_values
                timestamped_put_if_newer
                undecodable_bytes_are_errors
            }
            schema {
                old_versions_read_migrated
                schema_and_ttl_envelopes_nest
            }
            ttl {
                expired_entries_are_never_returned
                expiry_is_a_tombstone_in_the_advancing_commit
                restore_equals_live
                overwrite_moves_expiry
                wall_clock_expires_while_idle
                bad_ttls_are_rejected
                typed_views_expire
            }
            lru {
                model
                evicts_least_recently_used
                get_counts_as_use
                evictions_are_logged_deletes
                capacity_holds_under_batches
            }
            window {
                model
                expiry_drops_whole_segments
                expiry_logs_a_tombstone_per_key
                fetch_follows_time_and_key_order
                late_records_are_counted
                retained_duplicates_survive_reopen
                aggregate_refuses_what_kafka_refuses
                retention_counts_from_window_starts
                aggregate_writes_kafka_windows
            }
            session {
                model
                merging_bridges_sessions
                late_records_are_counted
                bad_sessions_are_rejected
                expiry_drops_whole_segments
                merge_refuses_a_retention_shorter_than_gap_and_grace
            }
            versioned {
                model
                out_of_order_puts_split_validity
                history_older_than_retention_is_cleaned
                history_past_the_cutoff_is_never_answered
            }
            kafka_window {
                test_range_and_single_point_fetch
                should_get_all
                should_get_all_non_deleted_records
                should_get_all_return_timestamp_ordered_records
                should_early_closed_iterator_still_get_all_records
                should_get_backward_all
                should_fetch_all_in_time_range
                should_backward_fetch_all_in_time_range
                test_fetch_range
                test_backward_fetch_range
                test_put_and_fetch_before
                test_put_and_fetch_after
                test_put_same_key_timestamp
                should_fetch_and_iterate_over_exact_keys
                test_delete_and_update
                should_return_null_on_window_not_found
                should_fetch_and_iterate_over_exact_binary_keys
                should_return_same_results_for_single_key_fetch_and_equal_key_range_fetch
                should_not_throw_invalid_range_exception_with_negative_from_key
                should_log_and_measure_expired_records
                should_not_throw_exception_when_fetch_range_is_expired
                test_fetch_duplicates
            }
            kafka_session {
                should_put_and_find_sessions_in_range
                should_put_and_backward_find_sessions_in_range
                should_fetch_all_sessions_with_same_record_key
                should_backward_fetch_all_sessions_with_same_record_key
                should_find_sessions_for_time_range
                should_fetch_all_sessions_within_key_range
                should_backward_fetch_all_sessions_within_key_range
                should_fetch_exact_session
                should_return_null_on_session_not_found
                should_find_values_within_merging_session_window_range
                should_backward_find_values_within_merging_session_window_range
                should_remove
                should_find_sessions_to_merge
                should_backward_find_sessions_to_merge
                should_fetch_exact_keys
                should_backward_fetch_exact_keys
                should_fetch_and_iterate_over_exact_binary_keys
                should_backward_fetch_and_iterate_over_exact_binary_keys
                should_restore
                should_return_same_results_for_single_key_find_sessions_and_equal_key_range_find_sessions
                should_measure_expired_records
                should_not_throw_exception_removing_nonexistent_key
                should_not_throw_invalid_range_exception_with_negative_from_key
                should_remove_expired
                should_not_fetch_expired_sessions
            }
            kafka_versioned {
                should_put_latest
                should_put_null_as_latest
                should_put_older_with_non_null_latest
                should_put_older_with_null_latest
                should_put_older_null_with_non_null_latest
                should_put_older_null_with_null_latest
                should_put_repeat_timestamp_as_latest
                should_put_repeat_timestamps
                should_put_into_multiple_segments
                should_move_record_to_older_segment_during_put
                should_move_record_to_older_segment_with_nulls_during_put
                should_fall_through_to_existing_older_segment_as_latest_during_put
                should_put_non_latest_tombstone_into_new_segment_with_valid_to
                should_delete
                should_not_put_expired
                should_not_delete_expired
                should_get_from_older_segments
                should_not_get_expired
                should_get_expired_if_latest_value
                should_distinguish_empty_and_null
                should_get_record_versions_from_older_segments
                should_get_record_versions_in_ascending_order
                should_get_record_versions_from_multiple_old_segments_in_ascending_order
                should_not_get_expired_record_versions
                should_get_expired_if_latest_version_value
                should_restore
                should_restore_with_nulls
                should_restore_with_nulls_and_repeat_timestamps
                should_restore_multiple_batches
                should_not_restore_expired
                should_restore_even_if_record_would_be_expired_by_end_of_batch
                should_allow_zero_history_retention
            }
        }
    };
}

/// Writes the test modules of [`operator_suite!`] from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __operator_suite_tests {
    (($factory:expr) $($module:ident { $($case:ident)* })*) => {
        $(
            mod $module {
                #[allow(unused_imports)]
                use super::*;

                mod plain {
                    #[allow(unused_imports)]
                    use super::*;
                    $(
                        #[test]
                        fn $case() {
                            $crate::conformance::$module::$case(
                                &$factory,
                                $crate::conformance::Mode::Plain,
                            );
                        }
                    )*
                }

                mod logged {
                    #[allow(unused_imports)]
                    use super::*;
                    $(
                        #[test]
                        fn $case() {
                            $crate::conformance::$module::$case(
                                &$factory,
                                $crate::conformance::Mode::Logged,
                            );
                        }
                    )*
                }
            }
        )*
    };
}

#[doc(no_inline)]
pub use statestore_conformance::StoreFactory;
