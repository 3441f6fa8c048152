//! Restoring a store from a changelog: a full restore into the store under test gives exactly
//! the state a replay of the same log into a plain ordered map gives. On a store that offers
//! a [`bulk_loader`](store_api::KeyValueStore::bulk_loader) (RocksDB) the restore goes
//! through it, elsewhere through `WriteBatch`es, so these cases check the bulk path against
//! the replay path on every backend that has one.
//!
//! The log holds what makes a restore wrong when one record is misapplied: keys overwritten
//! within a commit's batch and across commits, deletes (framed and unframed), the empty key
//! and value, a writer fenced by a newer one whose later records must be ignored, the writer
//! epoch key, and a commit torn at the tail.

use std::collections::BTreeMap;

use statestore_changelog::{
    Changelog, Checkpoint, EPOCH_KEY, Framing, MemoryLog, NoopRestoreListener, RestoreOutcome,
    restore,
};
use store_api::{BatchOp, KeyValueStore, KvPair};

use crate::StoreFactory;
use crate::StoreFixture;
use crate::changelog::map_store::MapStore;

use super::support::{all, put_keys, skip};

const TOPIC: &str = "conformance-restore-changelog";

/// Restore batch sizes: one record per batch (a load per record), batches ending inside
/// commits, and one batch for everything.
const BATCHES: [usize; 3] = [1, 7, 1000];

fn put(key: &[u8], value: &[u8]) -> BatchOp {
    BatchOp::Put {
        key: key.to_vec(),
        value: value.to_vec(),
    }
}

fn delete(key: &[u8]) -> BatchOp {
    BatchOp::Delete { key: key.to_vec() }
}

/// A log of two writers, the first fenced by the second halfway (see the module docs).
fn fenced_log() -> MemoryLog {
    let log = MemoryLog::new(TOPIC, 0);
    let (old, new) = (log.clone(), log.clone());
    old.set_writer_epoch(1).expect("epoch 1");
    new.set_writer_epoch(2).expect("epoch 2");
    let append = |writer: &MemoryLog, ops: &[BatchOp], framing: Framing| {
        writer
            .append_framed(ops, framing)
            .unwrap_or_else(|err| panic!("append failed: {err}"));
    };
    let many: Vec<BatchOp> = (0..40u32)
        .map(|i| put(format!("k{:02}", i % 13).as_bytes(), &i.to_be_bytes()))
        .collect();
    append(&old, &many, Framing::Commit);
    append(
        &old,
        &[
            put(b"a", b"1"),
            put(b"b", b"1"),
            put(b"c", b"1"),
            put(b"", b""),
        ],
        Framing::Commit,
    );
    append(
        &old,
        &[delete(b"b"), put(b"k03", b"unframed")],
        Framing::Unframed,
    );
    append(
        &old,
        &[
            put(b"a", b"2"),
            put(b"d", b"1"),
            delete(b"c"),
            delete(b"k05"),
        ],
        Framing::Commit,
    );
    let mut fence = 2u64.to_be_bytes().to_vec();
    fence.extend_from_slice(&7u64.to_be_bytes());
    append(
        &new,
        &[put(EPOCH_KEY, &fence), put(b"e", b"1")],
        Framing::Commit,
    );
    // The fenced writer goes on: none of this may be restored.
    append(
        &old,
        &[put(b"a", b"fenced"), delete(b"d"), put(b"z", b"fenced")],
        Framing::Commit,
    );
    append(&old, &[delete(b"e")], Framing::Unframed);
    append(
        &new,
        &[
            put(b"a", b"3"),
            put(b"a", b"4"),
            delete(b"e"),
            put(b"f", b"1"),
            put(b"b", b"2"),
        ],
        Framing::Commit,
    );
    append(
        &new,
        &[delete(b"k07"), put(b"c", b"again")],
        Framing::Commit,
    );
    // A commit torn at the tail: never applied.
    append(&new, &[put(b"g", b"torn"), delete(b"a")], Framing::Open);
    log
}

/// Restores `log` into `store` from no checkpoint, in batches of `batch` records.
fn restore_all(store: &dyn KeyValueStore, log: &dyn Changelog, batch: usize) -> RestoreOutcome {
    let dir = tempfile::tempdir().expect("tempdir for the checkpoint");
    let checkpoint = Checkpoint::open(dir.path().join(".checkpoint")).expect("checkpoint");
    restore(store, log, &checkpoint, batch, &mut NoopRestoreListener)
        .unwrap_or_else(|err| panic!("restore in batches of {batch} failed: {err}"))
}

