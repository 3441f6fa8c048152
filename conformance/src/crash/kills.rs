//! Random kills: the parent SIGKILLs a child that writes batches and flushes in a loop, at
//! random moments, many times over one directory, and checks the store after each kill.
//!
//! The child (the same [`child`](super::child) test, told to loop by an environment
//! variable) writes rounds of numbered batches: each batch puts [`KEYS_PER_BATCH`] fresh
//! keys whose values derive from their names; after every one to three batches it calls
//! `flush`, and once `flush` has returned it appends `<round> <batches so far>` to an
//! acknowledgement file outside the store. A kill cannot take back a line already appended
//! (it is in the page cache), so after each kill the parent knows which batches were flushed.
//!
//! After each kill the parent reopens the directory and checks that every batch acknowledged
//! as flushed is there whole, that every other batch is whole or absent, that every value is
//! the one written, and that every batch seen after an earlier reopen is still there (the
//! parent's `close` flushed it). A store that rewrites its data file in place during `flush`
//! fails this: a kill between the truncation and the end of the rewrite loses flushed batches,
//! or leaves a file that no longer opens.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use store_api::{BatchOp, KeyValueStore, WriteBatch};

use super::{DIR_VAR, SCENARIO_VAR};
use crate::StoreFactory;

/// Tells the child to loop, appending its acknowledgements to this file.
pub(super) const ACKS_VAR: &str = "STATESTORE_CONFORMANCE_CRASH_ACKS";
/// The round number the looping child writes its batches under.
const ROUND_VAR: &str = "STATESTORE_CONFORMANCE_CRASH_ROUND";

/// Sets the number of kills of the conformance case (default [`DEFAULT_KILLS`]).
pub const KILLS_VAR: &str = "STATESTORE_CONFORMANCE_KILLS";
/// Sets the seed of the kill moments (default: from the clock; printed on failure).
pub const SEED_VAR: &str = "STATESTORE_CONFORMANCE_KILL_SEED";
/// Kills per run of the conformance case unless [`KILLS_VAR`] says otherwise.
pub const DEFAULT_KILLS: u32 = 20;

/// Keys in each batch of the looping child.
pub const KEYS_PER_BATCH: usize = 8;
/// Bytes in each value the looping child writes.
const VALUE_LEN: usize = 40;
/// A looping child left alone stops after this long, so a dead parent leaves no process.
const MAX_RUN: Duration = Duration::from_secs(30);

/// `r<round>b<batch>k<key>`: fixed width, so scans list batches in order.
fn key(round: u32, batch: u32, k: usize) -> Vec<u8> {
    format!("r{round:04}b{batch:06}k{k:02}").into_bytes()
}

/// The value of a key, derived from its name so a torn or misplaced value shows.
fn value(key: &[u8]) -> Vec<u8> {
    key.iter()
        .copied()
        .cycle()
        .take(VALUE_LEN)
        .enumerate()
        .map(|(i, byte)| byte.wrapping_add(i as u8))
        .collect()
}

fn loop_batch(round: u32, batch: u32) -> WriteBatch {
    (0..KEYS_PER_BATCH)
        .map(|k| {
            let key = key(round, batch, k);
            BatchOp::Put {
                value: value(&key),
                key,
            }
        })
        .collect()
}

/// A small deterministic generator (splitmix64): enough for kill moments and batch counts,
/// and no dependency.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// The looping child's body: batches and flushes until killed (or [`MAX_RUN`] passes; then
/// it returns and the parent, seeing an exit instead of a kill, fails).
pub(super) fn write_until_killed(store: &dyn KeyValueStore, acks: &Path) {
    let round: u32 = std::env::var(ROUND_VAR)
        .ok()
        .and_then(|text| text.parse().ok())
        .expect("the looping child needs its round number");
    let mut acks = OpenOptions::new()
        .create(true)
        .append(true)
        .open(acks)
        .expect("opening the acknowledgement file");
    let mut rng = Rng(u64::from(round));
    let started = Instant::now();
    let mut written = 0;
    while started.elapsed() < MAX_RUN {
        for _ in 0..=rng.below(3) {
            store.write(loop_batch(round, written)).expect("write");
            written += 1;
        }
        store.flush().expect("flush");
        // One `write` call per line: a kill leaves the line whole or absent.
        acks.write_all(format!("{round} {written}\n").as_bytes())
            .expect("acknowledging a flush");
    }
}

