//! Cases of the session store.

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, prop_oneof};
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use store_api::ErrorKind;

use super::support::{check, collect, fail, run_model};
use super::{Mode, OperatorFixture, StoreFactory};
use crate::session::{MergeOutcome, Session, SessionStore, SessionStoreConfig, SessionWindows};
use crate::window::{DropCounts, PutOutcome};

const RETENTION: i64 = 40;
const INTERVAL: i64 = 10;
const GAP: i64 = 5;
const GRACE: i64 = 3;

fn config() -> SessionStoreConfig {
    SessionStoreConfig::new(RETENTION).with_segment_interval(INTERVAL)
}

fn gap() -> SessionWindows {
    SessionWindows::with_gap(GAP)
        .and_then(|w| w.with_grace(GRACE))
        .expect("valid session windows")
}

/// Concatenation: its result shows which values were merged, and in which order.
fn concat(a: &[u8], b: &[u8]) -> Vec<u8> {
    [a, b].concat()
}

#[derive(Debug, Clone)]
enum Op {
    Put(Session, u8),
    Remove(Session),
    Merge(Vec<u8>, i64, u8),
    Find(Vec<u8>, i64, i64),
    BackwardFind(Vec<u8>, i64, i64),
    FindRange(KeyBound, KeyBound, i64, i64),
    BackwardFindRange(KeyBound, KeyBound, i64, i64),
    FindEnding(i64, i64),
    BackwardFindEnding(i64, i64),
    FetchSession(Session),
    Commit,
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    select(vec![&b""[..], b"\0", b"a", b"a\0", b"ab"]).prop_map(<[u8]>::to_vec)
}

/// A bound of a key range: a key, or none (Kafka Streams' `null`).
type KeyBound = Option<Vec<u8>>;

fn key_bound() -> impl Strategy<Value = KeyBound> {
    proptest::option::weighted(0.8, key())
}

/// Times relative to the stream time: most live, some expired or late, a few later.
fn time() -> impl Strategy<Value = i64> {
    -45_i64..10
}

fn session() -> impl Strategy<Value = Session> {
    (key(), time(), 0_i64..12).prop_map(|(k, start, len)| Session::new(k, start, start + len))
}

