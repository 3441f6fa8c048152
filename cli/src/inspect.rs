//! `statestore inspect STATE_DIR`.

use std::path::PathBuf;

use clap::Args;
use statestore_benches::dir_size;

use crate::CliResult;
use crate::state::{self, App};
use statestore_benches::compare::bytes;

/// Arguments of `statestore inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The state directory: the parent of the application directories.
    state_dir: PathBuf,
}

/// Prints the state directory's applications, tasks, stores, checkpoints and sizes. It only
/// reads: it takes no lock a running application could trip over.
///
/// # Errors
/// A state directory that does not exist or cannot be read.
pub fn run(args: &InspectArgs) -> CliResult {
    let apps = state::scan(&args.state_dir)?;
    outln!(
        "state directory {} ({} on disk)",
        args.state_dir.display(),
        bytes(dir_size(&args.state_dir))
    )?;
    if apps.is_empty() {
        outln!("  no applications")?;
    }
    for app in &apps {
        print_app(app)?;
    }
    for (dir, partitions) in state::file_logs(&args.state_dir, &apps)? {
        outln!("file log {}", dir.display())?;
        for partition in partitions {
            outln!("  {:<40} {:>10}", partition.name, bytes(partition.bytes))?;
        }
    }
    Ok(())
}

fn print_app(app: &App) -> CliResult {
    let status = match &app.held_by {
        Some(holder) => format!("running, locked by {holder}"),
        None => "not running".to_string(),
    };
    outln!(
        "application {} ({status}), {} tasks, {} on disk",
        app.id,
        app.tasks.len(),
        bytes(dir_size(&app.path))
    )?;
    for task in &app.tasks {
        outln!(
            "  task {} ({} on disk)",
            task.id,
            bytes(dir_size(&task.path))
        )?;
        match &task.checkpoint {
            Ok(entries) if entries.is_empty() => outln!("    checkpoint: none")?,
            Ok(entries) => {
                for (tp, offset) in entries {
                    outln!(
                        "    checkpoint: {} partition {} at offset {offset}",
                        tp.topic,
                        tp.partition
                    )?;
                }
            }
            Err(err) => outln!("    checkpoint: unreadable: {err}")?,
        }
        if task.stores.is_empty() {
            outln!("    no stores")?;
        }
        for store in &task.stores {
            let offset = task
                .checkpointed(&app.id, &store.name)
                .map_or("no checkpoint".to_string(), |offset| {
                    format!("checkpointed at {offset}")
                });
            outln!(
                "    store {:<16} backend {:<8} {:>10}  {offset}",
                store.name,
                store.backend,
                bytes(store.bytes)
            )?;
        }
    }
    Ok(())
}
