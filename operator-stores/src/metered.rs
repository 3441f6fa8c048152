//! [`MeteredStore`]: per-operation counts and latencies of any store, through the `metrics`
//! facade (Kafka Streams' `MeteredKeyValueStore`).

use std::cell::Cell;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use metrics::{Counter, Histogram, Label};
use statestore_changelog::RestoreListener;
use store_api::{BulkLoader, Capabilities, KeyValueStore, KvIter, KvPair, Result, WriteBatch};

/// The counter of calls, labelled `store`, `backend` and `operation`.
pub const OPERATIONS_TOTAL: &str = "statestore_operations_total";
/// The histogram of call latencies in seconds, labelled as [`OPERATIONS_TOTAL`]. For a range
/// or prefix scan it spans from the call to the drop of its iterator, as in Kafka Streams.
pub const OPERATION_SECONDS: &str = "statestore_operation_seconds";
/// The counter of operations written through `write` batches, labelled `store`, `backend`.
pub const BATCH_RECORDS_TOTAL: &str = "statestore_batch_records_total";
/// The counter of changelog records restored, labelled `store`.
pub const RESTORE_RECORDS_TOTAL: &str = "statestore_restore_records_total";
/// The histogram of whole restores' durations in seconds, labelled `store`.
pub const RESTORE_SECONDS: &str = "statestore_restore_seconds";

/// The operations a [`MeteredStore`] measures; the `operation` label is [`Operation::label`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `get`.
    Get,
    /// `put`.
    Put,
    /// `put_if_absent`.
    PutIfAbsent,
    /// `delete` and `delete_range`.
    Delete,
    /// `write` of a batch.
    Write,
    /// `range`, `reverse_range` and the prefix scans.
    Range,
    /// `flush`, which for a `LoggedStore` is its commit.
    Flush,
}

impl Operation {
    /// Every operation, in the order of their handles.
    pub const ALL: [Operation; 7] = [
        Operation::Get,
        Operation::Put,
        Operation::PutIfAbsent,
        Operation::Delete,
        Operation::Write,
        Operation::Range,
        Operation::Flush,
    ];

    /// The value of the `operation` label.
    pub fn label(self) -> &'static str {
        match self {
            Operation::Get => "get",
            Operation::Put => "put",
            Operation::PutIfAbsent => "put_if_absent",
            Operation::Delete => "delete",
            Operation::Write => "write",
            Operation::Range => "range",
            Operation::Flush => "flush",
        }
    }
}

#[derive(Clone)]
struct OpMetrics {
    calls: Counter,
    seconds: Histogram,
}

/// What a [`MeteredStore`] records. Counts are exact at every level. A timed call costs two
/// clock reads and a histogram record, with a Prometheus recorder some 130 ns in the bench,
/// more than half of an in-memory `get`, so by default only a sample of calls is timed.
///
/// Kafka Streams records store latencies only at its `DEBUG` recording level; its default
/// `INFO` level records none. [`RecordingLevel::default`] sits between the two: a latency
/// distribution from a sample of [`DEFAULT_LATENCY_SAMPLE`] calls is as good as one from all
/// of them for a steady workload, at a share of the cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordingLevel {
    /// Exact per-operation counts; no clock read.
    Counts,
    /// Exact counts and the latency of a random one call in `n`, `n` rounded up to a power of
    /// two: `1` times every call, `0` none.
    SampledLatency(u32),
    /// Exact counts and every call's latency (Kafka Streams' `DEBUG` level).
    EveryLatency,
}

/// The sample of [`RecordingLevel::default`]: one call in 64 is timed.
pub const DEFAULT_LATENCY_SAMPLE: u32 = 64;

impl Default for RecordingLevel {
    fn default() -> Self {
        RecordingLevel::SampledLatency(DEFAULT_LATENCY_SAMPLE)
    }
}

/// A [`RecordingLevel`] resolved for the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No recorder: the handles are no-ops, so nothing is done at all.
    Off,
    Counts,
    /// Time the calls for which [`sample`] with this mask is true.
    Sampled {
        mask: u32,
    },
    Every,
}

impl From<RecordingLevel> for Mode {
    fn from(level: RecordingLevel) -> Self {
        match level {
            RecordingLevel::Counts => Mode::Counts,
            RecordingLevel::EveryLatency => Mode::Every,
            RecordingLevel::SampledLatency(0) => Mode::Counts,
            RecordingLevel::SampledLatency(1) => Mode::Every,
            RecordingLevel::SampledLatency(n) => Mode::Sampled {
                mask: n.checked_next_power_of_two().unwrap_or(1 << 31) - 1,
            },
        }
    }
}