/// What a run of random kills did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Kills, each followed by a reopen and a check.
    pub kills: u32,
    /// Kills made before the child acknowledged its first flush of the round: while it
    /// started, opened (recovering the previous kill) or wrote its first batches.
    pub early_kills: u32,
    /// Batches acknowledged as flushed before a kill, all found whole.
    pub flushed_batches: u64,
    /// Batches written after the last acknowledged flush that survived a kill whole.
    pub unflushed_survivors: u64,
    /// The seed of the kill moments.
    pub seed: u64,
    /// Reopens that failed with `Corruption`, each followed by emptying the directory: only
    /// with [`Corruption::Tolerated`], for a store that declares
    /// [`crash_may_corrupt`](store_api::Capabilities::crash_may_corrupt).
    pub corrupted: u32,
}

/// What [`kill_at_random_with`] makes of a reopen that fails with `Corruption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// A violation, as any other failed reopen.
    Violation,
    /// Counted in [`KillReport::corrupted`]; the directory is emptied and the run goes on.
    Tolerated,
}

/// Kills the child if the parent fails while it runs.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `kills` rounds on the store directory `dir`: start `child_test` of the running test
/// binary (a test that calls [`child`](super::child)) looping on `dir` with `scenario`,
/// SIGKILL it at a random moment, then `reopen` the directory, check it, and close it.
/// Returns what happened, or the first violation found, naming the round and `seed`.
///
/// The kill comes, one round in four, anywhere in the first 60 ms of the child's life
/// (start, open, recovery); otherwise within 20 ms after its first acknowledged flush.
///
/// # Errors
/// A description of the first violation: a reopen that fails, an acknowledged batch missing
/// or partial, a batch partly present, a wrong value, a key the child never wrote.
///
/// # Panics
/// When the child cannot be started, exits by itself, or never acknowledges a flush within
/// 30 s: the run could not test anything.
pub fn kill_at_random(
    child_test: &str,
    dir: &Path,
    scenario: &str,
    reopen: &dyn StoreFactory,
    kills: u32,
    seed: u64,
) -> Result<KillReport, String> {
    kill_at_random_with(
        child_test,
        dir,
        scenario,
        reopen,
        kills,
        seed,
        Corruption::Violation,
    )
}

/// As [`kill_at_random`], with `corruption` saying what a reopen that fails with `Corruption`
/// is.
///
/// # Errors
/// As [`kill_at_random`].
///
/// # Panics
/// As [`kill_at_random`].
pub fn kill_at_random_with(
    child_test: &str,
    dir: &Path,
    scenario: &str,
    reopen: &dyn StoreFactory,
    kills: u32,
    seed: u64,
    corruption: Corruption,
) -> Result<KillReport, String> {
    let scratch = tempfile::Builder::new()
        .prefix("statestore-kills-")
        .tempdir()
        .expect("a directory for the acknowledgement file");
    let acks = scratch.path().join("acks");
    let mut rng = Rng(seed);
    let mut report = KillReport {
        seed,
        ..KillReport::default()
    };
    let mut required = BTreeSet::new();
    for round in 0..kills {
        let acked_before = std::fs::metadata(&acks).map_or(0, |meta| meta.len());
        let mut child = Running(spawn(child_test, dir, scenario, &acks, round));
        if rng.below(4) == 0 {
            report.early_kills += 1;
            sleep(Duration::from_micros(rng.below(60_000)));
        } else {
            wait_for_ack(&acks, acked_before, &mut child.0);
            sleep(Duration::from_micros(rng.below(20_000)));
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("the looping child exited by itself ({status}) instead of being killed");
        }
        child.0.kill().expect("SIGKILL of the child");
        child.0.wait().expect("reaping the child");
        let flushed = acknowledged(&acks, round);
        required.extend((0..flushed).map(|batch| (round, batch)));
        report.flushed_batches += u64::from(flushed);
        let found = match check(dir, reopen, &required) {
            Err(Failed::Corrupt(_)) if corruption == Corruption::Tolerated => {
                report.corrupted += 1;
                std::fs::remove_dir_all(dir).expect("emptying the corrupted store's directory");
                std::fs::create_dir_all(dir).expect("recreating the store's directory");
                BTreeSet::new()
            }
            Err(Failed::Corrupt(why) | Failed::Other(why)) => {
                return Err(format!("kill {round} of {kills} (seed {seed}): {why}"));
            }
            Ok(found) => found,
        };
        let unflushed = found.iter().filter(|&&(r, b)| r == round && b >= flushed);
        report.unflushed_survivors += unflushed.count() as u64;
        // The parent's `close` flushed what the reopen found: it must stay from now on.
        required = found;
        report.kills += 1;
    }
    Ok(report)
}

