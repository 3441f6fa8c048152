//! A file log opened (recovered), read, appended to and reopened over segment files made of
//! fuzz bytes; see `statestore_changelog::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary directory");
    statestore_changelog::fuzzing::file_log_open(dir.path(), data);
});
