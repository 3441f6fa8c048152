//! Commit framing: a commit's records are applied all together or not at all, a commit torn
//! or abandoned halfway is never applied, and records written without framing restore as
//! before. Also the largest record a log declares.
//!
//! A torn commit is made the way a writer that dies halfway leaves one: a prefix of the
//! commit's records appended with [`Framing::Open`] and never closed. Restores go through
//! [`restore`] into a [`MapStore`], and later commits through a [`LoggedStore`], so what is
//! checked is what a store rebuilt from the log holds.

use std::sync::Arc;

use statestore_changelog::{
    COMMIT_MARKER_KEY, Changelog, ChangelogRecord, Checkpoint, CommitReader, Framing, LoggedStore,
    LoggedStoreConfig, NoopRestoreListener, RecordKind, RestoreOutcome, marker_op, restore,
};
use store_api::{BatchOp, ErrorKind, KeyValueStore};

use super::ChangelogFactory;
use super::fixture::{ChangelogFixture, append, delete, end, put, read, read_to_end};
use super::map_store::{Map, MapStore, apply};

/// Restore batch sizes: one record at a time, batches that end inside commits, and one
/// batch for everything.
const BATCHES: [usize; 3] = [1, 4, 1000];

/// The `i`-th op of commit `n`: a few keys written again and again, with deletes, so a
/// replay that applies a wrong record or misses one ends in a different state.
fn commit_op(n: u64, i: u64) -> BatchOp {
    let key = format!("key-{:02}", (n * 7 + i * 3) % 16).into_bytes();
    if (n + i) % 5 == 4 {
        BatchOp::Delete { key }
    } else {
        BatchOp::Put {
            key,
            value: format!("commit-{n}-op-{i}").into_bytes(),
        }
    }
}

/// The ops of commit `n`, `len` of them, each key once (as a commit writes it).
fn commit_ops(n: u64, len: u64) -> Vec<BatchOp> {
    let mut ops: Vec<BatchOp> = Vec::new();
    for i in 0..len {
        let op = commit_op(n, i);
        if !ops.iter().any(|seen| seen.key() == op.key()) {
            ops.push(op);
        }
    }
    ops
}

/// Appends `ops` as one commit and applies them to `model`.
fn commit(log: &dyn Changelog, model: &mut Map, ops: &[BatchOp]) -> std::ops::Range<u64> {
    let got = log
        .append_framed(ops, Framing::Commit)
        .unwrap_or_else(|err| panic!("committing {} ops failed: {err}", ops.len()));
    ops.iter().for_each(|op| apply(model, op.clone()));
    got
}

/// Restores the whole log into an empty store with each of [`BATCHES`], checks that every
/// one ends in `model`, and returns the outcome of the last.
fn assert_restores_to(log: &dyn Changelog, model: &Map, what: &str) -> RestoreOutcome {
    let mut outcome = None;
    for batch in BATCHES {
        let dir = tempfile::tempdir().expect("a temporary directory for a checkpoint");
        let checkpoint = Checkpoint::open(dir.path().join(".checkpoint")).expect("checkpoint");
        let store = MapStore::default();
        let got = restore(&store, log, &checkpoint, batch, &mut NoopRestoreListener)
            .unwrap_or_else(|err| panic!("restore in batches of {batch} failed: {err}"));
        assert_eq!(
            &store.contents(),
            model,
            "{what}: restored in batches of {batch}"
        );
        outcome = Some(got);
    }
    outcome.expect("BATCHES is not empty")
}

/// Opens a logged store over `store` and `log`, restoring from `checkpoint`.
fn logged(
    store: &Arc<MapStore>,
    log: Arc<dyn Changelog>,
    checkpoint: &Arc<Checkpoint>,
) -> LoggedStore {
    let config = LoggedStoreConfig {
        restore_batch_records: 3,
        ..LoggedStoreConfig::default()
    };
    let inner: Arc<dyn KeyValueStore> = store.clone();
    LoggedStore::open(inner, log, Arc::clone(checkpoint), config)
        .unwrap_or_else(|err| panic!("opening a logged store failed: {err}"))
}

