//! Backend and changelog options deserialized from fuzz JSON, as a deployment's configuration
//! table reaches them. The RocksDB options are left out: their crate builds RocksDB, which the
//! fuzz build avoids (10+ minutes of C++ under sanitizer flags); so is the Kafka config, which
//! needs librdkafka.
#![no_main]

use std::path::Path;

use store_api::parse_options;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    statestore_changelog::fuzzing::changelog_config(data);
    let Ok(options) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(config) = parse_options::<statestore_memory::Config>("memory", &options) {
        let _store = statestore_memory::MemoryStore::new(config);
    }
    if let Ok(config) = parse_options::<statestore_sled::Config>("sled", &options) {
        let _native = config.to_sled(Path::new("unused"));
    }
    if let Ok(config) = parse_options::<statestore_redb::Config>("redb", &options) {
        let _native = config.builder();
        let _durability = config.durability.to_redb();
    }
});
