//! The whole statestore conformance suite, run on RocksDB with its default options.

statestore_conformance::store_suite!(statestore_conformance::backend(
    statestore_rocksdb::RocksDbFactory,
    serde_json::Value::Null
));
