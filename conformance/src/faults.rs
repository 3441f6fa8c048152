//! Fault injection: a store and a changelog that fail chosen or random operations with I/O
//! errors, to prove that whatever sits on top of them (a [`LoggedStore`], a task, an
//! operator) survives I/O failures without losing acknowledged data, applying part of a
//! commit, or panicking.
//!
//! The design follows Materialize's `unreliable` persist wrappers: [`FaultyStore`] and
//! [`FaultyLog`] wrap any [`KeyValueStore`] and any [`Changelog`], and share a [`Faults`]
//! handle with the test, which switches faults on and off while they run: a rate of random
//! failures, the `n`-th call from now, or both.
//!
//! A fault strikes at one of three moments ([`FaultTiming`]):
//! - **before** the operation reaches the inner store or log: nothing happened;
//! - **after** it completed: it happened, but the caller is told it failed. For a changelog
//!   `append` this is the nasty case: the records are in the log, yet the caller believes the
//!   commit failed and will retry it or give up;
//! - **torn**, for `append` and a store's `write_ops_non_atomic` only: a prefix of the
//!   records (or operations) reaches the log (or the store), then the error, as when a
//!   producer or a disk dies halfway through, and no commit marker. The [`Changelog`] contract
//!   allows it ("a reader may find any prefix of the call's records"), and so does
//!   [`KeyValueStore::write_ops_non_atomic`]'s. A store's `write` is atomic by contract, so a
//!   torn `write` is not simulated: it fails before instead.
//!
//! Reads fail before they run; an iterator may also fail at any step, with an `Err` item that
//! ends it. Every injected failure is [`Error::Io`] whose context starts with
//! [`INJECTED`], so a test can tell it from a real one.
//!
//! ```
//! use std::sync::Arc;
//! use statestore_changelog::{Changelog, MemoryLog};
//! use statestore_conformance::faults::{FaultOp, Faults, FaultyLog};
//! use store_api::{BatchOp, ErrorKind};
//!
//! let faults = Faults::new(42);
//! let log = FaultyLog::new(Arc::new(MemoryLog::new("app-counts-changelog", 0)), faults.clone());
//! let op = BatchOp::Delete { key: b"k".to_vec() };
//!
//! faults.fail_nth(2); // the second call from now fails, once
//! assert!(log.append(&[op.clone()]).is_ok());
//! assert_eq!(log.append(&[op.clone()]).unwrap_err().kind(), ErrorKind::Io);
//! assert!(log.append(&[op.clone()]).is_ok());
//!
//! faults.set_rate(1.0); // every call fails ...
//! faults.set_ops(&[FaultOp::Sync]); // ... among the syncs
//! assert!(log.append(&[op]).is_ok());
//! assert!(log.sync().is_err());
//! faults.off();
//! assert!(log.sync().is_ok());
//! assert_eq!(faults.injected(), 2);
//! ```
//!
//! [`LoggedStore`]: statestore_changelog::LoggedStore

use std::fmt;
use std::ops::{Bound, Range};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use statestore_changelog::{Changelog, ChangelogRecord, Framing};
use store_api::{BatchOp, Capabilities, Error, KeyValueStore, KvIter, KvPair, Result, WriteBatch};

/// The context every injected error's message starts with.
pub const INJECTED: &str = "injecting a fault";

/// An operation of a [`FaultyStore`] or a [`FaultyLog`] that a fault can strike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultOp {
    /// [`KeyValueStore::get`].
    Get,
    /// [`KeyValueStore::put`].
    Put,
    /// [`KeyValueStore::put_if_absent`].
    PutIfAbsent,
    /// [`KeyValueStore::delete`].
    Delete,
    /// [`KeyValueStore::write`].
    Write,
    /// Making an iterator: ranges, reverse ranges and prefix scans.
    Scan,
    /// One step of an iterator of the store.
    ScanNext,
    /// [`KeyValueStore::approximate_len`].
    ApproximateLen,
    /// [`KeyValueStore::flush`].
    Flush,
    /// [`KeyValueStore::close`].
    Close,
    /// [`Changelog::append_framed`] (and so [`Changelog::append`]).
    Append,
    /// [`Changelog::sync`].
    Sync,
    /// [`Changelog::read`].
    Read,
    /// [`Changelog::start_offset`].
    StartOffset,
    /// [`Changelog::end_offset`].
    EndOffset,
    /// [`KeyValueStore::write_ops_non_atomic`].
    WriteNonAtomic,
}

