//! Cases of the window store.

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, prop_oneof};
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use statestore_changelog::Changelog;
use store_api::{ErrorKind, KeyValueStore};

use super::support::{check, collect, fail, run_model};
use super::{Mode, OperatorFixture, StoreFactory};
use crate::window::{
    DropCounts, PutOutcome, TimeWindows, WindowEntry, WindowStore, WindowStoreConfig,
};

/// Retention and segments of the model test: six live segments at most.
const RETENTION: i64 = 50;
const INTERVAL: i64 = 10;

fn config(retain_duplicates: bool) -> WindowStoreConfig {
    WindowStoreConfig::new(RETENTION)
        .with_segment_interval(INTERVAL)
        .with_retain_duplicates(retain_duplicates)
}

fn windows() -> TimeWindows {
    TimeWindows::hopping(10, 5)
        .and_then(|w| w.with_grace(5))
        .expect("valid windows")
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, u8, i64),
    Remove(Vec<u8>, i64),
    Aggregate(Vec<u8>, i64),
    Fetch(Vec<u8>, i64, i64),
    BackwardFetch(Vec<u8>, i64, i64),
    FetchAll(i64, i64),
    BackwardFetchAll(i64, i64),
    FetchKeyRange(Option<Vec<u8>>, Option<Vec<u8>>, i64, i64),
    BackwardFetchKeyRange(Option<Vec<u8>>, Option<Vec<u8>>, i64, i64),
    Commit,
    Reopen,
}

/// Keys that prefix one another and hold 0x00 and 0xFF, to test the key escaping.
fn key() -> impl Strategy<Value = Vec<u8>> {
    select(vec![
        &b""[..],
        b"\0",
        b"\0\0",
        b"a",
        b"a\0",
        b"a\xff",
        b"ab",
    ])
    .prop_map(<[u8]>::to_vec)
}

/// A bound of a key range: a key, or none (Kafka Streams' `null`).
fn key_bound() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::weighted(0.8, key())
}

/// Times relative to the stream time: most live, some expired or late, a few later.
fn time() -> impl Strategy<Value = i64> {
    -60_i64..12
}

