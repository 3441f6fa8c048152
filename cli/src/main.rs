//! `statestore`: the command with the built-in backends. A crate with a backend of its own
//! makes the same command with it in from a `main` like this one; see the library's docs.

fn main() -> std::process::ExitCode {
    statestore_cli::main()
}