impl FaultOp {
    /// Every operation.
    pub const ALL: [FaultOp; 16] = [
        FaultOp::Get,
        FaultOp::Put,
        FaultOp::PutIfAbsent,
        FaultOp::Delete,
        FaultOp::Write,
        FaultOp::Scan,
        FaultOp::ScanNext,
        FaultOp::ApproximateLen,
        FaultOp::Flush,
        FaultOp::Close,
        FaultOp::Append,
        FaultOp::Sync,
        FaultOp::Read,
        FaultOp::StartOffset,
        FaultOp::EndOffset,
        FaultOp::WriteNonAtomic,
    ];

    fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Whether the operation changes something, so that failing after it differs from
    /// failing before it.
    pub fn mutates(self) -> bool {
        matches!(
            self,
            FaultOp::Put
                | FaultOp::PutIfAbsent
                | FaultOp::Delete
                | FaultOp::Write
                | FaultOp::WriteNonAtomic
                | FaultOp::Flush
                | FaultOp::Close
                | FaultOp::Append
                | FaultOp::Sync
        )
    }
}

/// When an injected fault strikes, relative to the operation it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultTiming {
    /// The operation never reaches the inner store or log.
    Before,
    /// The operation completes, then the caller gets the error.
    After,
    /// A changelog `append` writes a prefix of its records, and a store's
    /// `write_ops_non_atomic` applies a prefix of its operations (possibly none, never all),
    /// then fails. Any other operation fails before.
    Torn,
    /// Each fault picks `Before` or `After` at random (only `Before` for operations that
    /// change nothing).
    BeforeOrAfter,
    /// Each fault picks one of the above at random (only `Before` for operations that change
    /// nothing, never `Torn` except for `append`). The default.
    Any,
}

/// The shared switchboard of a set of faulty wrappers: clone it into every wrapper and keep
/// one in the test. Faults start switched off. Randomness comes from a seeded generator, so
/// a run is repeatable as far as the calls arrive in the same order.
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<State>>,
}

struct State {
    /// Random failures per call, as a fraction of `u64::MAX`.
    threshold: u64,
    /// Calls left until the chosen one fails; 0 when none is chosen.
    nth: u64,
    ops: u32,
    timing: FaultTiming,
    rng: u64,
    injected: u64,
    injected_after: u64,
    injected_torn: u64,
}

/// A fault decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strike {
    Before,
    After,
    /// Keep this many records of an append.
    Torn(usize),
}

