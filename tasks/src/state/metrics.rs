//! The tasks' metrics, through the [`metrics`] facade, so any exporter (Prometheus, StatsD, ...)
//! shows them; each carries the labels `application` and `task` (`<subtopology>_<partition>`), and the
//! restore metrics also `store`. Nothing is recorded while no recorder is installed.

use metrics::{Counter, Gauge, Histogram};
use statestore_changelog::TaskId;

/// Input records processed by the task (a counter).
pub const RECORDS_TOTAL: &str = "statestore_task_records_total";
/// How long a commit of the task's stores took, in seconds (a histogram).
pub const COMMIT_SECONDS: &str = "statestore_task_commit_seconds";
/// Records of the task's input partitions not processed yet, from the last high watermark the
/// consumer saw, updated at every commit interval (a gauge).
pub const LAG_RECORDS: &str = "statestore_task_lag_records";
/// Changelog records replayed into a store when the task was opened (a counter).
pub const RESTORED_RECORDS_TOTAL: &str = "statestore_task_restored_records_total";
/// How long opening the task took, its restores and fences included, in seconds (a histogram).
pub const RESTORE_SECONDS: &str = "statestore_task_restore_seconds";

/// Input records an error handler skipped, dead letters included (a counter).
pub const SKIPPED_RECORDS_TOTAL: &str = "statestore_task_skipped_records_total";
/// Input records sent to the dead-letter topic (a counter).
pub const DEAD_LETTER_RECORDS_TOTAL: &str = "statestore_task_dead_letter_records_total";
/// Failures of the task's processor: errors and panics in `init`, `process` and `punctuate`,
/// whatever the handler answered (a counter).
pub const PROCESSOR_FAILURES_TOTAL: &str = "statestore_task_processor_failures_total";

/// Failures that took the task back to its last commit, rather than rolling back the failed
/// call alone: a `replace_thread` answer, or a call that could not be rolled back. Under
/// `exactly_once_v2` each also aborts the open transaction, which sends every task of the
/// instance back to its last commit (a counter).
pub const FAILURE_ABORTS_TOTAL: &str = "statestore_task_failure_aborts_total";

/// Records of a repartition topic dropped unprocessed under `at_least_once`: their upstream
/// header names a record at or before the last one the task applied from that upstream task,
/// so they were sent again by an upstream task replaying its input (a counter).
pub const REPARTITION_DUPLICATES_DROPPED_TOTAL: &str =
    "statestore_repartition_duplicates_dropped_total";

/// How long a call of one of the task's punctuators took, in seconds (a histogram).
pub const PUNCTUATE_SECONDS: &str = "statestore_task_punctuate_seconds";
/// Records of the global stores' topics applied by their restore, before the tasks started
/// (a counter labelled `application` only): past the checkpoint, so 0 for stores that were
/// up to date on disk.
pub const GLOBAL_RESTORED_RECORDS_TOTAL: &str = "statestore_global_restored_records_total";

/// The handles of one task, registered once when it opens.
pub(crate) struct TaskMetrics {
    pub records: Counter,
    pub commit_seconds: Histogram,
    pub lag: Gauge,
    pub punctuate_seconds: Histogram,
    pub skipped: Counter,
    pub dead_letters: Counter,
    pub failures: Counter,
    pub failure_aborts: Counter,
    pub duplicates_dropped: Counter,
    labels: [(&'static str, String); 2],
}

impl TaskMetrics {
    pub fn new(application: &str, task: TaskId) -> TaskMetrics {
        let labels = [
            ("application", application.to_owned()),
            ("task", task.to_string()),
        ];
        TaskMetrics {
            records: metrics::counter!(RECORDS_TOTAL, &labels),
            commit_seconds: metrics::histogram!(COMMIT_SECONDS, &labels),
            lag: metrics::gauge!(LAG_RECORDS, &labels),
            punctuate_seconds: metrics::histogram!(PUNCTUATE_SECONDS, &labels),
            skipped: metrics::counter!(SKIPPED_RECORDS_TOTAL, &labels),
            dead_letters: metrics::counter!(DEAD_LETTER_RECORDS_TOTAL, &labels),
            failures: metrics::counter!(PROCESSOR_FAILURES_TOTAL, &labels),
            failure_aborts: metrics::counter!(FAILURE_ABORTS_TOTAL, &labels),
            duplicates_dropped: metrics::counter!(REPARTITION_DUPLICATES_DROPPED_TOTAL, &labels),
            labels,
        }
    }

    /// Records what opening the task restored into `store`.
    pub fn restored(&self, store: &str, records: u64) {
        let mut labels = self.labels.to_vec();
        labels.push(("store", store.to_owned()));
        metrics::counter!(RESTORED_RECORDS_TOTAL, &labels).increment(records);
    }

    /// Records how long opening the task took.
    pub fn opened_in(&self, seconds: f64) {
        metrics::histogram!(RESTORE_SECONDS, &self.labels).record(seconds);
    }
}
