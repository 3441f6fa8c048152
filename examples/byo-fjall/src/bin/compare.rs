//! `fjall-compare`: `statestore compare` with fjall registered beside the built-ins. Every
//! option of `statestore compare` works; for example
//! `cargo run --release -p byo-fjall --bin fjall-compare -- --backends fjall,rocksdb,redb --require durable`.

fn main() -> std::process::ExitCode {
    if let Err(err) = byo_fjall::register() {
        eprintln!("error: {err}");
        return std::process::ExitCode::FAILURE;
    }
    statestore_benches::compare::main()
}