fn spawn(child_test: &str, dir: &Path, scenario: &str, acks: &Path, round: u32) -> Child {
    let exe = std::env::current_exe().expect("the path of the running test binary");
    Command::new(exe)
        .args([child_test, "--ignored", "--nocapture", "--test-threads=1"])
        .env(DIR_VAR, dir)
        .env(SCENARIO_VAR, scenario)
        .env(ACKS_VAR, acks)
        .env(ROUND_VAR, round.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the looping crash child")
}

/// Waits until the acknowledgement file grew past `before`.
fn wait_for_ack(acks: &Path, before: u64, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(acks).map_or(0, |meta| meta.len()) <= before {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the looping child exited ({status}) before its first flush; is the child test \
                 in this binary, and does the store open?"
            );
        }
        assert!(
            Instant::now() < deadline,
            "the looping child acknowledged no flush in 30 s"
        );
        sleep(Duration::from_micros(500));
    }
}

/// The number of batches of `round` acknowledged as flushed.
fn acknowledged(acks: &Path, round: u32) -> u32 {
    let text = std::fs::read_to_string(acks).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(r, _)| r.parse() == Ok(round))
        .filter_map(|(_, batches)| batches.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Why a check after a kill failed.
enum Failed {
    /// The reopen failed with `Corruption`.
    Corrupt(String),
    /// Any other violation.
    Other(String),
}

/// Reopens `dir`, checks every key, and returns the batches found (all whole).
fn check(
    dir: &Path,
    reopen: &dyn StoreFactory,
    required: &BTreeSet<(u32, u32)>,
) -> Result<BTreeSet<(u32, u32)>, Failed> {
    let store = reopen.open(dir).map_err(|err| {
        let why = format!("reopening after the kill failed: {err}");
        match err.kind() {
            store_api::ErrorKind::Corruption => Failed::Corrupt(why),
            _ => Failed::Other(why),
        }
    })?;
    let found = batches_in(store.as_ref()).map_err(Failed::Other)?;
    store
        .close()
        .map_err(|err| Failed::Other(format!("closing after the check failed: {err}")))?;
    if let Some((round, batch)) = required.difference(&found).next() {
        let missing = required.difference(&found).count();
        return Err(Failed::Other(format!(
            "{missing} batches that were flushed are missing after the kill, the first: batch \
             {batch} of round {round}"
        )));
    }
    Ok(found)
}

/// The batches in the store; an error for a partial batch, a wrong value or a stray key.
fn batches_in(store: &dyn KeyValueStore) -> Result<BTreeSet<(u32, u32)>, String> {
    let mut counts: Vec<((u32, u32), usize)> = Vec::new();
    let entries = store
        .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
        .map_err(|err| format!("scanning after the kill failed: {err}"))?;
    for entry in entries {
        let (key, stored) = entry.map_err(|err| format!("scanning after the kill: {err}"))?;
        let id = parse_key(&key).ok_or_else(|| format!("a key the child never wrote: {key:?}"))?;
        if stored != value(&key) {
            return Err(format!(
                "key {} holds a value that was never written to it",
                String::from_utf8_lossy(&key)
            ));
        }
        match counts.last_mut() {
            Some((last, count)) if *last == id => *count += 1,
            _ => counts.push((id, 1)),
        }
    }
    if let Some(((round, batch), count)) = counts.iter().find(|(_, n)| *n != KEYS_PER_BATCH) {
        return Err(format!(
            "batch {batch} of round {round} survived in part: {count} of {KEYS_PER_BATCH} keys"
        ));
    }
    Ok(counts.into_iter().map(|(id, _)| id).collect())
}

/// `(round, batch)` of a key written by the child.
fn parse_key(key: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(key).ok()?;
    let rest = text.strip_prefix('r')?;
    let (round, rest) = rest.split_once('b')?;
    let (batch, k) = rest.split_once('k')?;
    let k: usize = k.parse().ok()?;
    (k < KEYS_PER_BATCH && round.len() == 4 && batch.len() == 6)
        .then(|| Some((round.parse().ok()?, batch.parse().ok()?)))?
}

/// The kills of the conformance case: [`KILLS_VAR`], or [`DEFAULT_KILLS`].
///
/// # Panics
/// When the variable is set but not a number.
pub fn kills_from_env() -> u32 {
    std::env::var(KILLS_VAR).map_or(DEFAULT_KILLS, |text| {
        text.parse()
            .unwrap_or_else(|_| panic!("{KILLS_VAR}={text} is not a number"))
    })
}

/// The seed of the conformance case: [`SEED_VAR`], or one from the clock.
///
/// # Panics
/// When the variable is set but not a number.
pub fn seed_from_env() -> u64 {
    std::env::var(SEED_VAR).map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64)
        },
        |text| {
            text.parse()
                .unwrap_or_else(|_| panic!("{SEED_VAR}={text} is not a number"))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{key, parse_key};

    #[test]
    fn keys_parse_back() {
        assert_eq!(parse_key(&key(12, 345, 7)), Some((12, 345)));
        assert_eq!(parse_key(b"r0001b000001k99"), None);
        assert_eq!(parse_key(b"x"), None);
    }
}
