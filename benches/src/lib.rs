//! The statestore workloads, defined once and shared by the criterion benches (`benches/`),
//! the [`compare`] library behind `statestore compare`, and the [`harness`] that runs them in
//! any backend crate's own `benches/`.
//!
//! # Any backend
//! Backends are named, and names resolve through [`statestore::Registry::global`]: the
//! built-ins are there from the start, and a backend crate registers its own factory once
//! (`statestore::register(&MyFactory)`). Then [`Fixture::open`], [`compare::run`] and the
//! [`harness`] run it like a built-in, side by side with the built-ins it names.
//!
//! # The workloads
//! Keys are 24 bytes, values 150 bytes (1000 for YCSB), unless the [`Scale`] sets other sizes,
//! all drawn from a fixed seed ([`data::SEED`]), so every run issues the same operations. See
//! [`Workload`] for the list: `load_seq` and `load_random` (every record of the [`Scale`] in
//! batches of 1000), `put_random`, `put_durable`, `get_hit`, `get_miss`, `range_10`,
//! `range_100`, and YCSB A, B, C, E and F, zipfian with constant 0.99. At [`Scale::FULL`] that
//! is 1M records, 500k for YCSB. Beside them: a [`restore`] from a changelog, and the
//! [`window`] store's fetch and expiry.
//!
//! # One adapter
//! A [`Driver`] issues a workload's operations against any [`Target`]: [`ApiTarget`] runs them
//! through `&dyn KeyValueStore`, the [`native`] adapters through each engine's own API, so the
//! same code measures every backend and the abstraction's overhead.
//!
//! # What is measured, and what is not
//! Measured: the time of each operation as the caller sees it, single-threaded, including
//! choosing its key (a seeded draw, tens of nanoseconds) and, through the store API, copying
//! keys and values into and out of the API's owned types.
//! Not measured: the preload that read and YCSB workloads start from (it is loaded and flushed
//! before timing starts), opening and closing the store, background work an engine defers past
//! the measured window (compactions still running when a run ends). One thread issues every
//! operation, except in `compare --threads N`, where N threads share one store, each with its
//! own [`Driver::shard`].
//!
//! ```
//! use statestore_benches::{ApiTarget, Driver, Scale, Workload, prepare};
//! # fn main() -> store_api::Result<()> {
//! let fixture = statestore_benches::Fixture::open("memory")?;
//! let scale = Scale::with_records(1000);
//! prepare(&fixture.target(), Workload::GetHit, scale, |_| {})?;
//! let mut driver = Driver::new(Workload::GetHit, scale);
//! assert_eq!(driver.step(&fixture.target())?, Some(1));
//! # Ok(())
//! # }
//! ```

pub mod compare;
pub mod data;
mod driver;
mod fixture;
pub mod harness;
pub mod native;
pub mod restore;
mod target;
pub mod window;
mod workload;

pub use driver::{Driver, preload, prepare};
pub use fixture::{Fixture, dir_size, open_store};
pub use target::{ApiTarget, Target, read_bytes};
pub use workload::{FULL_RECORDS, FULL_YCSB_RECORDS, LOAD_BATCH, Scale, UnknownWorkload, Workload};

/// The backends registered in [`statestore::Registry::global`], in the order reports list
/// them: the built-ins of this build, then those registered since.
pub fn backends() -> Vec<&'static str> {
    statestore::backend_names()
}

/// Criterion, re-exported so that [`criterion_workloads!`] works in a crate that does not
/// depend on it directly.
pub use criterion;
