//! Where a `LoggedStore` commit's time goes, step by step, against writing the same records
//! straight into the store: the figures behind "Logged against unlogged" in `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --profile bench -p statestore-changelog --example commit_phases -- [backend] [keys] [commits] [atomic]
//! ```
//!
//! Each commit is 10 000 `put_random`-shaped writes (24-byte keys drawn from `keys`, 150-byte
//! values), as in the `changelog` bench. The steps are those of `LoggedStore::commit` on the
//! file log, run one at a time so each can be timed: buffer the writes (a map from key to
//! latest value, as the write buffer holds them), freeze them into a sorted batch, append
//! them to the log, sync the log, apply the batch to the store (`write_ops_non_atomic`, or
//! the atomic `write_ops` when the fourth argument is `atomic`, to compare the two in separate
//! runs: sled's epoch-based reclamation is shared by every tree of a process, so one tree's
//! atomic batch slows the next writes of another), free the batch. The commit's checkpoint
//! (flush the store, rewrite the checkpoint file: write, fsync, rename, fsync the directory)
//! is timed too but left out of the logged total: a commit takes it once per 64 MiB of
//! records by default. "unlogged" writes the same records into a second store of the same
//! backend with `put`, never syncing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use statestore_changelog::{Changelog, Checkpoint, FileLog, FileLogConfig, Framing};
use store_api::{BatchOp, Result};

const WRITES_PER_COMMIT: usize = 10_000;

const STEPS: [&str; 9] = [
    "unlogged: put each",
    "buffer the writes",
    "freeze the buffer",
    "append to the log",
    "sync the log",
    "apply the batch",
    "free the batch",
    "(flush the store)",
    "(write the checkpoint)",
];

/// The steps of [`STEPS`] a commit takes every time: the logged total.
const COMMIT_STEPS: std::ops::Range<usize> = 1..7;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_else(|| "memory".to_string());
    let keys: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let commits: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);

    let dir = tempfile::tempdir().map_err(|err| store_api::Error::io("tempdir", err))?;
    let options = Default::default();
    let unlogged = statestore::open(&backend, &dir.path().join("unlogged"), &options)?;
    let atomic = args.next().is_some_and(|a| a == "atomic");
    let store = statestore::open(&backend, &dir.path().join("store"), &options)?;
    let log = FileLog::open(
        &dir.path().join("log"),
        "phases",
        0,
        FileLogConfig::default(),
    )?;
    let checkpoint = Checkpoint::open(dir.path().join(".checkpoint"))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut spent = [Duration::ZERO; STEPS.len()];
    let mut time = |step: usize, start: Instant| spent[step] += start.elapsed();

    for _ in 0..commits {
        let writes: Vec<(Vec<u8>, Vec<u8>)> = (0..WRITES_PER_COMMIT)
            .map(|_| {
                let key = format!("user{:020}", rng.random_range(0..keys)).into_bytes();
                (key, vec![b'v'; 150])
            })
            .collect();

        let start = Instant::now();
        for (key, value) in &writes {
            unlogged.put(key, value)?;
        }
        time(0, start);

        let start = Instant::now();
        let mut buffer = BTreeMap::new();
        for (key, value) in &writes {
            buffer.insert(key.clone(), Some(value.clone()));
        }
        time(1, start);

        let start = Instant::now();
        let frozen: Vec<BatchOp> = buffer
            .into_iter()
            .map(|(key, value)| match value {
                Some(value) => BatchOp::Put { key, value },
                None => BatchOp::Delete { key },
            })
            .collect();
        time(2, start);

        let start = Instant::now();
        let offsets = log.append_framed(&frozen, Framing::Commit)?;
        time(3, start);

        let start = Instant::now();
        log.sync()?;
        time(4, start);

        let start = Instant::now();
        if atomic {
            store.write_ops(&frozen)?;
        } else {
            store.write_ops_non_atomic(&frozen)?;
        }
        time(5, start);

        let start = Instant::now();
        drop(frozen);
        time(6, start);

        let start = Instant::now();
        store.flush()?;
        time(7, start);

        let start = Instant::now();
        checkpoint.set(log.topic(), log.partition(), offsets.end - 1)?;
        time(8, start);
    }

    let per_commit = |d: Duration| d.as_secs_f64() * 1000.0 / f64::from(commits);
    let unlogged_ms = per_commit(spent[0]);
    let logged_ms: f64 = spent[COMMIT_STEPS].iter().map(|d| per_commit(*d)).sum();
    println!(
        "{backend}, {keys} keys, {commits} commits of {WRITES_PER_COMMIT} writes, the batch \
         applied {} (ms per commit):",
        if atomic {
            "atomically"
        } else {
            "non-atomically"
        }
    );
    for (step, d) in STEPS.iter().zip(spent) {
        println!("  {step:<22} {:8.2}", per_commit(d));
    }
    println!(
        "  logged total {logged_ms:.2} ms, unlogged {unlogged_ms:.2} ms: logged runs at {:.2}x",
        unlogged_ms / logged_ms
    );
    Ok(())
}
