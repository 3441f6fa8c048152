//! The whole statestore conformance suite, run on redb with its default options.

statestore_conformance::store_suite!(statestore_conformance::backend(
    statestore_redb::RedbFactory,
    serde_json::Value::Null
));

#[test]
fn inverted_range_warns_once() {
    statestore_conformance::warnings::inverted_range_warns_once(&statestore_conformance::backend(
        statestore_redb::RedbFactory,
        serde_json::Value::Null,
    ));
}
