//! Stores for stateful stream operators, layered over any
//! [`KeyValueStore`](store_api::KeyValueStore): every backend that passes the conformance
//! suite gets all of them, and a `LoggedStore` underneath makes them durable without knowing
//! their shape.

mod layout;
pub use layout::APP_KEY_TAG;
pub mod session;
pub mod versioned;
pub mod window;
