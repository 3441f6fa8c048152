//! `statestore dump STATE_DIR STORE`.

use std::io::{self, BufWriter, Write};
use std::ops::{Bound, ControlFlow};
use std::path::PathBuf;

use clap::Args;
use statestore_changelog::TaskId;

use crate::CliResult;
use crate::state::{self, Store};

/// Arguments of `statestore dump`.
#[derive(Debug, Args)]
#[command(
    after_help = "Each pair is printed as KEY<TAB>VALUE, one per line. Bytes that are \
printable UTF-8 print as text; anything else prints as 0x followed by hex.\n\
The application must not be running: dump locks its directory as the application does."
)]
pub struct DumpArgs {
    /// The state directory: the parent of the application directories.
    state_dir: PathBuf,
    /// The store's name.
    store: String,
    /// The task to dump, such as 0_1 [default: every task that has the store].
    #[arg(long, value_parser = parse_task)]
    task: Option<TaskId>,
    /// The application [default: the only one in the state directory].
    #[arg(long)]
    application: Option<String>,
    /// Stop after this many pairs per task.
    #[arg(long)]
    limit: Option<u64>,
}

/// Parses a task id such as `0_1`.
pub fn parse_task(text: &str) -> Result<TaskId, String> {
    text.parse()
        .map_err(|err: store_api::Error| err.to_string())
}

/// Prints every key/value pair of the store, task by task.
///
/// # Errors
/// An unknown application, task or store, a running application, or a store that cannot be
/// opened or read.
pub fn run(args: &DumpArgs) -> CliResult {
    let apps = state::scan(&args.state_dir)?;
    let app = state::pick_app(&apps, args.application.as_deref(), &args.state_dir)?;
    let stores: Vec<(TaskId, &Store)> = app
        .tasks
        .iter()
        .filter(|task| args.task.is_none_or(|wanted| wanted == task.id))
        .flat_map(|task| task.stores.iter().map(move |store| (task.id, store)))
        .filter(|(_, store)| store.name == args.store)
        .collect();
    if stores.is_empty() {
        let scope = args
            .task
            .map_or("any task".to_string(), |task| format!("task {task}"));
        return Err(format!(
            "application {:?} has no store {:?} in {scope}",
            app.id, args.store
        )
        .into());
    }
    let _locked = state::lock_app(&args.state_dir, app)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for (task, store) in stores {
        writeln!(
            out,
            "# task {task}, backend {}, store {}",
            store.backend, store.name
        )?;
        dump_store(store, args.limit, &mut out)?;
    }
    out.flush()?;
    Ok(())
}

fn dump_store(store: &Store, limit: Option<u64>, out: &mut impl Write) -> CliResult {
    if store.backend == "memory" {
        return Err(format!(
            "{} is a memory store: it keeps nothing on disk. Rebuild it into a persistent \
             backend with `statestore restore`, then dump that",
            store.path.display()
        )
        .into());
    }
    let kv = statestore::open(&store.backend, &store.path, &serde_json::Value::Null)?;
    let limit = limit.map_or(usize::MAX, |limit| {
        usize::try_from(limit).unwrap_or(usize::MAX)
    });
    let mut written = Ok(());
    if limit > 0 {
        let mut left = limit;
        kv.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            false,
            &mut |key, value| {
                written = writeln!(out, "{}\t{}", render(key), render(value));
                left -= 1;
                if written.is_err() || left == 0 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
    }
    written?;
    kv.close()?;
    Ok(())
}

/// The bytes as text when they are UTF-8 without control characters (tab and newline would
/// break the line format), otherwise `0x` and lowercase hex. Empty bytes print as `""`, so an
/// empty value is still visible.
pub fn render(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "\"\"".to_string();
    }
    match std::str::from_utf8(bytes) {
        Ok(text)
            if !text.chars().any(char::is_control) && !text.starts_with("0x") && text != "\"\"" =>
        {
            text.to_string()
        }
        _ => {
            let mut hex = String::with_capacity(2 + bytes.len() * 2);
            hex.push_str("0x");
            for byte in bytes {
                hex.push_str(&format!("{byte:02x}"));
            }
            hex
        }
    }
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn renders_text_and_hex() {
        assert_eq!(render(b"hello world"), "hello world");
        assert_eq!(render("grüße".as_bytes()), "grüße");
        assert_eq!(render(&7u64.to_be_bytes()), "0x0000000000000007");
        assert_eq!(render(b"a\tb"), "0x610962");
        assert_eq!(render(&[0xff, 0x00]), "0xff00");
        // Text that looks like hex is hex-encoded, so the output is unambiguous.
        assert_eq!(render(b"0x12"), "0x30783132");
        assert_eq!(render(b""), "\"\"");
        assert_eq!(render(b"\"\""), "0x2222");
    }
}