impl Op {
    /// The operation with its times made absolute, relative to `stream_time`.
    fn at(&self, stream_time: Option<i64>) -> Op {
        let t = |delta: &i64| stream_time.unwrap_or(0) + delta;
        match self {
            Op::Put(k, v, d) => Op::Put(k.clone(), *v, t(d)),
            Op::Remove(k, d) => Op::Remove(k.clone(), t(d)),
            Op::Aggregate(k, d) => Op::Aggregate(k.clone(), t(d)),
            Op::Fetch(k, a, b) => Op::Fetch(k.clone(), t(a), t(b)),
            Op::BackwardFetch(k, a, b) => Op::BackwardFetch(k.clone(), t(a), t(b)),
            Op::FetchAll(a, b) => Op::FetchAll(t(a), t(b)),
            Op::BackwardFetchAll(a, b) => Op::BackwardFetchAll(t(a), t(b)),
            Op::FetchKeyRange(k, l, a, b) => Op::FetchKeyRange(k.clone(), l.clone(), t(a), t(b)),
            Op::BackwardFetchKeyRange(k, l, a, b) => {
                Op::BackwardFetchKeyRange(k.clone(), l.clone(), t(a), t(b))
            }
            other => other.clone(),
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (key(), 0_u8..8, time()).prop_map(|(k, v, t)| Op::Put(k, v, t)),
        1 => (key(), time()).prop_map(|(k, t)| Op::Remove(k, t)),
        3 => (key(), time()).prop_map(|(k, t)| Op::Aggregate(k, t)),
        2 => (key(), time(), time()).prop_map(|(k, a, b)| Op::Fetch(k, a, b)),
        1 => (key(), time(), time()).prop_map(|(k, a, b)| Op::BackwardFetch(k, a, b)),
        1 => (time(), time()).prop_map(|(a, b)| Op::FetchAll(a, b)),
        1 => (time(), time()).prop_map(|(a, b)| Op::BackwardFetchAll(a, b)),
        2 => (key_bound(), key_bound(), time(), time())
            .prop_map(|(k, l, a, b)| Op::FetchKeyRange(k, l, a, b)),
        1 => (key_bound(), key_bound(), time(), time())
            .prop_map(|(k, l, a, b)| Op::BackwardFetchKeyRange(k, l, a, b)),
        1 => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

/// The window store as a map of `(key, start)` to values in put order, plus a stream time.
#[derive(Debug, Default)]
struct Model {
    windows: BTreeMap<(Vec<u8>, i64), Vec<Vec<u8>>>,
    /// The latest window start written.
    stream_time: Option<i64>,
    /// The latest record time aggregated, which closes windows.
    record_time: Option<i64>,
    dropped: DropCounts,
    retain_duplicates: bool,
}

impl Model {
    fn min_live(&self) -> i64 {
        self.stream_time.map_or(i64::MIN, |t| t - RETENTION + 1)
    }

    fn advance(&mut self, to: i64) {
        self.stream_time = Some(self.stream_time.map_or(to, |t| t.max(to)));
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>, start: i64) -> PutOutcome {
        self.advance(start);
        if start < self.min_live() {
            self.dropped.expired += 1;
            return PutOutcome::Expired;
        }
        let values = self.windows.entry((key.to_vec(), start)).or_default();
        if !self.retain_duplicates {
            values.clear();
        }
        values.push(value);
        PutOutcome::Written(1)
    }

    fn live(&self, key: &[u8], start: i64) -> Option<&Vec<Vec<u8>>> {
        (start >= self.min_live())
            .then(|| self.windows.get(&(key.to_vec(), start)))
            .flatten()
    }

    /// Kafka Streams' aggregation: a record before 0 is in no window, dropped as late.
    fn aggregate(&mut self, key: &[u8], ts: i64) -> PutOutcome {
        if ts < 0 {
            self.dropped.late += 1;
            return PutOutcome::Late;
        }
        let now = self.record_time.map_or(ts, |t| t.max(ts));
        self.record_time = Some(now);
        let mut written = 0;
        for start in windows().starts_for(ts) {
            if start + 10 + 5 <= now {
                continue;
            }
            let count = self.live(key, start).map_or(0, |v| v[0][0]);
            if let PutOutcome::Written(_) = self.put(key, vec![count.wrapping_add(1)], start) {
                written += 1;
            }
        }
        if written == 0 {
            self.dropped.late += 1;
            return PutOutcome::Late;
        }
        PutOutcome::Written(written)
    }

    fn fetch(&self, key: &[u8], from: i64, to: i64) -> Vec<(i64, Vec<u8>)> {
        let from = from.max(self.min_live());
        self.windows
            .iter()
            .filter(|((k, start), _)| k == key && *start >= from && *start <= to)
            .flat_map(|((_, start), values)| values.iter().map(|v| (*start, v.clone())))
            .collect()
    }

    fn fetch_all(&self, from: i64, to: i64) -> Vec<WindowEntry> {
        self.fetch_key_range(None, None, from, to)
    }

    /// The windows of keys within `[low, high]` (`None`: unbounded) by segment, key, start.
    fn fetch_key_range(
        &self,
        low: Option<&[u8]>,
        high: Option<&[u8]>,
        from: i64,
        to: i64,
    ) -> Vec<WindowEntry> {
        let from = from.max(self.min_live());
        let in_keys = |key: &[u8]| low.is_none_or(|l| key >= l) && high.is_none_or(|h| key <= h);
        let mut all: Vec<_> = self
            .windows
            .iter()
            .filter(|((key, start), _)| in_keys(key) && *start >= from && *start <= to)
            .flat_map(|((key, start), values)| {
                values.iter().map(|value| WindowEntry {
                    key: key.clone(),
                    start: *start,
                    value: value.clone(),
                })
            })
            .collect();
        // Stable: duplicates keep their put order.
        all.sort_by_key(|e| (e.start.div_euclid(INTERVAL), e.key.clone(), e.start));
        all
    }
}

fn open(fx: &OperatorFixture<'_>, retain_duplicates: bool) -> WindowStore {
    WindowStore::open(fx.store(), config(retain_duplicates))
        .unwrap_or_else(|err| panic!("opening the window store failed: {err}"))
}

/// Applies one operation to the store and the model, checking every answer.
fn step(
    fx: &OperatorFixture<'_>,
    store: &WindowStore,
    model: &mut Model,
    op: &Op,
) -> Result<(), TestCaseError> {
    match &op.at(model.stream_time) {
        Op::Put(k, v, t) => {
            let got = store.put(k, &[*v], *t).map_err(fail)?;
            check("put", got, model.put(k, vec![*v], *t))?;
        }
        Op::Remove(k, t) => {
            store.remove(k, *t).map_err(fail)?;
            model.windows.remove(&(k.clone(), *t));
        }
        Op::Aggregate(k, t) => {
            let got = store.aggregate(k, *t, &windows(), |current| {
                vec![current.map_or(0, |v| v[0]).wrapping_add(1)]
            });
            if model.retain_duplicates {
                let kind = got.err().map(|err| err.kind());
                return check(
                    "aggregate with duplicates",
                    kind,
                    Some(ErrorKind::Unsupported),
                );
            }
            check("aggregate", got.map_err(fail)?, model.aggregate(k, *t))?;
        }
        Op::Fetch(k, a, b) => check(
            "fetch",
            collect(store.fetch(k, *a, *b))?,
            model.fetch(k, *a, *b),
        )?,
        Op::BackwardFetch(k, a, b) => {
            let mut want = model.fetch(k, *a, *b);
            want.reverse();
            check(
                "backward_fetch",
                collect(store.backward_fetch(k, *a, *b))?,
                want,
            )?;
        }
        Op::FetchAll(a, b) => {
            check(
                "fetch_all",
                collect(store.fetch_all(*a, *b))?,
                model.fetch_all(*a, *b),
            )?;
        }
        Op::BackwardFetchAll(a, b) => {
            let mut want = model.fetch_all(*a, *b);
            want.reverse();
            check(
                "backward_fetch_all",
                collect(store.backward_fetch_all(*a, *b))?,
                want,
            )?;
        }
        Op::FetchKeyRange(k, l, a, b) => check(
            "fetch_key_range",
            collect(store.fetch_key_range(k.as_deref(), l.as_deref(), *a, *b))?,
            model.fetch_key_range(k.as_deref(), l.as_deref(), *a, *b),
        )?,
        Op::BackwardFetchKeyRange(k, l, a, b) => {
            let mut want = model.fetch_key_range(k.as_deref(), l.as_deref(), *a, *b);
            want.reverse();
            check(
                "backward_fetch_key_range",
                collect(store.backward_fetch_key_range(k.as_deref(), l.as_deref(), *a, *b))?,
                want,
            )?;
        }
        Op::Commit => fx.commit(),
        Op::Reopen => unreachable!("the model test reopens the store itself"),
    }
    check("stream time", store.stream_time(), model.stream_time)?;
    check(
        "aggregated time",
        store.aggregated_time(),
        model.record_time,
    )
}

fn reopened(fx: &mut OperatorFixture<'_>, store: WindowStore, retain: bool) -> WindowStore {
    drop(store);
    fx.reopen();
    open(fx, retain)
}

/// Random puts, removes, aggregates, fetches (of one key, key ranges with and without
/// bounds, all keys), commits and reopens against a `BTreeMap` model, with and without retained duplicates: same answers, same stream time, same drop
/// counts.
pub fn model(factory: &dyn StoreFactory, mode: Mode) {
    let strategy = (proptest::bool::weighted(0.3), vec(op(), 1..60));
    run_model(
        "window store",
        mode,
        strategy,
        |(retain_duplicates, ops)| {
            let mut fx = OperatorFixture::new(factory, mode);
            let mut store = open(&fx, retain_duplicates);
            let mut model = Model {
                retain_duplicates,
                ..Model::default()
            };
            for op in &ops {
                if let Op::Reopen = op {
                    check("dropped before reopen", store.dropped(), model.dropped)?;
                    store = reopened(&mut fx, store, retain_duplicates);
                    model.dropped = DropCounts::default();
                } else {
                    step(&fx, &store, &mut model, op)?;
                }
            }
            check("dropped", store.dropped(), model.dropped)
        },
    );
}

fn written(outcome: store_api::Result<PutOutcome>) -> PutOutcome {
    outcome.unwrap_or_else(|err| panic!("a window store write failed: {err}"))
}

fn fetched<T>(
    iter: store_api::Result<Box<dyn Iterator<Item = store_api::Result<T>> + Send>>,
) -> Vec<T> {
    collect(iter).unwrap_or_else(|err| panic!("a window fetch failed: {err}"))
}

fn stored_keys(store: &dyn KeyValueStore) -> usize {
    store
        .prefix_scan(b"")
        .and_then(|iter| iter.collect::<store_api::Result<Vec<_>>>())
        .unwrap_or_else(|err| panic!("scanning the underlying store failed: {err}"))
        .len()
}

/// Expiry deletes whole segments from the underlying store, in the write that moves the
/// stream time, and refuses puts of expired windows with a counted reason.
pub fn expiry_drops_whole_segments(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = WindowStore::open(
        fx.store(),
        WindowStoreConfig::new(100).with_segment_interval(10),
    )
    .expect("open");
    // An application key beside the windows, which expiry must leave alone.
    fx.store().put(b"\x00position", b"7").expect("put");
    for start in 0..100 {
        assert_eq!(
            written(store.put(b"k", b"v", start)),
            PutOutcome::Written(1)
        );
    }
    // 100 windows, the stream time and the application key.
    assert_eq!(stored_keys(fx.store().as_ref()), 102);
    // Stream time 125: windows from 26 on are live; segments 0 and 1 hold nothing live.
    assert_eq!(written(store.put(b"k", b"v", 125)), PutOutcome::Written(1));
    assert_eq!(stored_keys(fx.store().as_ref()), 102 - 20 + 1);
    assert_eq!(
        fx.store().get(b"\x00position").ok(),
        Some(Some(b"7".to_vec()))
    );
    assert_eq!(
        fetched(store.fetch(b"k", 0, 35)).first().map(|(t, _)| *t),
        Some(26)
    );
    assert_eq!(written(store.put(b"k", b"v", 25)), PutOutcome::Expired);
    // Segment 2 still holds 20..25, invisible to fetches until it is dropped whole.
    assert_eq!(fetched(store.fetch_all(0, 25)), Vec::new());
    assert_eq!(
        store.dropped(),
        DropCounts {
            expired: 1,
            late: 0
        }
    );
}

/// Expiry through a changelogged store logs one tombstone per expired entry (a compacted
/// topic compacts per key, so a range deletion could not be logged), in the commit of the
/// write that moved the stream time, beside that write's own records; a store restored from
/// the changelog holds exactly the live entries. Plain stores skip the log checks.
pub fn expiry_logs_a_tombstone_per_key(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = WindowStore::open(
        fx.store(),
        WindowStoreConfig::new(100).with_segment_interval(10),
    )
    .expect("open");
    for start in 0..100 {
        assert_eq!(
            written(store.put(b"k", b"v", start)),
            PutOutcome::Written(1)
        );
    }
    fx.commit();
    let all = |store: &dyn KeyValueStore| -> Vec<(Vec<u8>, Vec<u8>)> {
        collect(store.prefix_scan(b"")).expect("scanning the underlying store")
    };
    let stored = all(fx.store().as_ref());
    let before = fx.changelog().end_offset().expect("end offset");
    // Stream time 125 expires segments 0 and 1: the windows starting at 0..20.
    assert_eq!(written(store.put(b"k", b"v", 125)), PutOutcome::Written(1));
    fx.commit();
    let live = all(fx.store().as_ref());
    assert_eq!(live.len(), 101 - 20 + 1, "the stream time and 81 windows");
    let expired: Vec<Vec<u8>> = stored
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| !live.iter().any(|(kept, _)| kept == key))
        .collect();
    assert_eq!(expired.len(), 20, "the windows starting at 0..20");
    drop(store);
    if mode != Mode::Logged {
        return;
    }
    let records = fx
        .changelog()
        .read(before, usize::MAX)
        .expect("reading the changelog");
    let tombstones: Vec<Vec<u8>> = records
        .iter()
        .filter(|record| record.op.value().is_none())
        .map(|record| record.op.key().to_vec())
        .collect();
    assert_eq!(
        tombstones, expired,
        "one tombstone per expired window, in key order"
    );
    let markers = records
        .iter()
        .filter(|record| record.kind == statestore_changelog::RecordKind::CommitMarker)
        .count();
    assert_eq!(
        markers, 1,
        "the expiry and the put that caused it are one commit"
    );
    assert_eq!(
        records.len(),
        20 + 2 + 1,
        "tombstones, the stream time, the window, a marker"
    );
    fx.reopen();
    assert_eq!(
        all(fx.store().as_ref()),
        live,
        "restored from the changelog"
    );
}

/// Windows of keys that prefix one another and hold 0x00 stay apart, at negative times too,
/// in both directions.
pub fn fetch_follows_time_and_key_order(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = WindowStore::open(fx.store(), config(false)).expect("open");
    for (key, start) in [
        (&b"a"[..], -15),
        (b"a\0", -10),
        (b"a", 5),
        (b"", 0),
        (b"ab", -15),
    ] {
        assert_eq!(written(store.put(key, key, start)), PutOutcome::Written(1));
    }
    let starts: Vec<i64> = fetched(store.fetch(b"a", -20, 20))
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(starts, vec![-15, 5]);
    let keys: Vec<(Vec<u8>, i64)> = fetched(store.backward_fetch_all(-20, 20))
        .into_iter()
        .map(|e| (e.key, e.start))
        .collect();
    let want = [
        (&b"a"[..], 5),
        (b"", 0),
        (b"a\0", -10),
        (b"ab", -15),
        (b"a", -15),
    ];
    assert_eq!(keys, want.map(|(k, t)| (k.to_vec(), t)).to_vec());
}

/// A record whose every window closed more than the grace period ago is late: refused and
/// counted; one with an open window is aggregated there only.
pub fn late_records_are_counted(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = WindowStore::open(fx.store(), config(false)).expect("open");
    let tumbling = TimeWindows::tumbling(10)
        .and_then(|w| w.with_grace(2))
        .expect("windows");
    let count = |current: Option<&[u8]>| vec![current.map_or(0, |v| v[0]) + 1];
    assert_eq!(
        store.aggregate(b"k", 15, &tumbling, count).ok(),
        Some(PutOutcome::Written(1))
    );
    // Stream time 22: the window [10, 20) closed at 20 + 2.
    assert_eq!(
        store.aggregate(b"k", 22, &tumbling, count).ok(),
        Some(PutOutcome::Written(1))
    );
    assert_eq!(
        store.aggregate(b"k", 19, &tumbling, count).ok(),
        Some(PutOutcome::Late)
    );
    assert_eq!(
        store.aggregate(b"k", 21, &tumbling, count).ok(),
        Some(PutOutcome::Written(1))
    );
    assert_eq!(
        store.dropped(),
        DropCounts {
            expired: 0,
            late: 1
        }
    );
    assert_eq!(
        fetched(store.fetch(b"k", 0, 30)),
        vec![(10, vec![1]), (20, vec![2])]
    );
}

/// Duplicates keep their put order across a reopen: sequence numbers come from the store.
pub fn retained_duplicates_survive_reopen(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, true);
    for value in [b"1", b"2"] {
        assert_eq!(written(store.put(b"k", value, 7)), PutOutcome::Written(1));
    }
    fx.commit();
    let store = reopened(&mut fx, store, true);
    assert_eq!(written(store.put(b"k", b"3", 7)), PutOutcome::Written(1));
    let values: Vec<Vec<u8>> = fetched(store.fetch(b"k", 7, 7))
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]);
    assert_eq!(store.stream_time(), Some(7));
}

