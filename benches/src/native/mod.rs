//! The engines driven through their own APIs, for the abstraction-overhead benches.
//!
//! Each adapter opens its engine with the same settings as the statestore backend's default
//! `Config` (copied here, because the backends keep their option builders private) and issues
//! each [`Target`](crate::Target) operation the way a user of that engine alone would: the
//! cheapest call, values read in place where the engine lends them. The gap between an
//! adapter and [`ApiTarget`](crate::ApiTarget) on the same engine is therefore the cost of
//! statestore's abstraction: bounds and limit checks, the closed-store lock, owned iterators
//! and values copied into `Vec`s.

mod btree;
mod redb;
mod rocksdb;
mod sled;

pub use self::btree::BTreeTarget;
pub use self::redb::RedbTarget;
pub use self::rocksdb::RocksDbTarget;
pub use self::sled::SledTarget;
