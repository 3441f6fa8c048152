//! The conformance suite every statestore backend runs: one documented case per clause of the
//! [`KeyValueStore`](store_api::KeyValueStore) contract, and a macro that turns them into
//! named `#[test]`s for a backend with one line.
//!
//! # What it checks
//! - round trips of `get`, `put`, overwrite and `delete`; missing keys; the empty key and the
//!   empty value; keys and values holding 0x00 and 0xFF;
//! - unsigned lexicographic key order, in forward and reverse scans;
//! - `range` and `reverse_range` under every combination of `Bound`s, including `from > to`,
//!   equal bounds and bounds that are not keys;
//! - prefix scans: the empty prefix, all-0xFF prefixes, prefixes longer than every key;
//! - batches: atomic for concurrent readers, later operations on a key win, a batch with an
//!   oversized key writes nothing;
//! - `put_if_absent`, alone and raced by threads;
//! - 8 and 16 MiB values, keys of `MAX_KEY_LEN`, 100k keys, `approximate_len`;
//! - persistence across close and reopen, and `Locked` on a second open of a directory;
//! - a real crash: a child process aborts after a flush, and the reopened store has every
//!   flushed write and each later batch whole or not at all ([`crash`]);
//! - random kills: a child writing batches and flushing in a loop is SIGKILLed at random
//!   moments, many times over one directory, and after each reopen every flushed batch is
//!   there and every other batch whole or absent ([`crash::kills`]);
//! - a flush that cannot be durable fails: `put` then `flush` after the store's directory
//!   was removed do not both return `Ok`;
//! - readers and a writer on many threads, against the declared iterator consistency;
//! - `Closed` after `close`, `InvalidArgument` for oversized keys, never a panic;
//! - `delete_range` under every combination of bounds, of nothing, over thousands of keys,
//!   across a reopen;
//! - restore from a changelog (overwrites, deletes, the empty key, a fenced writer's records,
//!   the writer epoch key, a torn tail) into the store gives the state of a replay into a
//!   plain map, through the store's bulk loader when it offers one; and the bulk loader's own
//!   contract (later writes win across and within loads);
//! - a proptest state machine of random operations (range deletions and reopens included)
//!   against a `BTreeMap`.
//!
//! The full list is [`STORE_CASES`]; each case is a public function in [`store`].
//!
//! [`faults`] wraps any store and any changelog to fail chosen or random operations with I/O
//! errors, for testing what is built on them.
//!
//! # Capabilities
//! Cases check the [`Capabilities`](store_api::Capabilities) the store declares, and skip only
//! what it declares absent. Without `persistent`, the twelve persistence cases (reopen,
//! `close` flushes, `Locked` on double open, crash, random kills, removed directory) print a
//! line such as `statestore-conformance: SKIP reopen_keeps_flushed_writes: backend "memory"
//! declares no persistent` straight to stdout, which `cargo test` shows even while it
//! captures output, and pass; the model test then treats reopen as a no-op. `snapshot_iterators` is never
//! skipped: it selects the checks of the iterator-consistency cases (a snapshot shows no
//! write made after its creation; a weak iterator shows every earlier write, keys strictly
//! ordered, each once, with values that were written).
//!
//! # Running it on a backend
//! `tests/conformance.rs` of a backend crate that has `statestore-conformance` as a
//! dev-dependency holds one line, with any [`StoreFactory`]:
//!
//! ```text
//! statestore_conformance::store_suite!(statestore_conformance::backend(statestore_rocksdb::RocksDbFactory, serde_json::Value::Null));
//! ```
//!
//! The same backend, once registered by name (`statestore::register(&MyFactory)`), runs the
//! project's criterion workloads beside the built-ins with one line in its `benches/`, and
//! `compare` with a three-line binary (see `statestore_benches::harness` and
//! `statestore_benches::compare`; `examples/byo-fjall` does all three):
//!
//! ```text
//! statestore_benches::criterion_workloads!(register: [&my_backend::MyFactory], with: ["rocksdb", "redb"]);
//! ```
//!
//! # Bring your own backend
//! A complete third-party backend: a `Mutex<BTreeMap>` store that passes the whole suite.
//! This is the crate's `tests/byo_backend.rs`; in a real crate the store lives in `src/` and
//! the test file keeps the last line only.
//!
//! ```rust
#![doc = include_str!("../tests/byo_backend.rs")]
//! // Without the macro, every case also runs by hand; this doc test does so.
//! fn main() {
//!     for case in statestore_conformance::STORE_CASES {
//!         (case.run)(&open_map_store);
//!     }
//! }
//! ```

pub mod changelog;
pub mod crash;
mod factory;
pub mod faults;
mod fixture;
pub mod store;
pub mod warnings;

pub use factory::{StoreFactory, backend};
pub use fixture::StoreFixture;
pub use store::{STORE_CASES, StoreCase};

/// Expands to one `#[test]` per store case, each running
/// `statestore_conformance::store::<case>(&$factory)` on a fresh store from the factory
/// expression, which is evaluated once per test; and to the ignored test
/// `statestore_conformance_crash_child` ([`crash::CHILD_TEST`]), which the crash case runs in a
/// child process to open a store with the same factory and abort.
///
/// ```text
/// statestore_conformance::store_suite!(statestore_conformance::backend(MyFactory, serde_json::Value::Null));
/// ```
#[macro_export]
macro_rules! store_suite {
    ($factory:expr $(,)?) => {
        $crate::__store_cases!(__store_suite_tests!($factory));
    };
}

/// Writes the `#[test]` functions of [`store_suite!`] from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_suite_tests {
    (($factory:expr) $($concern:ident { $($case:ident)* })*) => {
        $($(
            #[test]
            fn $case() {
                $crate::store::$case(&$factory);
            }
        )*)*

        #[test]
        #[ignore = "run in a child process by crash_keeps_flushed_writes_and_whole_batches"]
        fn statestore_conformance_crash_child() {
            $crate::crash::child(|dir, _scenario| $crate::StoreFactory::open(&$factory, dir));
        }
    };
}
