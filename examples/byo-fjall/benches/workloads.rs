//! The project's criterion workloads on fjall, side by side with the four built-ins:
//! `cargo bench -p byo-fjall --bench workloads -- --quick`, then
//! `cargo run -p statestore-benches --bin bench-ratios` for each backend against the best.

statestore_benches::criterion_workloads!(
    register: [&byo_fjall::FjallFactory],
    with: ["memory", "rocksdb", "sled", "redb"],
);
