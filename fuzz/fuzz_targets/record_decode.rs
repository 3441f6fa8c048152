//! One changelog record decoded from fuzz bytes; see `statestore_changelog::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| statestore_changelog::fuzzing::record_decode(data));
