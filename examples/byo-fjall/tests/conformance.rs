//! The whole statestore conformance suite, run on fjall with its default options.

statestore_conformance::store_suite!(statestore_conformance::backend(
    byo_fjall::FjallFactory,
    serde_json::Value::Null
));
