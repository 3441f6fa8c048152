//! Every operator-store suite (typed, LRU, window, session, versioned; plain and logged) on
//! fjall.

statestore_operator_stores::operator_suite!(statestore_conformance::backend(
    byo_fjall::FjallFactory,
    serde_json::Value::Null
));
