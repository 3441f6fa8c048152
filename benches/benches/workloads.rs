//! Every workload on every built-in backend, through the store API: one `benchmark_group` per
//! workload, one `BenchmarkId` per backend. The groups are those of
//! [`statestore_benches::harness`], which a backend crate's own `benches/` runs with the same
//! one line, its factory registered beside the built-ins.
//!
//! Measured: each operation as a caller of `&dyn KeyValueStore` sees it, single-threaded
//! (see the `statestore_benches` crate docs). `load_seq`/`load_random` time a whole load of
//! every record into a fresh store (opening the store is not timed); the other workloads time
//! single operations on a store preloaded, untimed, with every record (YCSB: 1000-byte values).
//! Throughput counts records: one per operation, the scan length for `range_10`/`range_100`.
//!
//! Not measured: opening, preloading and closing stores; compactions an engine runs after a
//! sample ends; concurrent clients. `put_random` and `put_durable` write into a store that
//! grows across samples, as a long-running application's does.
//!
//! Scale: 1M records (500k YCSB), 20k under `--quick`, or `STATESTORE_BENCH_RECORDS`;
//! backends: the four built-ins, or `STATESTORE_BENCH_BACKENDS`.

statestore_benches::criterion_workloads!(with: ["memory", "rocksdb", "sled", "redb"]);
