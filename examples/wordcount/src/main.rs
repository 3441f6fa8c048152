//! wordcount: counts the words of generated text into a logged store on the embedded
//! changelog, in a state directory, committing every few lines. Kill it at any moment and run
//! it again: it restores the store and continues exactly where the last commit left off,
//! because the input position is committed with the counts.
//!
//! ```text
//! wordcount --state-dir /tmp/wc --lines 200000        # kill it with Ctrl-C or kill -9 ...
//! wordcount --state-dir /tmp/wc --lines 200000        # ... it resumes, and finishes
//! wordcount --state-dir /tmp/wc --lines 200000 --print-counts
//! ```

mod counts;
mod text;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use counts::Counts;

/// Counts words from generated text into a logged, restorable store.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The state directory (the store lives in `<state-dir>/wordcount/0_0/<backend>/counts`).
    #[arg(long)]
    state_dir: PathBuf,
    /// The changelog directory. Default: `<state-dir>/changelog`.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// The storage engine: rocksdb, sled, redb or memory (memory restores from the log on
    /// every start).
    #[arg(long, default_value = "rocksdb")]
    backend: String,
    /// Total lines of input to count.
    #[arg(long, default_value_t = 100_000)]
    lines: u64,
    /// Commit every this many lines.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    commit_every: u64,
    /// Seed of the text generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// When done, print every `word<TAB>count` to stdout, in word order.
    #[arg(long)]
    print_counts: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> store_api::Result<()> {
    let log_dir = args
        .log_dir
        .clone()
        .unwrap_or_else(|| args.state_dir.join("changelog"));
    let counts = Counts::open(&args.state_dir, &log_dir, &args.backend)?;
    let start = counts.position()?;
    if start > 0 {
        eprintln!(
            "resuming at line {start} (restored {} records from the changelog)",
            counts.restored_records()
        );
    }
    count_lines(&counts, args, start)?;
    let all = counts.all()?;
    let total: u64 = all.iter().map(|(_, count)| count).sum();
    eprintln!(
        "done: {} lines, {total} words, {} distinct",
        args.lines.max(start),
        all.len()
    );
    if args.print_counts {
        print_counts(&all)?;
    } else {
        let mut top = all;
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        for (word, count) in top.iter().take(10) {
            eprintln!("{count:>10}  {word}");
        }
    }
    counts.close()
}

/// Prints `word<TAB>count` lines to stdout. A reader that stops early (`| head`) ends the
/// output quietly rather than failing the run.
fn print_counts(all: &[(String, u64)]) -> store_api::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = all
        .iter()
        .try_for_each(|(word, count)| writeln!(out, "{word}\t{count}"))
        .and_then(|()| out.flush());
    match written {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(store_api::Error::io("printing the counts", err))
        }
        _ => Ok(()),
    }
}

/// Counts lines `start..args.lines`, committing every `args.commit_every` lines and printing
/// progress at most four times a second.
fn count_lines(counts: &Counts, args: &Args, start: u64) -> store_api::Result<()> {
    let mut last_report: Option<Instant> = None;
    for line in start..args.lines {
        for word in text::line(args.seed, line).split(' ') {
            counts.add(word)?;
        }
        let next = line + 1;
        if next % args.commit_every == 0 || next == args.lines {
            counts.commit(next)?;
            if last_report.is_none_or(|at| at.elapsed() >= Duration::from_millis(250)) {
                eprintln!("progress: committed line {next}/{}", args.lines);
                last_report = Some(Instant::now());
            }
        }
    }
    Ok(())
}
