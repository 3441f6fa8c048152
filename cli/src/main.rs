//! `statestore`: compare the backends on your machine, inspect a state directory, dump a store,
//! and rebuild a store from its changelog.
//!
//! Every subcommand has `--help`. Bad arguments print a message and exit with status 2 (clap's
//! convention); a failure while running prints `error: ...` and exits with status 1. A reader
//! that stops reading (`statestore inspect DIR | head -1`) ends the output quietly.

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
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

fn main() -> ExitCode {
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
