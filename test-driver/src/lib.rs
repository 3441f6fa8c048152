//! Tests of statestore processors and topologies in-process, without a broker: the Kafka
//! runtime's own tasks ([`Task`](statestore_tasks::driven::DrivenTask)s opened and restored as
//! the runtime opens them), stores, changelogs (on [`MemoryLog`](statestore_changelog::MemoryLog)s),
//! commits, punctuation and error handling, fed synchronously.
//!
//! - One task per sub-topology and partition; topics are declared with a partition count
//!   (1 unless told) and records go to their key's partition with the configured
//!   [`KeyPartitioner`](statestore_tasks::KeyPartitioner) (murmur2 by default), keyless ones
//!   round robin.
//! - A piped record is processed inside the call, and so is everything its processing sends
//!   to a topic the application consumes (a repartition topic), in order; then every task
//!   commits (as a commit interval of 0).
//! - What reaches a topic the application does not consume (outputs, dead letters) is read
//!   from a [`TestOutputTopic`].
//! - [`TestDriver::advance_wall_clock`] fires wall-clock punctuators; stream-time ones fire
//!   from the records' timestamps, as in production.
//! - [`TestDriver::close`], then a driver on the same [`changelogs`](TestDriver::changelogs)
//!   (and state directory, or an empty one) restores the stores.
//!
//! ```
//! use statestore_tasks::{ProcessorContext, StoreSpec, TasksConfig};
//! use statestore_test_driver::TestDriver;
//!
//! let config = TasksConfig {
//!     application_id: "doc".to_owned(),
//!     input_topics: vec!["words".to_owned()],
//!     stores: vec![StoreSpec::new("counts", "memory")],
//!     ..TasksConfig::default()
//! };
//! let driver = TestDriver::processor(config, |_| {
//!     |ctx: &mut ProcessorContext<'_>| {
//!         let word = ctx.key().unwrap_or_default().to_vec();
//!         let counts = ctx.store("counts")?;
//!         let count = counts.get(&word)?.map_or(0, |v| v[0]) + 1;
//!         counts.put(&word, &[count])?;
//!         ctx.send("counted", Some(&word), Some(&[count]));
//!         Ok(())
//!     }
//! })
//! .build()?;
//! driver.input("words").pipe_input(Some(b"a"), None, 0)?;
//! driver.input("words").pipe_input(Some(b"a"), None, 1)?;
//! assert_eq!(driver.store("counts")?.get(b"a")?, Some(vec![2]));
//! let output = driver.output("counted");
//! assert_eq!(output.read_key_value(), Some((Some(b"a".to_vec()), Some(vec![1]))));
//! assert_eq!(output.read_key_value(), Some((Some(b"a".to_vec()), Some(vec![2]))));
//! assert!(output.is_empty());
//! # Ok::<(), store_api::Error>(())
//! ```
//!
//! Not yet: global stores, writes to stores from the test, exactly-once transactions (the
//! tasks commit as under `at_least_once`; state is exactly once either way), a crash in the
//! middle of a commit.

mod driver;
mod stores;
mod topics;

pub use driver::{TestDriver, TestDriverBuilder};
pub use statestore_tasks::{MemoryChangelogs, MemoryRecord};
pub use stores::DriverStore;
pub use topics::{KeyValue, TestInputTopic, TestOutputTopic, TestRecord};
