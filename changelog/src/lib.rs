//! Durability for statestore: every update also goes to a changelog, and a store is rebuilt
//! from it anywhere.
//!
//! A [`Changelog`] is an append-only log of one (topic, partition): records of
//! `(offset, key, value or tombstone)`. Implementations: the embedded segment-file log (the
//! default, one machine), Kafka through rdkafka (many machines), and memory (tests).

mod record;

pub use record::{Changelog, ChangelogRecord};
