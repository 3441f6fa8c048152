//! [`MeteredStore`]: per-operation counts and latencies of any store, through the `metrics`
//! facade (Kafka Streams' `MeteredKeyValueStore`).

use std::cell::Cell;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use metrics::{Counter, Histogram, Label};
use statestore_changelog::RestoreListener;
use store_api::{Capabilities, KeyValueStore, KvIter, KvPair, Result, WriteBatch};

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
    /// `delete`.
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

/// A [`KeyValueStore`] that counts every call to the wrapped store and times them, through
/// the [`metrics`] facade, so any exporter (Prometheus, StatsD, ...) shows them.
///
/// Handles are registered when the store is made, as the facade recommends: install the
/// recorder before making metered stores. Without a recorder the counts are no-ops, and a
/// latency costs two clock reads when it is sampled; [`with_latency_sampling`](Self::with_latency_sampling)
/// times one call in `n` (counts stay exact), or none. Measured overheads are in the bench
/// `benches/benches/metered.rs`.
///
/// ```
/// use std::sync::Arc;
/// use statestore_memory::{Config, MemoryStore};
/// use statestore_operator_stores::MeteredStore;
/// use store_api::KeyValueStore;
///
/// let store = MeteredStore::new(Arc::new(MemoryStore::new(Config::default())), "counts");
/// store.put(b"k", b"v")?; // counted as statestore_operations_total{operation="put",store="counts",..}
/// # Ok::<(), store_api::Error>(())
/// ```
pub struct MeteredStore {
    inner: Arc<dyn KeyValueStore>,
    store_name: String,
    ops: [OpMetrics; Operation::ALL.len()],
    batch_records: Counter,
    /// Time one call in `sample_every` (a power of two); 0 times none.
    sample_every: u32,
}

thread_local! {
    /// Per thread, so sampling costs no shared atomic.
    static SAMPLE_TICK: Cell<u32> = const { Cell::new(0) };
}

impl MeteredStore {
    /// Meters `inner` under the label `store = store_name`, timing every call.
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
        MeteredStore {
            inner,
            store_name: store_name.to_string(),
            ops,
            batch_records,
            sample_every: 1,
        }
    }

    /// Times one call in `every` (rounded up to a power of two) instead of every call; `0`
    /// times none. Counts stay exact. For stores whose calls take well under a microsecond,
    /// where two clock reads per call are a visible share.
    pub fn with_latency_sampling(mut self, every: u32) -> Self {
        self.sample_every = if every == 0 {
            0
        } else {
            every.checked_next_power_of_two().unwrap_or(1 << 31)
        };
        self
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn KeyValueStore> {
        &self.inner
    }

    /// The `store` label.
    pub fn store_name(&self) -> &str {
        &self.store_name
    }

    fn metrics(&self, op: Operation) -> &OpMetrics {
        &self.ops[op as usize]
    }

    /// Whether to time this call.
    fn sampled(&self) -> bool {
        match self.sample_every {
            0 => false,
            1 => true,
            every => SAMPLE_TICK.with(|tick| {
                let next = tick.get().wrapping_add(1);
                tick.set(next);
                next & (every - 1) == 0
            }),
        }
    }

    /// Runs `call`, counting it and, when sampled, timing it.
    fn measure<T>(&self, op: Operation, call: impl FnOnce() -> T) -> T {
        let metrics = self.metrics(op);
        metrics.calls.increment(1);
        if !self.sampled() {
            return call();
        }
        let start = Instant::now();
        let result = call();
        metrics.seconds.record(start.elapsed().as_secs_f64());
        result
    }

    fn measure_scan(&self, scan: impl FnOnce() -> Result<KvIter>) -> Result<KvIter> {
        let metrics = self.metrics(Operation::Range);
        metrics.calls.increment(1);
        let start = self.sampled().then(Instant::now);
        let iter = scan()?;
        Ok(match start {
            Some(start) => Box::new(TimedIter {
                inner: iter,
                start,
                seconds: metrics.seconds.clone(),
            }),
            None => iter,
        })
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

    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.batch_records.increment(batch.len() as u64);
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
            .field("sample_every", &self.sample_every)
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
