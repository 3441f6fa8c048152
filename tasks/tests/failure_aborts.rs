//! Failing records while transactions abort, in a process of its own: fail point
//! `transaction-before-commit` (feature `failpoints`) aborts the first transactions that
//! prepare a task, which sends every task back to its last commit. A task opened again
//! remembers the records its predecessor skipped: the handler is asked once per failing record
//! and no failing record is processed twice (see `support::failing`).
//!
//! `cargo test -p statestore-tasks --features failpoints --test failure_aborts`

mod support;

use statestore_tasks::ProcessingGuarantee;
use support::failing::failing_records_cost_only_themselves;

/// Three aborted transactions under `exactly_once_v2` on two threads.
#[test]
fn a_task_back_at_its_last_commit_does_not_ask_again_about_records_it_skipped() {
    let aborts = 3;
    fail::cfg("transaction-before-commit", &format!("{aborts}*return")).expect("fail point");
    failing_records_cost_only_themselves(ProcessingGuarantee::ExactlyOnceV2, 2, aborts);
    fail::remove("transaction-before-commit");
}