impl Faults {
    /// A handle with faults off, every operation eligible, timing [`FaultTiming::Any`], and
    /// its random generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let state = State {
            threshold: 0,
            nth: 0,
            ops: u32::MAX,
            timing: FaultTiming::Any,
            rng: seed,
            injected: 0,
            injected_after: 0,
            injected_torn: 0,
        };
        Faults {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// Fails each eligible call with probability `rate` (clamped to `0.0..=1.0`): `0.0`
    /// switches random faults off, `1.0` fails every call.
    pub fn set_rate(&self, rate: f64) {
        let rate = if rate.is_nan() {
            0.0
        } else {
            rate.clamp(0.0, 1.0)
        };
        // The cast saturates, so 1.0 becomes u64::MAX and every draw is below it but one in
        // 2^64; `decide` treats u64::MAX as "always".
        self.lock().threshold = (rate * u64::MAX as f64) as u64;
    }

    /// Fails the `n`-th eligible call from now (`1` is the next one), once; `0` cancels.
    pub fn fail_nth(&self, n: u64) {
        self.lock().nth = n;
    }

    /// Restricts faults to `ops`; the others always succeed.
    pub fn set_ops(&self, ops: &[FaultOp]) {
        self.lock().ops = ops.iter().fold(0, |bits, op| bits | op.bit());
    }

    /// Sets when faults strike. Default: [`FaultTiming::Any`].
    pub fn set_timing(&self, timing: FaultTiming) {
        self.lock().timing = timing;
    }

    /// Switches every fault off: no random failure and no pending `n`-th call. The eligible
    /// operations and the timing are kept.
    pub fn off(&self) {
        let mut state = self.lock();
        state.threshold = 0;
        state.nth = 0;
    }

    /// The number of faults injected so far.
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    /// Of [`injected`](Faults::injected), those that struck after the operation completed.
    pub fn injected_after(&self) -> u64 {
        self.lock().injected_after
    }

    /// Of [`injected`](Faults::injected), the appends that wrote a prefix of their records and
    /// the non-atomic store writes that applied a prefix of their operations.
    pub fn injected_torn(&self) -> u64 {
        self.lock().injected_torn
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock left consistent state: every update is
        // a single assignment.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this call of `op` fails, and how; `records` is the size of an append.
    fn decide(&self, op: FaultOp, records: usize) -> Option<Strike> {
        let mut state = self.lock();
        if state.ops & op.bit() == 0 {
            return None;
        }
        let chosen = match state.nth {
            0 => false,
            1 => {
                state.nth = 0;
                true
            }
            _ => {
                state.nth -= 1;
                false
            }
        };
        let random = state.threshold != 0 && {
            let draw = state.next_random();
            state.threshold == u64::MAX || draw < state.threshold
        };
        if !chosen && !random {
            return None;
        }
        let strike = state.strike(op, records);
        state.injected += 1;
        match strike {
            Strike::Before => {}
            Strike::After => state.injected_after += 1,
            Strike::Torn(_) => state.injected_torn += 1,
        }
        Some(strike)
    }
}

impl State {
    /// splitmix64: small, fast, and good enough to spread faults.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn strike(&mut self, op: FaultOp, records: usize) -> Strike {
        let torn_ok = matches!(op, FaultOp::Append | FaultOp::WriteNonAtomic);
        let timing = match self.timing {
            FaultTiming::Any | FaultTiming::BeforeOrAfter if !op.mutates() => FaultTiming::Before,
            FaultTiming::BeforeOrAfter => match self.next_random() % 2 {
                0 => FaultTiming::Before,
                _ => FaultTiming::After,
            },
            FaultTiming::Any => match self.next_random() % if torn_ok { 3 } else { 2 } {
                0 => FaultTiming::Before,
                1 => FaultTiming::After,
                _ => FaultTiming::Torn,
            },
            other => other,
        };
        match timing {
            FaultTiming::After if op.mutates() => Strike::After,
            FaultTiming::Torn if torn_ok => {
                let kept = usize::try_from(self.next_random() % records.max(1) as u64);
                Strike::Torn(kept.unwrap_or(0))
            }
            _ => Strike::Before,
        }
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Faults")
            .field("rate", &(state.threshold as f64 / u64::MAX as f64))
            .field("nth", &state.nth)
            .field("timing", &state.timing)
            .field("injected", &state.injected)
            .finish_non_exhaustive()
    }
}

fn injected(op: FaultOp, when: &str) -> Error {
    Error::io(
        format!("{INJECTED}: {op:?} ({when})"),
        std::io::Error::other("injected I/O error"),
    )
}

/// Runs `call` under the fault decided for `op`: before (not run), after (run, result
/// dropped) or not at all. Torn strikes are only decided for appends, which handle them.
fn guarded<T>(faults: &Faults, op: FaultOp, call: impl FnOnce() -> Result<T>) -> Result<T> {
    match faults.decide(op, 0) {
        None => call(),
        Some(Strike::After) => {
            let _completed = call();
            Err(injected(op, "after the operation"))
        }
        Some(_) => Err(injected(op, "before the operation")),
    }
}