/// What Kafka Streams refuses of a windowed aggregation, changing nothing: a record before 0
/// has no window (dropped and counted as late), and a retention shorter than the window size
/// plus grace period, which would expire windows still open, is an `InvalidArgument`.
pub fn aggregate_refuses_what_kafka_refuses(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, false);
    let count = |current: Option<&[u8]>| vec![current.map_or(0, |v| v[0]) + 1];
    let kind = |result: store_api::Result<PutOutcome>| result.err().map(|err| err.kind());
    let tumbling = TimeWindows::tumbling(10).expect("windows");
    assert_eq!(
        written(store.aggregate(b"k", -1, &tumbling, count)),
        PutOutcome::Late
    );
    let dropped = DropCounts {
        expired: 0,
        late: 1,
    };
    assert_eq!(store.dropped(), dropped);
    assert_eq!(store.aggregated_time(), None);
    // Size 40 plus grace 11 is one more than the retention of 50.
    let too_long = TimeWindows::tumbling(40)
        .and_then(|w| w.with_grace(RETENTION - 40 + 1))
        .expect("windows");
    assert_eq!(
        kind(store.aggregate(b"k", 5, &too_long, count)),
        Some(ErrorKind::InvalidArgument)
    );
    assert_eq!(store.stream_time(), None);
    assert_eq!(fetched(store.all()), Vec::new());
    // Exactly the retention is enough.
    let fits = TimeWindows::tumbling(40)
        .and_then(|w| w.with_grace(RETENTION - 40))
        .expect("windows");
    assert_eq!(
        written(store.aggregate(b"k", 5, &fits, count)),
        PutOutcome::Written(1)
    );
}