/// `append_framed` with [`Framing::Commit`] writes the records framed and a commit marker
/// after them at the last offset returned; [`Framing::Open`] writes framed records without
/// one; a commit of no records writes the marker alone; `append` writes unframed records.
pub fn commit_marker_closes_each_commit(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "commit_marker_closes_each_commit");
    let log = fx.log();
    let first = vec![put(b"a", b"1"), delete(b"b")];
    assert_eq!(
        log.append_framed(&first, Framing::Commit).expect("commit"),
        0..3
    );
    assert_eq!(
        log.append_framed(&[put(b"c", b"2")], Framing::Open)
            .expect("open"),
        3..4
    );
    assert_eq!(
        log.append_framed(&[], Framing::Open).expect("empty open"),
        4..4
    );
    assert_eq!(
        log.append_framed(&[], Framing::Commit)
            .expect("lone marker"),
        4..5
    );
    assert_eq!(append(log, &[put(b"d", b"3")]), 5..6);
    let framed = |offset, op| ChangelogRecord {
        offset,
        op,
        kind: RecordKind::Framed,
        epoch: 0,
    };
    let expected = vec![
        framed(0, put(b"a", b"1")),
        framed(1, delete(b"b")),
        ChangelogRecord::marker(2),
        framed(3, put(b"c", b"2")),
        ChangelogRecord::marker(4),
        ChangelogRecord::unframed(5, put(b"d", b"3")),
    ];
    assert_eq!(read(log, 0, 100), expected);
    assert_eq!(expected[2].op, marker_op());
}

/// Records appended without framing each restore on their own, before, between and after
/// framed commits.
pub fn unframed_records_restore_one_by_one(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "unframed_records_restore_one_by_one");
    let log = fx.log();
    let mut model = Map::new();
    let unframed = commit_ops(100, 6);
    append(log, &unframed);
    unframed.iter().for_each(|op| apply(&mut model, op.clone()));
    assert_restores_to(log, &model, "unframed records only");
    commit(log, &mut model, &commit_ops(1, 5));
    let last = commit_ops(101, 3);
    append(log, &last);
    last.iter().for_each(|op| apply(&mut model, op.clone()));
    let outcome = assert_restores_to(log, &model, "unframed, framed, unframed");
    assert_eq!(outcome.checkpoint, Some(end(log) - 1));
}

/// A commit torn at the tail (a prefix of its records, never closed) is not restored, for
/// every length of prefix: the restored store equals the state after the previous commit,
/// and the checkpoint names that commit's marker.
pub fn torn_commit_at_tail_is_not_restored(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "torn_commit_at_tail_is_not_restored");
    let log = fx.log();
    let mut model = Map::new();
    commit(log, &mut model, &commit_ops(0, 4));
    let marker = commit(log, &mut model, &commit_ops(1, 6)).end - 1;
    let torn = commit_ops(2, 8);
    let outcome = assert_restores_to(log, &model, "two whole commits");
    assert_eq!(outcome.checkpoint, Some(marker));
    for (len, op) in torn.iter().enumerate() {
        append_open(log, std::slice::from_ref(op));
        let what = format!("a commit torn after {} of {} records", len + 1, torn.len());
        let outcome = assert_restores_to(log, &model, &what);
        assert_eq!(outcome.checkpoint, Some(marker), "{what}");
    }
}

fn append_open(log: &dyn Changelog, ops: &[BatchOp]) {
    log.append_framed(ops, Framing::Open)
        .unwrap_or_else(|err| panic!("appending {} open records failed: {err}", ops.len()));
}

/// Writers that die halfway through a commit, again and again, each followed by a new
/// writer (a [`LoggedStore`]) that opens the log and commits more: every restore, from
/// scratch or from the surviving store's checkpoint, holds exactly the commits made, never a
/// record of an abandoned one, even though the abandoned records stay in the middle of the
/// log.
pub fn abandoned_commits_are_never_applied(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "abandoned_commits_are_never_applied");
    let log = fx.shared();
    let mut model = Map::new();
    commit(log.as_ref(), &mut model, &commit_ops(0, 6));
    let kept = tempfile::tempdir().expect("a temporary directory for a checkpoint");
    let checkpoint = Arc::new(Checkpoint::open(kept.path().join(".checkpoint")).expect("cp"));
    let survivor = Arc::new(MapStore::default());
    for round in 1..=4u64 {
        // A writer dies after appending part of a commit that overwrites and deletes keys.
        let abandoned: Vec<BatchOp> = commit_ops(round * 10, 8)
            .into_iter()
            .take(round as usize + 1)
            .collect();
        append_open(log.as_ref(), &abandoned);
        assert_restores_to(
            log.as_ref(),
            &model,
            &format!("round {round}, abandoned tail"),
        );
        // The next writer restores (from its checkpoint) and commits on top.
        let store = logged(&survivor, Arc::clone(&log), &checkpoint);
        assert_eq!(
            survivor.contents(),
            model,
            "round {round}: the reopened store"
        );
        for op in commit_ops(round * 10 + 1, 5) {
            match &op {
                BatchOp::Put { key, value } => store.put(key, value).expect("put"),
                BatchOp::Delete { key } => store.delete(key).expect("delete"),
            }
            apply(&mut model, op);
        }
        store
            .commit()
            .expect("commit on top of an abandoned commit");
        drop(store);
        assert_eq!(
            survivor.contents(),
            model,
            "round {round}: after the commit"
        );
        assert_restores_to(
            log.as_ref(),
            &model,
            &format!("round {round}, later commit"),
        );
    }
    // A store opened from scratch on the whole log agrees too.
    let fresh = Arc::new(MapStore::default());
    let dir = tempfile::tempdir().expect("a temporary directory for a checkpoint");
    let fresh_cp = Arc::new(Checkpoint::open(dir.path().join(".checkpoint")).expect("cp"));
    drop(logged(&fresh, Arc::clone(&log), &fresh_cp));
    assert_eq!(fresh.contents(), model, "a store restored from scratch");
}