/// A [`KeyValueStore`] that fails operations as its [`Faults`] handle says, and otherwise
/// passes every call to the store it wraps.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn KeyValueStore>,
    faults: Faults,
}

impl FaultyStore {
    /// Wraps `inner`; `faults` decides which calls fail.
    pub fn new(inner: Arc<dyn KeyValueStore>, faults: Faults) -> Self {
        FaultyStore { inner, faults }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.inner
    }

    fn iter(&self, make: impl FnOnce() -> Result<KvIter>) -> Result<KvIter> {
        let inner = guarded(&self.faults, FaultOp::Scan, make)?;
        Ok(Box::new(FaultyIter {
            inner: Some(inner),
            faults: self.faults.clone(),
        }))
    }
}

impl KeyValueStore for FaultyStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        guarded(&self.faults, FaultOp::Get, || self.inner.get(key))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        guarded(&self.faults, FaultOp::Put, || self.inner.put(key, value))
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        guarded(&self.faults, FaultOp::PutIfAbsent, || {
            self.inner.put_if_absent(key, value)
        })
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        guarded(&self.faults, FaultOp::Delete, || self.inner.delete(key))
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        guarded(&self.faults, FaultOp::Write, || self.inner.write(batch))
    }

    /// A torn fault applies a prefix of `ops` (possibly none, never all), then fails.
    fn write_ops_non_atomic(&self, ops: &[BatchOp]) -> Result<()> {
        let op = FaultOp::WriteNonAtomic;
        match self.faults.decide(op, ops.len()) {
            None => self.inner.write_ops_non_atomic(ops),
            Some(Strike::Before) => Err(injected(op, "before the operation")),
            Some(Strike::After) => {
                let _completed = self.inner.write_ops_non_atomic(ops);
                Err(injected(op, "after the operation"))
            }
            Some(Strike::Torn(kept)) => {
                let _completed = self.inner.write_ops_non_atomic(&ops[..kept.min(ops.len())]);
                Err(injected(op, "after part of the operations"))
            }
        }
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(|| self.inner.range(from, to))
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(|| self.inner.reverse_range(from, to))
    }

    fn prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        self.iter(|| self.inner.prefix_scan(prefix))
    }

    fn reverse_prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        self.iter(|| self.inner.reverse_prefix_scan(prefix))
    }

    fn approximate_len(&self) -> Result<u64> {
        guarded(&self.faults, FaultOp::ApproximateLen, || {
            self.inner.approximate_len()
        })
    }

    fn flush(&self) -> Result<()> {
        guarded(&self.faults, FaultOp::Flush, || self.inner.flush())
    }

    fn close(&self) -> Result<()> {
        guarded(&self.faults, FaultOp::Close, || self.inner.close())
    }
}

/// An iterator of a [`FaultyStore`]: each step may fail, which ends it.
struct FaultyIter {
    inner: Option<KvIter>,
    faults: Faults,
}

impl Iterator for FaultyIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        let inner = self.inner.as_mut()?;
        if self.faults.decide(FaultOp::ScanNext, 0).is_some() {
            self.inner = None;
            return Some(Err(injected(FaultOp::ScanNext, "before the operation")));
        }
        let item = inner.next();
        if matches!(item, Some(Err(_)) | None) {
            self.inner = None;
        }
        item
    }
}

/// A [`Changelog`] that fails operations as its [`Faults`] handle says, and otherwise passes
/// every call to the log it wraps.
#[derive(Debug)]
pub struct FaultyLog {
    inner: Arc<dyn Changelog>,
    faults: Faults,
}

impl FaultyLog {
    /// Wraps `inner`; `faults` decides which calls fail.
    pub fn new(inner: Arc<dyn Changelog>, faults: Faults) -> Self {
        FaultyLog { inner, faults }
    }

    /// The wrapped log.
    pub fn inner(&self) -> &Arc<dyn Changelog> {
        &self.inner
    }
}

impl Changelog for FaultyLog {
    fn topic(&self) -> &str {
        self.inner.topic()
    }

    fn partition(&self) -> u32 {
        self.inner.partition()
    }