/// The state and outcome of replaying `log` into a plain ordered map.
fn replayed(log: &dyn Changelog, batch: usize) -> (Vec<KvPair>, RestoreOutcome) {
    let map = MapStore::default();
    let outcome = restore_all(&map, log, batch);
    (map.contents().into_iter().collect(), outcome)
}

/// Whether `store` offers a bulk loader (the loader asked for is dropped unused).
fn offers_bulk_loader(store: &dyn KeyValueStore) -> bool {
    store
        .bulk_loader()
        .unwrap_or_else(|err| panic!("bulk_loader failed: {err}"))
        .is_some()
}

/// A full restore of a log with overwrites, deletes, a fenced writer's records, the epoch
/// key and a torn tail gives the state and outcome of a replay into a plain map, through
/// the store's bulk loader when it offers one.
pub fn restore_from_empty_matches_replay(factory: &dyn StoreFactory) {
    let log = fenced_log();
    for batch in BATCHES {
        let fx = StoreFixture::new(factory);
        let store = fx.store();
        let bulk = offers_bulk_loader(store);
        let (expected, reference) = replayed(&log, batch);
        let outcome = restore_all(store, &log, batch);
        assert_eq!(outcome.bulk_loaded, bulk, "bulk path taken when offered");
        assert!(!reference.bulk_loaded, "the reference replays batches");
        let plain = |outcome: RestoreOutcome| RestoreOutcome {
            bulk_loaded: false,
            ..outcome
        };
        assert_eq!(
            plain(outcome),
            reference,
            "restore outcome, batches of {batch}"
        );
        assert_eq!(all(store), expected, "restored state, batches of {batch}");
        // The oracle itself: the fenced writer's records and the torn tail are left out.
        let state: BTreeMap<Vec<u8>, Vec<u8>> = expected.into_iter().collect();
        assert_eq!(state.get(b"a".as_slice()), Some(&b"4".to_vec()));
        assert_eq!(state.get(b"d".as_slice()), Some(&b"1".to_vec()));
        assert!(!state.contains_key(b"z".as_slice()) && !state.contains_key(b"g".as_slice()));
        assert_eq!(reference.fenced, 4, "a, d, z and e were a fenced writer's");
        assert_eq!(reference.epoch, 2);
    }
}

/// A store holding keys no checkpoint vouches for is wiped before the full restore, bulk or
/// not: the stale keys are gone, and the state is the replay's.
pub fn restore_over_stale_content_matches_replay(factory: &dyn StoreFactory) {
    let log = fenced_log();
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    put_keys(store, &[b"", b"a", b"stale", b"z", b"\xff"]);
    let (expected, _) = replayed(&log, 1000);
    let outcome = restore_all(store, &log, 1000);
    assert!(outcome.wiped, "a store without a checkpoint is wiped");
    assert_eq!(all(store), expected, "restored over stale content");
}

/// A bulk loader applies the operations of every `load`, in order, after the store's content:
/// the last write of a key wins, across calls and within one, deletes included; nothing is
/// asked of a store that offers no loader.
pub fn bulk_loader_applies_writes_in_order(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    store.put(b"old", b"1").expect("put");
    store.put(b"kept", b"1").expect("put");
    let Some(mut loader) = store.bulk_loader().expect("bulk_loader") else {
        skip(
            "bulk_loader_applies_writes_in_order",
            store.name(),
            "bulk loader",
        );
        return;
    };
    let loads = [
        vec![
            put(b"a", b"1"),
            put(b"b", b"1"),
            put(b"a", b"2"),
            delete(b"old"),
        ],
        vec![delete(b"a"), put(b"c", b"1"), put(b"", b"")],
        vec![
            put(b"a", b"3"),
            delete(b"b"),
            put(b"c", b"2"),
            delete(b"never"),
        ],
    ];
    for ops in loads {
        loader.load(ops).expect("load");
    }
    loader.finish().expect("finish");
    let expected: Vec<(Vec<u8>, Vec<u8>)> = [
        (b"".as_slice(), b"".as_slice()),
        (b"a", b"3"),
        (b"c", b"2"),
        (b"kept", b"1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_vec(), v.to_vec()))
    .collect();
    assert_eq!(all(store), expected, "after the bulk load");
}