/// Whether the `metrics` facade would hand out live handles now.
///
/// metrics 0.24 has no call for this: `Counter` and `Histogram` keep whether they are no-ops
/// private, and the no-op recorder `with_recorder` falls back to when none is installed is a
/// private static. That fallback, `NoopRecorder`, is a unit struct, while an exporter's recorder
/// holds its registry; so a zero-sized recorder is taken for no recorder. A zero-sized recorder
/// of the program's own is missed: [`MeteredStore::with_recording_level`] overrides this.
fn recorder_installed() -> bool {
    metrics::with_recorder(|recorder| std::mem::size_of_val(recorder) != 0)
}

/// A [`KeyValueStore`] that counts every call to the wrapped store and times some of them,
/// through the [`metrics`] facade, so any exporter (Prometheus, StatsD, ...) shows them.
///
/// Handles are registered once, when the store is made, as the facade recommends: install
/// the recorder before making metered stores. What is recorded is a [`RecordingLevel`]:
/// by default exact counts and the latency of one call in [`DEFAULT_LATENCY_SAMPLE`]. A store
/// made while no recorder is installed records nothing (its handles would be the facade's
/// no-ops), so it costs one branch per call and no clock read.
///
/// Layout, range costs and expiry are the wrapped store's; a scan's latency runs from the call
/// to the drop of its iterator.
///
/// Overhead on a `get` of a present key, from the criterion bench
/// `operator-stores/benches/metered.rs`, is in `docs/operator-stores.md`.
///
/// ```
/// use std::sync::Arc;
/// use statestore_memory::{Config, MemoryStore};
/// use statestore_operator_stores::MeteredStore;
/// use store_api::KeyValueStore;
///
/// let store = MeteredStore::new(Arc::new(MemoryStore::new(Config::default())), "counts");
/// // Counted as statestore_operations_total{operation="put",store="counts",..} when a
/// // recorder was installed before the store was made; here none was, so nothing is.
/// store.put(b"k", b"v")?;
/// assert_eq!(store.recording_level(), None);
/// # Ok::<(), store_api::Error>(())
/// ```
pub struct MeteredStore {
    inner: Arc<dyn KeyValueStore>,
    store_name: String,
    ops: [OpMetrics; Operation::ALL.len()],
    batch_records: Counter,
    mode: Mode,
}

thread_local! {
    /// An xorshift generator per thread, so sampling costs no shared atomic, and which calls
    /// are timed never falls in step with a workload's own period: with a counter, a loop of
    /// alternating gets and puts would have only one of the two ever timed.
    static SAMPLE_STATE: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) };
}

/// True for a random one in `mask + 1` calls on this thread.
fn sample(mask: u32) -> bool {
    SAMPLE_STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        // The high half: xorshift's low bits are its weakest.
        ((x >> 32) as u32) & mask == 0
    })
}

impl MeteredStore {
    /// Meters `inner` under the label `store = store_name` at the default [`RecordingLevel`],
    /// or not at all when no recorder is installed.
    pub fn new(inner: Arc<dyn KeyValueStore>, store_name: &str) -> Self {
        let labels = [
            Label::new("store", store_name.to_string()),
            Label::new("backend", inner.name().to_string()),
        ];
        let ops = Operation::ALL.map(|op| {
            let mut labels = labels.to_vec();
            labels.push(Label::new("operation", op.label()));
            OpMetrics {
                calls: metrics::counter!(OPERATIONS_TOTAL, labels.clone()),
                seconds: metrics::histogram!(OPERATION_SECONDS, labels),
            }
        });
        let batch_records = metrics::counter!(BATCH_RECORDS_TOTAL, labels.to_vec());
        let mode = if recorder_installed() {
            RecordingLevel::default().into()
        } else {
            Mode::Off
        };
        MeteredStore {
            inner,
            store_name: store_name.to_string(),
            ops,
            batch_records,
            mode,
        }
    }

    /// Records at `level`, whether or not a recorder was detected when the store was made.
    pub fn with_recording_level(mut self, level: RecordingLevel) -> Self {
        self.mode = level.into();
        self
    }