    fn max_record_len(&self) -> usize {
        self.inner.max_record_len()
    }

    /// A torn append writes a prefix of `ops` without closing the commit (`Open` framing),
    /// as a writer that died before the commit marker would.
    fn append_framed(&self, ops: &[BatchOp], framing: Framing) -> Result<Range<u64>> {
        // A commit's marker counts as one more record, so a torn commit may lack only it.
        let records = ops.len() + usize::from(framing == Framing::Commit);
        match self.faults.decide(FaultOp::Append, records) {
            None => self.inner.append_framed(ops, framing),
            Some(Strike::Before) => Err(injected(FaultOp::Append, "before the operation")),
            Some(Strike::After) => {
                let _completed = self.inner.append_framed(ops, framing);
                Err(injected(FaultOp::Append, "after the operation"))
            }
            Some(Strike::Torn(kept)) => {
                let torn = match framing {
                    Framing::Unframed => Framing::Unframed,
                    Framing::Open | Framing::Commit => Framing::Open,
                };
                let _completed = self.inner.append_framed(&ops[..kept.min(ops.len())], torn);
                Err(injected(FaultOp::Append, "after part of the records"))
            }
        }
    }

    fn sync(&self) -> Result<()> {
        guarded(&self.faults, FaultOp::Sync, || self.inner.sync())
    }

    fn read(&self, from: u64, max_records: usize) -> Result<Vec<ChangelogRecord>> {
        guarded(&self.faults, FaultOp::Read, || {
            self.inner.read(from, max_records)
        })
    }

    fn start_offset(&self) -> Result<u64> {
        guarded(&self.faults, FaultOp::StartOffset, || {
            self.inner.start_offset()
        })
    }

    fn end_offset(&self) -> Result<u64> {
        guarded(&self.faults, FaultOp::EndOffset, || self.inner.end_offset())
    }
}

#[cfg(test)]
mod tests {
    use statestore_changelog::MemoryLog;

    use super::*;

    fn ops(n: u8) -> Vec<BatchOp> {
        (0..n).map(|i| BatchOp::Delete { key: vec![i] }).collect()
    }

    #[test]
    fn each_timing_leaves_what_it_says_in_the_log() {
        let memory = MemoryLog::new("t", 0);
        let faults = Faults::new(7);
        let log = FaultyLog::new(Arc::new(memory.clone()), faults.clone());
        faults.set_timing(FaultTiming::Before);
        faults.fail_nth(1);
        assert!(log.append(&ops(4)).is_err());
        assert_eq!(memory.len(), 0);
        faults.set_timing(FaultTiming::After);
        faults.fail_nth(1);
        assert!(log.append(&ops(4)).is_err());
        assert_eq!(memory.len(), 4);
        faults.set_timing(FaultTiming::Torn);
        for _ in 0..20 {
            let before = memory.len();
            faults.fail_nth(1);
            assert!(log.append(&ops(4)).is_err());
            assert!(
                memory.len() - before < 4,
                "a torn append wrote every record"
            );
        }
        assert_eq!((faults.injected(), faults.injected_after()), (22, 1));
        assert_eq!(faults.injected_torn(), 20);
    }

    #[test]
    fn rate_and_op_filter() {
        let faults = Faults::new(1);
        let log = FaultyLog::new(Arc::new(MemoryLog::new("t", 0)), faults.clone());
        faults.set_rate(0.5);
        let failed = (0..1000).filter(|_| log.end_offset().is_err()).count();
        assert!(
            (400..600).contains(&failed),
            "{failed} of 1000 failed at rate 0.5"
        );
        faults.set_ops(&[FaultOp::Append]);
        assert!((0..100).all(|_| log.end_offset().is_ok()));
        faults.off();
        assert!((0..100).all(|_| log.append(&ops(1)).is_ok()));
        let err = {
            faults.set_rate(1.0);
            log.append(&ops(1)).unwrap_err()
        };
        assert_eq!(err.kind(), store_api::ErrorKind::Io);
        assert!(err.to_string().contains(INJECTED), "{err}");
    }
}