/// A reader tailing the log in small batches (as a standby replica does) holds back a
/// commit's records until its marker arrives, even when the commit is appended in two
/// parts and read across batches, and then releases them all at once.
pub fn commit_reader_releases_whole_commits(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "commit_reader_releases_whole_commits");
    let log = fx.log();
    let mut model = Map::new();
    let mut applied = Map::new();
    let mut reader = CommitReader::new(log, 0);
    let drain = |reader: &mut CommitReader<'_>, applied: &mut Map| {
        let mut released = Vec::new();
        while reader.position() < end(log) {
            let got = reader.read(2).expect("reader read");
            assert!(
                got.last_read.is_some(),
                "a read below the end returned nothing"
            );
            released.extend(got.ops);
        }
        released.iter().for_each(|op| apply(applied, op.clone()));
        released
    };
    for n in 0..6u64 {
        let ops = commit_ops(n, 2 + n);
        let (first, second) = ops.split_at(ops.len() / 2);
        append_open(log, first);
        let released = drain(&mut reader, &mut applied);
        assert!(
            released.is_empty(),
            "commit {n}: released {released:?} before its marker"
        );
        assert_eq!(reader.pending().len(), first.len(), "commit {n}: held back");
        first.iter().for_each(|op| apply(&mut model, op.clone()));
        commit(log, &mut model, second);
        let released = drain(&mut reader, &mut applied);
        assert_eq!(released, ops, "commit {n}: released in log order");
        assert_eq!(applied, model, "commit {n}: the state after it");
        assert_eq!(reader.committed(), Some(end(log) - 1));
        assert!(reader.pending().is_empty());
    }
}

/// A record of exactly the declared largest size (key plus value) round-trips.
pub fn largest_record_round_trips(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "largest_record_round_trips");
    let log = fx.log();
    let max = log.max_record_len();
    let value: Vec<u8> = (0..max - 3).map(|i| (i % 253) as u8).collect();
    let written = vec![put(b"big", &value), put(b"after", b"1")];
    assert_eq!(
        log.append_framed(&written, Framing::Commit)
            .expect("commit"),
        0..3
    );
    let got = read_to_end(log, 0, 10);
    assert_eq!(got.len(), 3);
    assert!(
        got[0].op == written[0],
        "the largest record came back changed"
    );
    assert_eq!(got[1].op, written[1]);
}

/// A record one byte over the declared largest, and an update of the commit marker key,
/// fail the append with `InvalidArgument` and write none of its records.
pub fn record_over_the_largest_writes_nothing(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "record_over_the_largest_writes_nothing");
    let log = fx.log();
    append(log, &[put(b"a", b"1")]);
    let max = log.max_record_len();
    let too_big = vec![put(b"ok", b"2"), put(b"big", &vec![7u8; max - 2])];
    let marker_key = vec![put(b"ok", b"2"), delete(COMMIT_MARKER_KEY)];
    for (what, ops) in [("one byte over", too_big), ("the marker key", marker_key)] {
        for framing in [Framing::Unframed, Framing::Commit] {
            match log.append_framed(&ops, framing) {
                Err(err) => assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{what}: {err}"),
                Ok(range) => panic!("{what} was appended ({framing:?}) at {range:?}"),
            }
            assert_eq!(end(log), 1, "{what}: a refused append moved the end offset");
        }
    }
    assert_eq!(
        append(log, &[put(b"b", b"3")]),
        1..2,
        "the log works after refusals"
    );
}