    /// What the store records; `None` when it records nothing because no recorder was
    /// installed when it was made.
    pub fn recording_level(&self) -> Option<RecordingLevel> {
        match self.mode {
            Mode::Off => None,
            Mode::Counts => Some(RecordingLevel::Counts),
            Mode::Sampled { mask } => Some(RecordingLevel::SampledLatency(mask + 1)),
            Mode::Every => Some(RecordingLevel::EveryLatency),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.inner
    }

    /// The `store` label.
    pub fn store_name(&self) -> &str {
        &self.store_name
    }

    /// Counts a call of `op` and says whether to time it.
    #[inline]
    fn count(&self, op: Operation) -> Option<&OpMetrics> {
        let metrics = &self.ops[op as usize];
        metrics.calls.increment(1);
        match self.mode {
            Mode::Every => Some(metrics),
            Mode::Sampled { mask } => sample(mask).then_some(metrics),
            Mode::Counts | Mode::Off => None,
        }
    }

    /// Runs `call`, counting it and, when sampled, timing it.
    #[inline]
    fn measure<T>(&self, op: Operation, call: impl FnOnce() -> T) -> T {
        if self.mode == Mode::Off {
            return call();
        }
        let Some(metrics) = self.count(op) else {
            return call();
        };
        let start = Instant::now();
        let result = call();
        metrics.seconds.record(start.elapsed().as_secs_f64());
        result
    }

    fn measure_scan(&self, scan: impl FnOnce() -> Result<KvIter>) -> Result<KvIter> {
        if self.mode == Mode::Off {
            return scan();
        }
        let Some(metrics) = self.count(Operation::Range) else {
            return scan();
        };
        let start = Instant::now();
        let iter = scan()?;
        Ok(Box::new(TimedIter {
            inner: iter,
            start,
            seconds: metrics.seconds.clone(),
        }))
    }
}

/// Records the time from the scan call to its iterator's drop.
struct TimedIter {
    inner: KvIter,
    start: Instant,
    seconds: Histogram,
}

impl Iterator for TimedIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next()
    }
}

impl Drop for TimedIter {
    fn drop(&mut self) {
        self.seconds.record(self.start.elapsed().as_secs_f64());
    }
}

impl KeyValueStore for MeteredStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.measure(Operation::Get, || self.inner.get(key))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.measure(Operation::Put, || self.inner.put(key, value))
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.measure(Operation::PutIfAbsent, || {
            self.inner.put_if_absent(key, value)
        })
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.measure(Operation::Delete, || self.inner.delete(key))
    }

    /// The wrapped store's own `delete_range` (a native range deletion where it has one),
    /// counted and timed as one `delete`.
    fn delete_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<()> {
        self.measure(Operation::Delete, || self.inner.delete_range(from, to))
    }

    /// The wrapped store's loader, unmeasured: a restore reports its own progress.
    fn bulk_loader(&self) -> Result<Option<Box<dyn BulkLoader + '_>>> {
        self.inner.bulk_loader()
    }

    /// The wrapped store's checkpoints, unmeasured.
    fn checkpoints(&self) -> Option<&dyn store_api::Checkpoints> {
        self.inner.checkpoints()
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        if self.mode != Mode::Off {
            self.batch_records.increment(batch.len() as u64);
        }
        self.measure(Operation::Write, || self.inner.write(batch))
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.measure_scan(|| self.inner.range(from, to))
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.measure_scan(|| self.inner.reverse_range(from, to))
    }

    fn prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        self.measure_scan(|| self.inner.prefix_scan(prefix))
    }

    fn reverse_prefix_scan(&self, prefix: &[u8]) -> Result<KvIter> {
        self.measure_scan(|| self.inner.reverse_prefix_scan(prefix))
    }

    fn approximate_len(&self) -> Result<u64> {
        self.inner.approximate_len()
    }

    fn flush(&self) -> Result<()> {
        self.measure(Operation::Flush, || self.inner.flush())
    }

    fn close(&self) -> Result<()> {
        self.inner.close()
    }
}

impl fmt::Debug for MeteredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeteredStore")
            .field("inner", &self.inner)
            .field("store_name", &self.store_name)
            .field("recording_level", &self.recording_level())
            .finish_non_exhaustive()
    }
}

/// A [`RestoreListener`] that counts restored changelog records and times the restore, for
/// `LoggedStore::open_with_listener`.
#[derive(Debug)]
pub struct MeteredRestoreListener {
    records: Counter,
    seconds: Histogram,
    started: Option<Instant>,
}

impl MeteredRestoreListener {
    /// A listener recording under the label `store = store_name`.
    pub fn new(store_name: &str) -> Self {
        let labels = [Label::new("store", store_name.to_string())];
        MeteredRestoreListener {
            records: metrics::counter!(RESTORE_RECORDS_TOTAL, labels.to_vec()),
            seconds: metrics::histogram!(RESTORE_SECONDS, labels.to_vec()),
            started: None,
        }
    }
}

impl RestoreListener for MeteredRestoreListener {
    fn on_start(&mut self, _topic: &str, _partition: u32, _start: u64, _end: u64) {
        self.started = Some(Instant::now());
    }

    fn on_batch(&mut self, _topic: &str, _partition: u32, _batch_end: u64, records: usize) {
        self.records.increment(records as u64);
    }

    fn on_end(&mut self, _topic: &str, _partition: u32, _total: u64) {
        if let Some(started) = self.started.take() {
            self.seconds.record(started.elapsed().as_secs_f64());
        }
    }
}
