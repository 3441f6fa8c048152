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
//!
//! `--mode windowed` counts words per tumbling one-minute window of the lines' event time (a
//! window store; records later than a 10 s grace period are dropped and counted), and
//! `--mode sessions` counts each word's activity sessions, split by 5 s without it (a
//! session store). Both resume after kill -9 the same way.

mod counts;
mod text;
mod timed;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use counts::Counts;
use timed::TimedCounts;

/// What to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Words, in total.
    Words,
    /// Words per tumbling one-minute window of event time.
    Windowed,
    /// Words per activity session (a word's occurrences less than 5 s of event time apart).
    Sessions,
}

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
    /// What to count.
    #[arg(long, value_enum, default_value_t = Mode::Words)]
    mode: Mode,
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
    /// When done, print every `word<TAB>count` to stdout, in word order (windowed and
    /// sessions: `start<TAB>end<TAB>word<TAB>count` of every retained window or session).
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
    if args.mode != Mode::Words {
        return run_timed(args, &log_dir);
    }
    let counts = Counts::open(&args.state_dir, &log_dir, &args.backend)?;
    let start = counts.position()?;
    resuming(start, counts.restored_records());
    for_each_line(
        args,
        start,
        |_, word| counts.add(word),
        || counts.needs_commit(),
        |next| counts.commit(next),
    )?;
    let all = counts.all()?;
    let total: u64 = all.iter().map(|(_, count)| count).sum();
    eprintln!(
        "done: {} lines, {total} words, {} distinct",
        args.lines.max(start),
        all.len()
    );
    if args.print_counts {
        print_lines(all.iter().map(|(word, count)| format!("{word}\t{count}")))?;
    } else {
        let mut top = all;
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        for (word, count) in top.iter().take(10) {
            eprintln!("{count:>10}  {word}");
        }
    }
    counts.close()
}

/// The windowed and session modes: as the word count, on a window or session store.
fn run_timed(args: &Args, log_dir: &std::path::Path) -> store_api::Result<()> {
    let counts = match args.mode {
        Mode::Windowed => TimedCounts::open_windowed(&args.state_dir, log_dir, &args.backend)?,
        _ => TimedCounts::open_sessions(&args.state_dir, log_dir, &args.backend)?,
    };
    let start = counts.position()?;
    resuming(start, counts.restored_records());
    let add = |line, word: &str| counts.add(word, text::event_time(args.seed, line));
    let full = || counts.needs_commit();
    for_each_line(args, start, add, full, |next| counts.commit(next))?;
    let rows = counts.rows(text::WORDS)?;
    eprintln!(
        "done: {} lines, {} windows or sessions retained, {} late records dropped by this run",
        args.lines.max(start),
        rows.len(),
        counts.late_records()
    );
    if args.print_counts {
        print_lines(rows.into_iter())?;
    } else {
        for row in rows.iter().rev().take(10) {
            eprintln!("{row}");
        }
    }
    counts.close()
}

/// Says where a restarted run resumes.
fn resuming(start: u64, restored: u64) {
    if start > 0 {
        eprintln!("resuming at line {start} (restored {restored} records from the changelog)");
    }
}

/// Prints lines to stdout. A reader that stops early (`| head`) ends the output quietly
/// rather than failing the run.
fn print_lines(mut lines: impl Iterator<Item = String>) -> store_api::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = lines
        .try_for_each(|line| writeln!(out, "{line}"))
        .and_then(|()| out.flush());
    match written {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(store_api::Error::io("printing the counts", err))
        }
        _ => Ok(()),
    }
}

/// Feeds every word of lines `start..args.lines` to `add` with its line number, calling
/// `commit` with the next line every `args.commit_every` lines and whenever `full` says the
/// store's buffer is full (always at a line's end, so a commit never splits a line), and
/// printing progress at most four times a second.
fn for_each_line(
    args: &Args,
    start: u64,
    mut add: impl FnMut(u64, &str) -> store_api::Result<()>,
    full: impl Fn() -> bool,
    mut commit: impl FnMut(u64) -> store_api::Result<()>,
) -> store_api::Result<()> {
    let mut last_report: Option<Instant> = None;
    for line in start..args.lines {
        for word in text::line(args.seed, line).split(' ') {
            add(line, word)?;
        }
        let next = line + 1;
        if next % args.commit_every == 0 || next == args.lines || full() {
            commit(next)?;
            if last_report.is_none_or(|at| at.elapsed() >= Duration::from_millis(250)) {
                eprintln!("progress: committed line {next}/{}", args.lines);
                last_report = Some(Instant::now());
            }
        }
    }
    Ok(())
}
