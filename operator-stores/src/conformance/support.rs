//! Helpers every module of cases uses: failing a proptest case with a message, comparing an
//! answer, and running a model test.

use std::fmt::Debug;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{Mode, proptest_cases};

/// A failed case, described by `what`.
pub(crate) fn fail(what: impl Debug) -> TestCaseError {
    TestCaseError::fail(format!("{what:?}"))
}

/// Fails the case unless the store's answer `got` is the model's `want`.
pub(crate) fn check<T: PartialEq + Debug>(
    what: &str,
    got: T,
    want: T,
) -> Result<(), TestCaseError> {
    if got == want {
        Ok(())
    } else {
        Err(fail(format!("{what}: got {got:?}, want {want:?}")))
    }
}

/// Every item of a scan, or the first error of opening or reading it as a failed case.
pub(crate) fn collect<T, I>(iter: store_api::Result<I>) -> Result<Vec<T>, TestCaseError>
where
    I: Iterator<Item = store_api::Result<T>>,
{
    iter.map_err(fail)?.map(|item| item.map_err(fail)).collect()
}

/// Runs `case` on [`proptest_cases`] values of `strategy` (shrinking a failure, persisting
/// none), panicking with the smallest failing value.
pub(crate) fn run_model<S: Strategy>(
    store_type: &str,
    mode: Mode,
    strategy: S,
    case: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let config = Config {
        cases: proptest_cases(),
        failure_persistence: None,
        ..Config::default()
    };
    if let Err(err) = TestRunner::new(config).run(&strategy, case) {
        panic!("{store_type} diverged from the model ({mode:?}): {err}");
    }
}
