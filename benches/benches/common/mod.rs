//! Settings and helpers shared by the bench targets (each includes this file as a module):
//! those of [`statestore_benches::harness`], which backend crates use too.

#![allow(unused_imports, reason = "each bench target uses a different subset")]

pub use statestore_benches::harness::{QUICK_RECORDS, config, quick, scale, time_load, time_steps};
