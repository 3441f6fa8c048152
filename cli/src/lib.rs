//! The `statestore` command as a library: compare the backends on your machine, inspect a state
//! directory, dump a store, and rebuild a store from its changelog.
//!
//! Every subcommand has `--help`. Bad arguments print a message and exit with status 2 (clap's
//! convention); a failure while running prints `error: ...` and exits with status 1. A reader
//! that stops reading (`statestore inspect DIR | head -1`) ends the output quietly.
//!
//! # Your backend in the command
//! Every subcommand resolves backend names through the process-wide
//! [`Registry::global`](statestore::Registry::global), which holds the built-in backends. A
//! crate that brings its own backend makes the whole command, with that backend in
//! `dump`, `restore`, `inspect` and `compare`, from a `main` of a few lines:
//!
//! ```no_run
//! # #[derive(Debug)] struct SqliteFactory;
//! # impl store_api::BackendFactory for SqliteFactory {
//! #     fn name(&self) -> &'static str { "sqlite" }
//! #     fn open(&self, d: &std::path::Path, o: &store_api::BackendOptions)
//! #         -> store_api::Result<Box<dyn store_api::KeyValueStore>> { statestore::open("memory", d, o) }
//! # }
//! // src/main.rs of a binary that depends on `statestore-cli` and the backend's crate.
//! fn main() -> std::process::ExitCode {
//!     // `statestore restore STATE_DIR --application app --store counts --backend sqlite`
//!     statestore_cli::main_with(&[&SqliteFactory])
//! }
//! ```
//!
//! The backends join the process-wide registry rather than a registry value handed down,
//! because the command line is checked against it while it is parsed (`--backend`,
//! `compare --backends`), before any subcommand could be given one.

/// `println!` that hands back the write's error (a reader that went away) instead of
/// panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod dump;
mod inspect;
mod restore;
mod state;

use std::error::Error;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use store_api::BackendFactory;
use tracing_subscriber::EnvFilter;

/// The result of a subcommand: any error, printed with its causes.
pub type CliResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

/// Local state stores for stream processors: compare engines, inspect and rebuild state.
#[derive(Debug, Parser)]
#[command(name = "statestore", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run workloads on backends and recommend one per workload, from measured numbers.
    Compare(statestore_benches::compare::CompareArgs),
    /// List the applications, tasks, stores, checkpoints and sizes of a state directory.
    Inspect(inspect::InspectArgs),
    /// Print the key/value pairs of one store of a state directory.
    Dump(dump::DumpArgs),
    /// Rebuild a store of a state directory from its changelog.
    Restore(restore::RestoreArgs),
}

/// The whole `statestore` command over the backends already in
/// [`Registry::global`](statestore::Registry::global): parses `std::env::args`, runs the
/// subcommand, prints any error with its causes and returns the exit status.
pub fn main() -> ExitCode {
    main_with(&[])
}

/// The whole `statestore` command with `backends` added to the built-ins: registers each in
/// [`Registry::global`](statestore::Registry::global), then runs as [`main`]. See the
/// [crate docs](crate) for a binary made of it.
///
/// A backend that cannot be registered (a name already taken, or one that is not a valid
/// name) prints `error: ...` and exits with status 1 before the command line is read.
pub fn main_with(backends: &[&'static dyn BackendFactory]) -> ExitCode {
    for backend in backends {
        if let Err(err) = statestore::register(*backend) {
            return statestore_benches::compare::report_outcome(Err(err.into()));
        }
    }
    // Logs on stderr at RUST_LOG's levels (default warn), librdkafka's reports among them.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // A binary that installed its own subscriber keeps it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Compare(args) => {
            statestore_benches::compare::run(&args, statestore::Registry::global())
        }
        Command::Inspect(args) => inspect::run(&args),
        Command::Dump(args) => dump::run(&args),
        Command::Restore(args) => restore::run(&args),
    };
    statestore_benches::compare::report_outcome(outcome)
}