/// As in Kafka Streams, retention counts from the latest window start written, not from the
/// latest record time: a closed window stays fetchable until the window starts move past its
/// retention, and the record time, which closes windows, survives a reopen.
pub fn retention_counts_from_window_starts(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let config = WindowStoreConfig::new(52).with_segment_interval(10);
    let store = WindowStore::open(fx.store(), config).expect("open");
    let tumbling = TimeWindows::tumbling(10).expect("windows");
    let count = |current: Option<&[u8]>| vec![current.map_or(0, |v| v[0]) + 1];
    assert_eq!(
        written(store.aggregate(b"k", 5, &tumbling, count)),
        PutOutcome::Written(1)
    );
    assert_eq!(
        written(store.aggregate(b"k", 59, &tumbling, count)),
        PutOutcome::Written(1)
    );
    assert_eq!(
        (store.stream_time(), store.aggregated_time()),
        (Some(50), Some(59))
    );
    // Window 0 is closed, but 0 > 50 - 52: still retained (with the record time, 59 - 52
    // would have expired it).
    assert_eq!(
        fetched(store.fetch(b"k", 0, 60)),
        vec![(0, vec![1]), (50, vec![1])]
    );
    fx.commit();
    drop(store);
    fx.reopen();
    let store = WindowStore::open(fx.store(), config).expect("reopen");
    assert_eq!(store.aggregated_time(), Some(59));
    // Window 40 closed at 50 by the record time 59 read back, not by the stream time 50.
    assert_eq!(
        written(store.aggregate(b"k", 45, &tumbling, count)),
        PutOutcome::Late
    );
}

/// Kafka Streams' windows of a record (`TimeWindows.windowsFor`): every hopping window holding
/// it, but none starting before 0.
pub fn aggregate_writes_kafka_windows(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx, false);
    let hopping = TimeWindows::hopping(10, 5).expect("windows");
    let count = |current: Option<&[u8]>| vec![current.map_or(0, |v| v[0]) + 1];
    // At 3: [0, 10) only, not [-5, 5).
    assert_eq!(
        written(store.aggregate(b"k", 3, &hopping, count)),
        PutOutcome::Written(1)
    );
    // At 12: [5, 15) and [10, 20).
    assert_eq!(
        written(store.aggregate(b"k", 12, &hopping, count)),
        PutOutcome::Written(2)
    );
    let starts: Vec<(i64, Vec<u8>)> = fetched(store.fetch(b"k", i64::MIN, i64::MAX));
    assert_eq!(starts, vec![(0, vec![1]), (5, vec![1]), (10, vec![1])]);
}