impl Op {
    /// The operation with its times made absolute, relative to `stream_time`.
    fn at(&self, stream_time: Option<i64>) -> Op {
        let t = |delta: &i64| stream_time.unwrap_or(0) + delta;
        let s = |s: &Session| Session::new(s.key.clone(), t(&s.start), t(&s.end));
        match self {
            Op::Put(session, v) => Op::Put(s(session), *v),
            Op::Remove(session) => Op::Remove(s(session)),
            Op::Merge(k, d, v) => Op::Merge(k.clone(), t(d), *v),
            Op::Find(k, a, b) => Op::Find(k.clone(), t(a), t(b)),
            Op::BackwardFind(k, a, b) => Op::BackwardFind(k.clone(), t(a), t(b)),
            Op::FindRange(k, l, a, b) => Op::FindRange(k.clone(), l.clone(), t(a), t(b)),
            Op::BackwardFindRange(k, l, a, b) => {
                Op::BackwardFindRange(k.clone(), l.clone(), t(a), t(b))
            }
            Op::FindEnding(a, b) => Op::FindEnding(t(a), t(b)),
            Op::BackwardFindEnding(a, b) => Op::BackwardFindEnding(t(a), t(b)),
            Op::FetchSession(session) => Op::FetchSession(s(session)),
            other => other.clone(),
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (session(), 0_u8..8).prop_map(|(s, v)| Op::Put(s, v)),
        1 => session().prop_map(Op::Remove),
        5 => (key(), time(), 0_u8..8).prop_map(|(k, t, v)| Op::Merge(k, t, v)),
        2 => (key(), time(), time()).prop_map(|(k, a, b)| Op::Find(k, a, b)),
        1 => (key(), time(), time()).prop_map(|(k, a, b)| Op::BackwardFind(k, a, b)),
        2 => (key_bound(), key_bound(), time(), time())
            .prop_map(|(k, l, a, b)| Op::FindRange(k, l, a, b)),
        1 => (key_bound(), key_bound(), time(), time())
            .prop_map(|(k, l, a, b)| Op::BackwardFindRange(k, l, a, b)),
        1 => (time(), time()).prop_map(|(a, b)| Op::FindEnding(a, b)),
        1 => (time(), time()).prop_map(|(a, b)| Op::BackwardFindEnding(a, b)),
        1 => session().prop_map(Op::FetchSession),
        1 => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

/// Sessions by `(key, end, start)`, the store's order within a key.
#[derive(Debug, Default)]
struct Model {
    sessions: BTreeMap<(Vec<u8>, i64, i64), Vec<u8>>,
    stream_time: Option<i64>,
    dropped: DropCounts,
}

impl Model {
    fn min_live(&self) -> i64 {
        self.stream_time.map_or(i64::MIN, |t| t - RETENTION + 1)
    }

    fn advance(&mut self, to: i64) {
        self.stream_time = Some(self.stream_time.map_or(to, |t| t.max(to)));
    }

    fn put(&mut self, session: &Session, value: Vec<u8>) -> PutOutcome {
        self.advance(session.end);
        if session.end < self.min_live() {
            self.dropped.expired += 1;
            return PutOutcome::Expired;
        }
        let id = (session.key.clone(), session.end, session.start);
        self.sessions.insert(id, value);
        PutOutcome::Written(1)
    }

    fn find(&self, key: &[u8], earliest_end: i64, latest_start: i64) -> Vec<(Session, Vec<u8>)> {
        let from = earliest_end.max(self.min_live());
        self.sessions
            .iter()
            .filter(|((k, end, start), _)| k == key && *end >= from && *start <= latest_start)
            .map(|((k, end, start), v)| (Session::new(k.clone(), *start, *end), v.clone()))
            .collect()
    }

    /// The sessions of keys within `[low, high]` (`None`: unbounded) ending within `ends`
    /// and starting at or before `latest_start`, by segment, key, end, start.
    fn find_range(
        &self,
        (low, high): (Option<&[u8]>, Option<&[u8]>),
        (earliest_end, latest_end): (i64, i64),
        latest_start: i64,
    ) -> Vec<(Session, Vec<u8>)> {
        let from = earliest_end.max(self.min_live());
        let in_keys = |key: &[u8]| low.is_none_or(|l| key >= l) && high.is_none_or(|h| key <= h);
        let mut found: Vec<_> = self
            .sessions
            .iter()
            .filter(|((k, end, start), _)| {
                in_keys(k) && *end >= from && *end <= latest_end && *start <= latest_start
            })
            .map(|((k, end, start), v)| (Session::new(k.clone(), *start, *end), v.clone()))
            .collect();
        found.sort_by_key(|(s, _)| (s.end.div_euclid(INTERVAL), s.key.clone(), s.end, s.start));
        found
    }

    fn merge(&mut self, key: &[u8], ts: i64, value: u8) -> MergeOutcome {
        self.advance(ts);
        let near = self.find(key, ts - GAP, ts + GAP);
        let mut merged = Session::new(key, ts, ts);
        let mut aggregate: Option<Vec<u8>> = None;
        for (session, stored) in &near {
            merged.start = merged.start.min(session.start);
            merged.end = merged.end.max(session.end);
            aggregate = Some(aggregate.map_or(stored.clone(), |a| concat(&a, stored)));
        }
        let now = self.stream_time.unwrap_or(ts);
        // Kafka Streams' close time: the gap and the grace period after the session's end.
        if merged.end + GAP + GRACE < now {
            self.dropped.late += 1;
            return MergeOutcome::Late;
        }
        let aggregate = aggregate.map_or(vec![value], |a| concat(&a, &[value]));
        for (session, _) in &near {
            self.sessions
                .remove(&(session.key.clone(), session.end, session.start));
        }
        if let PutOutcome::Expired = self.put(&merged, aggregate) {
            return MergeOutcome::Late;
        }
        MergeOutcome::Merged {
            session: merged,
            absorbed: near.len(),
        }
    }
}

fn open(fx: &OperatorFixture<'_>) -> SessionStore {
    SessionStore::open(fx.store(), config())
        .unwrap_or_else(|err| panic!("opening the session store failed: {err}"))
}

fn step(
    fx: &OperatorFixture<'_>,
    store: &SessionStore,
    model: &mut Model,
    op: &Op,
) -> Result<(), TestCaseError> {
    match &op.at(model.stream_time) {
        Op::Put(s, v) => check(
            "put",
            store.put(s, &[*v]).map_err(fail)?,
            model.put(s, vec![*v]),
        )?,
        Op::Remove(s) => {
            store.remove(s).map_err(fail)?;
            model.sessions.remove(&(s.key.clone(), s.end, s.start));
        }
        Op::Merge(k, t, v) => {
            let got = store
                .merge_record(k, *t, &gap(), &[*v], concat)
                .map_err(fail)?;
            check("merge_record", got, model.merge(k, *t, *v))?;
        }
        Op::Find(k, a, b) => check(
            "find_sessions",
            collect(store.find_sessions(k, *a, *b))?,
            model.find(k, *a, *b),
        )?,
        Op::BackwardFind(k, a, b) => {
            let mut want = model.find(k, *a, *b);
            want.reverse();
            check(
                "backward_find_sessions",
                collect(store.backward_find_sessions(k, *a, *b))?,
                want,
            )?;
        }
        Op::FindRange(k, l, a, b) => check(
            "find_sessions_in_range",
            collect(store.find_sessions_in_range(k.as_deref(), l.as_deref(), *a, *b))?,
            model.find_range((k.as_deref(), l.as_deref()), (*a, i64::MAX), *b),
        )?,
        Op::BackwardFindRange(k, l, a, b) => {
            let mut want = model.find_range((k.as_deref(), l.as_deref()), (*a, i64::MAX), *b);
            want.reverse();
            let got = store.backward_find_sessions_in_range(k.as_deref(), l.as_deref(), *a, *b);
            check("backward_find_sessions_in_range", collect(got)?, want)?;
        }
        Op::FindEnding(a, b) => check(
            "find_sessions_ending",
            collect(store.find_sessions_ending(*a, *b))?,
            model.find_range((None, None), (*a, *b), i64::MAX),
        )?,
        Op::BackwardFindEnding(a, b) => {
            let mut want = model.find_range((None, None), (*a, *b), i64::MAX);
            want.reverse();
            check(
                "backward_find_sessions_ending",
                collect(store.backward_find_sessions_ending(*a, *b))?,
                want,
            )?;
        }
        Op::FetchSession(s) => {
            let want = (s.end >= model.min_live())
                .then(|| {
                    model
                        .sessions
                        .get(&(s.key.clone(), s.end, s.start))
                        .cloned()
                })
                .flatten();
            check("fetch_session", store.fetch_session(s).map_err(fail)?, want)?;
        }
        Op::Commit => fx.commit(),
        Op::Reopen => unreachable!("the model test reopens the store itself"),
    }
    check("stream time", store.stream_time(), model.stream_time)
}

/// Random puts, removes, merges, finds (of one key, key ranges with and without bounds,
/// every key by end time), commits and reopens against a `BTreeMap` model.
pub fn model(factory: &dyn StoreFactory, mode: Mode) {
    run_model("session store", mode, vec(op(), 1..60), |ops| {
        let mut fx = OperatorFixture::new(factory, mode);
        let mut store = open(&fx);
        let mut model = Model::default();
        for op in &ops {
            if let Op::Reopen = op {
                check("dropped before reopen", store.dropped(), model.dropped)?;
                drop(store);
                fx.reopen();
                store = open(&fx);
                model.dropped = DropCounts::default();
            } else {
                step(&fx, &store, &mut model, op)?;
            }
        }
        check("dropped", store.dropped(), model.dropped)
    });
}

fn merged(outcome: store_api::Result<MergeOutcome>) -> MergeOutcome {
    outcome.unwrap_or_else(|err| panic!("merge_record failed: {err}"))
}

/// A record between two sessions within the gap bridges them into one, merging values in
/// session order; a record beyond the gap opens a new session.
pub fn merging_bridges_sessions(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let windows = SessionWindows::with_gap(GAP).expect("gap");
    for (ts, value) in [(0, b'a'), (3, b'b'), (12, b'c')] {
        let _ = merged(store.merge_record(b"k", ts, &windows, &[value], concat));
    }
    let found = collect(store.find_sessions(b"k", i64::MIN, i64::MAX)).expect("find");
    assert_eq!(
        found,
        vec![
            (Session::new(*b"k", 0, 3), b"ab".to_vec()),
            (Session::new(*b"k", 12, 12), b"c".to_vec())
        ]
    );
    let bridge = merged(store.merge_record(b"k", 7, &windows, b"d", concat));
    let whole = Session::new(*b"k", 0, 12);
    assert_eq!(
        bridge,
        MergeOutcome::Merged {
            session: whole.clone(),
            absorbed: 2
        }
    );
    let found = collect(store.find_sessions(b"k", i64::MIN, i64::MAX)).expect("find");
    assert_eq!(found, vec![(whole, b"abcd".to_vec())]);
}

/// Merging into a session that ended more than the gap plus the grace period before the
/// stream time is late: refused and counted.
pub fn late_records_are_counted(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let _ = merged(store.merge_record(b"k", 100, &gap(), b"x", concat));
    assert_eq!(
        merged(store.merge_record(b"k", 96, &gap(), b"y", concat)).clone(),
        MergeOutcome::Merged {
            session: Session::new(*b"k", 96, 100),
            absorbed: 1,
        }
    );
    assert_eq!(
        merged(store.merge_record(b"other", 90, &gap(), b"z", concat)),
        MergeOutcome::Late
    );
    // Kafka Streams' close time counts the gap: a session ending at 93 stays open until
    // 93 + 5 + 3 = 101, although its grace period alone ended at 96.
    assert_eq!(
        merged(store.merge_record(b"open", 93, &gap(), b"w", concat)),
        MergeOutcome::Merged {
            session: Session::new(*b"open", 93, 93),
            absorbed: 0,
        }
    );
    assert_eq!(
        store.dropped(),
        DropCounts {
            expired: 0,
            late: 1
        }
    );
}

/// A session that starts after it ends is an `InvalidArgument`, never a panic or a write.
pub fn bad_sessions_are_rejected(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let backwards = Session::new(*b"k", 10, 5);
    let kind = |result: store_api::Result<()>| result.err().map(|err| err.kind());
    assert_eq!(
        kind(store.put(&backwards, b"v").map(|_| ())),
        Some(ErrorKind::InvalidArgument)
    );
    assert_eq!(
        kind(store.remove(&backwards)),
        Some(ErrorKind::InvalidArgument)
    );
    assert_eq!(store.stream_time(), None);
}

/// Sessions expire with their segment: the underlying store keeps only live segments.
pub fn expiry_drops_whole_segments(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    for end in 0..30 {
        assert_eq!(
            store.put(&Session::new(*b"k", end, end), b"v").ok(),
            Some(PutOutcome::Written(1))
        );
    }
    // Stream time 60: sessions ending after 20 live; segments 0 and 1 go.
    assert_eq!(
        store.put(&Session::new(*b"k", 60, 60), b"v").ok(),
        Some(PutOutcome::Written(1))
    );
    let stored = fx
        .store()
        .prefix_scan(b"")
        .map(Iterator::count)
        .expect("scan");
    assert_eq!(stored, 30 - 20 + 1 + 1);
    assert_eq!(
        store.put(&Session::new(*b"k", 0, 20), b"v").ok(),
        Some(PutOutcome::Expired)
    );
    let found = collect(store.find_sessions(b"k", i64::MIN, i64::MAX)).expect("find");
    assert_eq!(found.first().map(|(s, _)| s.end), Some(21));
}

/// A retention shorter than the gap plus grace period, which would expire sessions still
/// open, is an `InvalidArgument` that changes nothing, as Kafka Streams refuses it.
pub fn merge_refuses_a_retention_shorter_than_gap_and_grace(
    factory: &dyn StoreFactory,
    mode: Mode,
) {
    let fx = OperatorFixture::new(factory, mode);
    let store = open(&fx);
    let too_long = SessionWindows::with_gap(30)
        .and_then(|w| w.with_grace(RETENTION - 30 + 1))
        .expect("session windows");
    let refused = store.merge_record(b"k", 5, &too_long, b"x", concat);
    assert_eq!(
        refused.err().map(|err| err.kind()),
        Some(ErrorKind::InvalidArgument)
    );
    assert_eq!(store.stream_time(), None);
    let fits = SessionWindows::with_gap(30)
        .and_then(|w| w.with_grace(RETENTION - 30))
        .expect("session windows");
    let merged = merged(store.merge_record(b"k", 5, &fits, b"x", concat));
    assert_eq!(
        merged,
        MergeOutcome::Merged {
            session: Session::new(*b"k", 5, 5),
            absorbed: 0
        }
    );
}
