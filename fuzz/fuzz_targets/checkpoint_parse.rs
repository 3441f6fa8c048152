//! A checkpoint file parsed from fuzz bytes; see `statestore_changelog::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| statestore_changelog::fuzzing::checkpoint_parse(data));
