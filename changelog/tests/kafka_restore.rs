//! `LoggedStore` on the Kafka changelog against a real broker: a store restored on "another
//! machine" (a fresh state directory) equals the original, a restore from a checkpoint reads
//! only the tail, and a broker outage under `commit` loses nothing.
#![cfg(feature = "kafka")]

mod kafka_support;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statestore_changelog::{
    Changelog, KafkaConfig, KafkaLog, LoggedStore, LoggedStoreConfig, RestoreListener,
    StateDirectory, TaskDirectory, TaskId,
};
use store_api::{ErrorKind, KeyValueStore};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Counts what a restore reports.
#[derive(Debug, Default)]
struct Counting {
    start: Option<(u64, u64)>,
    batches: usize,
    records: u64,
    total: Option<u64>,
}

impl RestoreListener for Counting {
    fn on_start(&mut self, _topic: &str, _partition: u32, start: u64, end: u64) {
        self.start = Some((start, end));
    }

    fn on_batch(&mut self, _topic: &str, _partition: u32, _end: u64, records: usize) {
        self.batches += 1;
        self.records += records as u64;
    }

    fn on_end(&mut self, _topic: &str, _partition: u32, total: u64) {
        self.total = Some(total);
    }
}

/// One "machine": a state directory with task 0_0 holding a redb store logged to Kafka.
/// Field order is drop order: the store closes before its task and state directories.
struct Machine {
    store: LoggedStore,
    task: TaskDirectory,
    _state: StateDirectory,
}

impl Machine {
    fn open(root: &Path, kafka: &KafkaConfig, listener: &mut Counting) -> Machine {
        let state = StateDirectory::open(root, &kafka.application_id).expect("state dir");
        let task = state.task(TaskId::new(0, 0)).expect("task dir");
        let redb = statestore::factory("redb").expect("the redb backend is compiled in");
        let inner = task
            .open_store(redb, &kafka.store_name, &serde_json::Value::Null)
            .expect("redb store");
        let log = KafkaLog::open(kafka.clone(), 0).expect("kafka log");
        assert_eq!(
            log.topic(),
            state.changelog_topic(&kafka.store_name).expect("topic")
        );
        let config = LoggedStoreConfig {
            restore_batch_records: 500,
            ..LoggedStoreConfig::default()
        };
        let checkpoint = Arc::clone(task.checkpoint());
        let store =
            LoggedStore::open_with_listener(inner, Arc::new(log), checkpoint, config, listener)
                .expect("logged store");
        Machine {
            store,
            task,
            _state: state,
        }
    }

    fn checkpoint(&self) -> Option<u64> {
        let log = self.store.changelog();
        self.task.checkpoint().get(log.topic(), log.partition())
    }
}

/// `count` random puts and deletes over 400 keys, applied to `store` and `model`, committing
/// every `commit_every` updates (and not at the end).
fn write_updates(store: &LoggedStore, model: &mut Model, rng: &mut StdRng, count: usize) {
    for i in 0..count {
        let key = format!("key{:04}", rng.random_range(0..400u32)).into_bytes();
        if rng.random_bool(0.2) {
            store.delete(&key).expect("delete");
            model.remove(&key);
        } else {
            let value = format!("value-{i}-{}", rng.random::<u32>()).into_bytes();
            store.put(&key, &value).expect("put");
            model.insert(key, value);
        }
    }
}

fn write_and_commit(store: &LoggedStore, model: &mut Model, rng: &mut StdRng, commits: usize) {
    for _ in 0..commits {
        write_updates(store, model, rng, 250);
        store.commit().expect("commit");
    }
}

fn scan(store: &dyn KeyValueStore) -> Model {
    store
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .collect::<Result<_, _>>()
        .expect("scan")
}

#[test]
fn a_store_restored_on_another_machine_equals_the_original() {
    let Some(bootstrap) = kafka_support::bootstrap("a_store_restored_on_another_machine") else {
        return;
    };
    let kafka = kafka_support::config(&bootstrap, "counts");
    let (here, there) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut rng = StdRng::seed_from_u64(1);
    let mut model = Model::new();

    let original = Machine::open(here.path(), &kafka, &mut Counting::default());
    write_and_commit(&original.store, &mut model, &mut rng, 12);
    assert_eq!(scan(original.store.inner().as_ref()), model);
    let end = original.store.changelog().end_offset().unwrap();

    let mut restore = Counting::default();
    let copy = Machine::open(there.path(), &kafka, &mut restore);
    assert!(
        copy.store.restored().wiped,
        "a fresh state directory has no checkpoint"
    );
    assert_eq!(restore.start, Some((0, end)));
    // Every record but the twelve commit markers is an update.
    assert_eq!((restore.records, restore.total), (end - 12, Some(end - 12)));
    assert_eq!(scan(copy.store.inner().as_ref()), model);
    assert_eq!(scan(&copy.store), scan(&original.store));
    assert_eq!(copy.checkpoint(), Some(end - 1));
    kafka_support::announce(&format!(
        "statestore-kafka: restored {} records in {} batches into a fresh state directory; \
         the copy equals the original ({} keys)",
        restore.records,
        restore.batches,
        model.len()
    ));
}

#[test]
fn a_restore_from_a_checkpoint_reads_only_the_tail() {
    let Some(bootstrap) = kafka_support::bootstrap("a_restore_from_a_checkpoint_reads_the_tail")
    else {
        return;
    };
    let kafka = kafka_support::config(&bootstrap, "tail");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut rng = StdRng::seed_from_u64(2);
    let mut model = Model::new();

    let first = Machine::open(a.path(), &kafka, &mut Counting::default());
    write_and_commit(&first.store, &mut model, &mut rng, 8);
    let held = first.checkpoint().expect("a commit writes the checkpoint");
    drop(first);

    // The task moves to machine B, which restores everything and writes on.
    let second = Machine::open(b.path(), &kafka, &mut Counting::default());
    write_and_commit(&second.store, &mut model, &mut rng, 2);
    let end = second.store.changelog().end_offset().unwrap();
    drop(second);

    // Back on machine A, only what B appended is replayed.
    let mut restore = Counting::default();
    let back = Machine::open(a.path(), &kafka, &mut restore);
    assert!(!back.store.restored().wiped);
    assert_eq!(restore.start, Some((held + 1, end)));
    // Every record after the checkpoint but the markers of B's two commits is an update.
    assert_eq!(restore.records, end - (held + 1) - 2);
    assert!(restore.records < end / 2, "{restore:?} of {end}");
    assert_eq!(scan(&back.store), model);
    kafka_support::announce(&format!(
        "statestore-kafka: restore from checkpoint {held} replayed {} of {end} records",
        restore.records
    ));
}

#[test]
fn commit_fails_while_the_broker_is_down_and_the_run_resumes_without_loss() {
    if kafka_support::bootstrap("commit_fails_while_the_broker_is_down").is_none() {
        return;
    }
    let broker = kafka_support::Cluster::start(1);
    let kafka = KafkaConfig {
        produce_timeout_ms: 3_000,
        admin_timeout_ms: 5_000,
        ..kafka_support::config(broker.bootstrap(), "outage")
    };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut rng = StdRng::seed_from_u64(3);
    let mut model = Model::new();
    let machine = Machine::open(a.path(), &kafka, &mut Counting::default());
    write_and_commit(&machine.store, &mut model, &mut rng, 2);

    broker.kill(1);
    write_updates(&machine.store, &mut model, &mut rng, 200);
    let started = Instant::now();
    let err = machine.store.commit().unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        took < Duration::from_millis(4_500),
        "commit took {took:?} with a 3 s timeout"
    );
    assert_eq!(
        scan(&machine.store),
        model,
        "a failed commit keeps the writes readable"
    );
    kafka_support::announce(&format!(
        "statestore-kafka: with the broker down, commit failed after {took:?}: {err}"
    ));

    broker.restart(1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(err) = machine.store.commit() {
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        assert!(
            Instant::now() < deadline,
            "no commit within 30 s of the restart: {err}"
        );
    }
    write_and_commit(&machine.store, &mut model, &mut rng, 1);
    assert_eq!(scan(machine.store.inner().as_ref()), model);

    let copy = Machine::open(b.path(), &kafka, &mut Counting::default());
    assert_eq!(
        scan(copy.store.inner().as_ref()),
        model,
        "broker log:\n{}",
        broker.log(1)
    );
}

/// A commit prepared in a transaction reaches the store only once the transaction commits;
/// after an abort neither the store, nor its checkpoint, nor a restore of the changelog (read
/// committed, stepping over the transactions' control records) holds any of it.
#[test]
fn a_commit_prepared_in_an_aborted_transaction_is_never_restored() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use statestore_changelog::KafkaClients;

    let Some(bootstrap) = kafka_support::bootstrap("a_commit_prepared_in_an_aborted_transaction")
    else {
        return;
    };
    let kafka = kafka_support::config(&bootstrap, "counts");
    let clients = KafkaClients::new(&kafka).expect("clients");
    clients
        .set_transactional(&kafka_support::unique("txn"), Duration::from_secs(10))
        .expect("transactional");
    let group: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", kafka_support::unique("txn-group"))
        .create()
        .expect("consumer");
    let group = group.group_metadata().expect("group metadata");
    let offsets = rdkafka::TopicPartitionList::new();
    let dir = tempfile::tempdir().unwrap();
    let state = StateDirectory::open(dir.path(), &kafka.application_id).expect("state dir");
    let task = state.task(TaskId::new(0, 0)).expect("task dir");
    let redb = statestore::factory("redb").expect("redb");
    let inner = task
        .open_store(redb, &kafka.store_name, &serde_json::Value::Null)
        .expect("redb store");
    let log = clients.open(kafka.clone(), 0).expect("kafka log");
    let checkpoint = Arc::clone(task.checkpoint());
    let store = LoggedStore::open(
        inner,
        Arc::new(log),
        checkpoint,
        LoggedStoreConfig::default(),
    )
    .expect("logged store");
    store.fence().expect("fence");

    for value in [b"1", b"2"] {
        store.put(b"kept", value).expect("put");
        assert!(store.prepare_commit().expect("prepare"));
        assert_ne!(
            store.inner().get(b"kept").expect("get").as_deref(),
            Some(&value[..]),
            "nothing reaches the store before its transaction commits"
        );
        clients
            .commit_transaction(&offsets, &group)
            .expect("commit");
        store.apply_prepared().expect("apply");
        assert_eq!(
            store.inner().get(b"kept").expect("get").as_deref(),
            Some(&value[..])
        );
    }
    let topic = store.changelog().topic().to_owned();
    let held = store.checkpoint().get(&topic, 0);
    store.put(b"aborted", b"x").expect("put");
    store.put(b"kept", b"aborted").expect("put");
    assert!(store.prepare_commit().expect("prepare"));
    clients.abort_transaction().expect("an abort");
    assert_eq!(
        store.inner().get(b"kept").expect("get"),
        Some(b"2".to_vec())
    );
    assert_eq!(store.inner().get(b"aborted").expect("get"), None);
    assert_eq!(store.checkpoint().get(&topic, 0), held);
    store.abandon().expect("abandon");

    // Elsewhere, a restore from the changelog holds the committed value only.
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = Machine::open(elsewhere.path(), &kafka, &mut Counting::default());
    assert_eq!(copy.store.get(b"kept").expect("get"), Some(b"2".to_vec()));
    assert_eq!(copy.store.get(b"aborted").expect("get"), None);
}

/// As `Machine::open`, the store fenced (as a task's is) and with snapshots in `snapshots`.
fn open_snapshotted(
    root: &Path,
    kafka: &KafkaConfig,
    snapshots: &Arc<statestore_changelog::SnapshotStore>,
) -> (Machine, Counting) {
    let state = StateDirectory::open(root, &kafka.application_id).expect("state dir");
    let task = state.task(TaskId::new(0, 0)).expect("task dir");
    let rocksdb = statestore::factory("rocksdb").expect("the rocksdb backend is compiled in");
    let inner = task
        .open_store(rocksdb, &kafka.store_name, &serde_json::Value::Null)
        .expect("rocksdb store");
    let log = KafkaLog::open(kafka.clone(), 0).expect("kafka log");
    let mut restore = Counting::default();
    let store = LoggedStore::open_with_snapshots(
        inner,
        Arc::new(log),
        Arc::clone(task.checkpoint()),
        LoggedStoreConfig::default(),
        Arc::clone(snapshots),
        &mut restore,
    )
    .expect("logged store");
    store.fence().expect("fence");
    let machine = Machine {
        store,
        task,
        _state: state,
    };
    (machine, restore)
}

#[test]
fn a_new_machine_loads_a_snapshot_then_replays_only_the_tail() {
    let Some(bootstrap) = kafka_support::bootstrap("a_new_machine_loads_a_snapshot") else {
        return;
    };
    let kafka = kafka_support::config(&bootstrap, "counts");
    let (here, there, objects) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let snapshots = Arc::new(
        statestore_changelog::SnapshotStore::open(&statestore_changelog::SnapshotConfig {
            url: format!("file://{}", objects.path().display()),
            ..statestore_changelog::SnapshotConfig::default()
        })
        .unwrap(),
    );
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = Model::new();

    let (original, _) = open_snapshotted(here.path(), &kafka, &snapshots);
    write_and_commit(&original.store, &mut model, &mut rng, 10);
    let taken = original.store.snapshot().unwrap().expect("committed");
    assert_eq!(taken.epoch, 1, "the fence's epoch");
    let tail_commits = 3;
    write_and_commit(&original.store, &mut model, &mut rng, tail_commits);
    let end = original.store.changelog().end_offset().unwrap();
    drop(original);

    let (copy, restore) = open_snapshotted(there.path(), &kafka, &snapshots);
    assert_eq!(copy.store.bootstrapped_from(), Some(&taken));
    assert_eq!(user_keys(copy.store.inner().as_ref()), model);
    // The tail: every offset after the snapshot's marker, less one marker per commit.
    let tail = end - (taken.offset + 1) - tail_commits as u64;
    assert_eq!(copy.store.restored().records, tail);
    assert_eq!(restore.records, tail);
    assert!(!copy.store.restored().wiped);
    // The copy fenced above the snapshot's epoch, and goes on committing.
    assert_eq!(copy.store.writer_epoch(), Some(2));
    write_and_commit(&copy.store, &mut model, &mut rng, 1);
    assert_eq!(user_keys(copy.store.inner().as_ref()), model);
}

/// The files of a snapshot of RocksDB's files, on disk under the `file://` object store.
fn snapshot_files(taken: &statestore_changelog::SnapshotInfo) -> Vec<std::path::PathBuf> {
    let manifest = Path::new("/").join(&taken.path);
    let dir = manifest.with_extension("files");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the snapshot's files")
        .map(|entry| entry.expect("a file").path())
        .collect();
    files.sort();
    files
}

/// A snapshot of RocksDB's files with a file corrupt, a file missing or its manifest cut is
/// not used: the new machine loads the older snapshot, and with none usable replays the
/// whole changelog; never a wrong store.
#[test]
fn a_bad_snapshot_of_files_falls_back_to_an_older_one_then_to_a_replay() {
    let Some(bootstrap) = kafka_support::bootstrap("a_bad_snapshot_of_files_falls_back") else {
        return;
    };
    let kafka = kafka_support::config(&bootstrap, "fallback");
    let (here, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let snapshots = snapshot_store(objects.path(), 3);
    let mut rng = StdRng::seed_from_u64(11);
    let mut model = Model::new();
    let (original, _) = open_snapshotted(here.path(), &kafka, &snapshots);
    write_and_commit(&original.store, &mut model, &mut rng, 5);
    let older = original.store.snapshot().unwrap().expect("committed");
    write_and_commit(&original.store, &mut model, &mut rng, 5);
    let newer = original.store.snapshot().unwrap().expect("committed");
    write_and_commit(&original.store, &mut model, &mut rng, 2);
    drop(original);
    assert!(older.is_files() && newer.is_files());

    let open_elsewhere = |expected: Option<&statestore_changelog::SnapshotInfo>| {
        let there = tempfile::tempdir().unwrap();
        let (copy, _) = open_snapshotted(there.path(), &kafka, &snapshots);
        assert_eq!(copy.store.bootstrapped_from(), expected);
        assert_eq!(user_keys(copy.store.inner().as_ref()), model);
    };
    open_elsewhere(Some(&newer));

    let manifest = Path::new("/").join(&newer.path);
    let good_manifest = std::fs::read(&manifest).unwrap();
    let files = snapshot_files(&newer);
    let sst = files
        .iter()
        .find(|file| file.extension().is_some_and(|ext| ext == "sst"))
        .expect("an SST file")
        .clone();
    let good_sst = std::fs::read(&sst).unwrap();

    // A byte of an SST file flipped: its CRC-32C is wrong.
    let mut bad = good_sst.clone();
    let middle = bad.len() / 2;
    bad[middle] ^= 0x01;
    std::fs::write(&sst, &bad).unwrap();
    open_elsewhere(Some(&older));
    std::fs::write(&sst, &good_sst).unwrap();
    open_elsewhere(Some(&newer));

    // A file missing.
    std::fs::remove_file(&sst).unwrap();
    open_elsewhere(Some(&older));
    std::fs::write(&sst, &good_sst).unwrap();

    // The manifest cut short.
    std::fs::write(&manifest, &good_manifest[..good_manifest.len() - 7]).unwrap();
    open_elsewhere(Some(&older));

    // The older one corrupt too (its manifest's last byte): the whole changelog is replayed.
    let older_manifest = Path::new("/").join(&older.path);
    let mut bad = std::fs::read(&older_manifest).unwrap();
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    std::fs::write(&older_manifest, &bad).unwrap();
    open_elsewhere(None);
}

/// Retention deletes every file of an old snapshot of RocksDB's files, not only its manifest.
#[test]
fn retention_deletes_every_file_of_an_old_snapshot() {
    let Some(bootstrap) = kafka_support::bootstrap("retention_deletes_every_file") else {
        return;
    };
    let kafka = kafka_support::config(&bootstrap, "retained");
    let (here, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let snapshots = snapshot_store(objects.path(), 2);
    let mut rng = StdRng::seed_from_u64(13);
    let mut model = Model::new();
    let (original, _) = open_snapshotted(here.path(), &kafka, &snapshots);
    let mut taken = Vec::new();
    for _ in 0..3 {
        write_and_commit(&original.store, &mut model, &mut rng, 2);
        taken.push(original.store.snapshot().unwrap().expect("committed"));
    }
    let listed = snapshots.list(&taken[0].topic, 0).unwrap();
    assert_eq!(listed, vec![taken[2].clone(), taken[1].clone()]);
    let oldest = Path::new("/").join(&taken[0].path);
    assert!(!oldest.exists(), "the manifest is deleted");
    let files = oldest.with_extension("files");
    let left = std::fs::read_dir(&files).map_or(0, |entries| entries.count());
    assert_eq!(left, 0, "every file of {} is deleted", files.display());
    assert!(!snapshot_files(&taken[1]).is_empty());
}

/// The store's pairs without the fence's [`EPOCH_KEY`], which the model does not hold.
fn user_keys(store: &dyn KeyValueStore) -> Model {
    let mut pairs = scan(store);
    pairs.remove(statestore_changelog::EPOCH_KEY);
    pairs
}

/// A snapshot store in `dir`.
fn snapshot_store(dir: &Path, keep: usize) -> Arc<statestore_changelog::SnapshotStore> {
    Arc::new(
        statestore_changelog::SnapshotStore::open(&statestore_changelog::SnapshotConfig {
            url: format!("file://{}", dir.display()),
            keep,
            ..statestore_changelog::SnapshotConfig::default()
        })
        .expect("a snapshot store"),
    )
}

/// The bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| match entry.file_type() {
                    Ok(kind) if kind.is_dir() => bytes_under(&entry.path()),
                    _ => entry.metadata().map_or(0, |meta| meta.len()),
                })
                .sum()
        })
        .unwrap_or(0)
}

/// The figure of `docs/durability.md` ("Snapshots"): a store of `STATESTORE_SNAPSHOT_KEYS`
/// keys (default 1 000 000; 100-byte values) on a new machine, ready from a snapshot of
/// RocksDB's files and an empty tail, from an engine-neutral export and an empty tail, and by
/// a replay of the whole changelog, in one run. Run with
/// `cargo test --release -p statestore-changelog --test kafka_restore snapshot_bootstrap_figure -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run it by hand with --ignored"]
fn snapshot_bootstrap_figure() {
    let Some(bootstrap) = kafka_support::bootstrap("snapshot_bootstrap_figure") else {
        return;
    };
    let keys: u64 = std::env::var("STATESTORE_SNAPSHOT_KEYS")
        .ok()
        .and_then(|keys| keys.parse().ok())
        .unwrap_or(1_000_000);
    let kafka = kafka_support::config(&bootstrap, "figure");
    let dirs: Vec<_> = (0..7).map(|_| tempfile::tempdir().unwrap()).collect();
    let files_store = snapshot_store(dirs[3].path(), 3);
    let export_store = snapshot_store(dirs[4].path(), 3);
    // All bytes 7 (compressed by RocksDB to about nothing), or with
    // `STATESTORE_SNAPSHOT_RANDOM_VALUES=1` pseudo-random bytes that do not compress.
    let random = std::env::var("STATESTORE_SNAPSHOT_RANDOM_VALUES").is_ok_and(|on| on == "1");
    let mut rng = StdRng::seed_from_u64(5);
    let (original, _) = open_snapshotted(dirs[0].path(), &kafka, &files_store);
    let started = Instant::now();
    let mut value = [7u8; 100];
    for i in 0..keys {
        if random {
            rng.fill(&mut value[..]);
        }
        original
            .store
            .put(format!("key{i:012}").as_bytes(), &value)
            .unwrap();
        if i % 50_000 == 49_999 {
            original.store.commit().unwrap();
        }
    }
    original.store.commit().unwrap();
    let written = started.elapsed();
    let started = Instant::now();
    let taken = original.store.snapshot().unwrap().expect("committed");
    let files_took = started.elapsed();
    assert!(taken.is_files());
    // The engine-neutral export of the same state, as any other backend's snapshot.
    let started = Instant::now();
    let body = statestore_changelog::export_snapshot(
        &taken.topic,
        0,
        taken.offset,
        taken.epoch,
        original.store.inner().as_ref(),
    )
    .unwrap();
    let exported = export_store
        .upload(&taken.topic, 0, taken.offset, taken.epoch, body)
        .unwrap();
    let export_took = started.elapsed();
    drop(original);
    let files_bytes = bytes_under(dirs[3].path());
    let export_bytes = bytes_under(dirs[4].path());

    let started = Instant::now();
    let (from_files, restore) = open_snapshotted(dirs[1].path(), &kafka, &files_store);
    let files_ready = started.elapsed();
    assert_eq!(from_files.store.bootstrapped_from(), Some(&taken));
    assert_eq!(restore.records, 0, "an empty tail");
    // The files' share of that: downloaded and checked into another store, and opened.
    let scratch = tempfile::tempdir().unwrap();
    let rocksdb = statestore::open("rocksdb", scratch.path(), &serde_json::Value::Null).unwrap();
    let started = Instant::now();
    assert!(
        files_store
            .restore_files(&taken, rocksdb.checkpoints().expect("rocksdb checkpoints"))
            .unwrap()
    );
    let files_restore_took = started.elapsed();
    drop(rocksdb);

    let started = Instant::now();
    let (from_export, restore) = open_snapshotted(dirs[2].path(), &kafka, &export_store);
    let export_ready = started.elapsed();
    assert_eq!(from_export.store.bootstrapped_from(), Some(&exported));
    assert_eq!(
        restore.records, 1,
        "a tail of one record: the fence of the machine before"
    );
    let started = Instant::now();
    let snapshot = export_store.read(&exported).unwrap().expect("present");
    let read_took = started.elapsed();
    let started = Instant::now();
    let scratch = tempfile::tempdir().unwrap();
    let rocksdb = statestore::open("rocksdb", scratch.path(), &serde_json::Value::Null).unwrap();
    snapshot.load_into(rocksdb.as_ref()).unwrap();
    rocksdb.flush().unwrap();
    let load_took = started.elapsed();
    drop((rocksdb, snapshot));

    let no_snapshots = snapshot_store(dirs[5].path(), 3);
    let started = Instant::now();
    let (replayed, _) = open_snapshotted(dirs[6].path(), &kafka, &no_snapshots);
    let replay_ready = started.elapsed();
    // Every key and the epoch keys of the three fences before it.
    assert_eq!(replayed.store.restored().records, keys + 3);
    let count = |machine: &Machine| {
        machine
            .store
            .inner()
            .range(Bound::Unbounded, Bound::Unbounded)
            .unwrap()
            .count()
    };
    // The fence's epoch key besides the user's.
    for machine in [&from_files, &from_export, &replayed] {
        assert_eq!(count(machine), keys as usize + 1);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    println!(
        "snapshot figure: {keys} keys, {} values; written and committed to Kafka in {:.1}s; \
         full changelog replay (RocksDB bulk load) {:.2}s; \
         RocksDB files: {:.1} MiB taken in {:.2}s, ready in {:.2}s (download, check and open \
         {:.2}s): {:.1}x; \
         export: {:.1} MiB taken in {:.2}s, ready in {:.2}s (read and check {:.2}s, load \
         {:.2}s): {:.1}x; load average {}",
        if random { "random" } else { "constant" },
        written.as_secs_f64(),
        replay_ready.as_secs_f64(),
        mib(files_bytes),
        files_took.as_secs_f64(),
        files_ready.as_secs_f64(),
        files_restore_took.as_secs_f64(),
        replay_ready.as_secs_f64() / files_ready.as_secs_f64(),
        mib(export_bytes),
        export_took.as_secs_f64(),
        export_ready.as_secs_f64(),
        read_took.as_secs_f64(),
        load_took.as_secs_f64(),
        replay_ready.as_secs_f64() / export_ready.as_secs_f64(),
        load.trim()
    );
}

/// `KafkaClients::flush` returns only once every record sent through the clients was
/// reported: a caller that flushed finds none of its records in flight.
#[test]
fn a_flush_returns_once_every_record_sent_is_reported() {
    use statestore_changelog::{Deliveries, KafkaClients};

    let Some(bootstrap) = kafka_support::bootstrap("a_flush_returns_once_every_record") else {
        return;
    };
    let kafka = kafka_support::config(&bootstrap, "flushed");
    let clients = KafkaClients::new(&kafka).expect("clients");
    // Opening the log creates its topic, which the records below go to.
    let _log = clients.open(kafka.clone(), 0).expect("kafka log");
    let deliveries = Arc::new(Deliveries::default());
    for n in 0..5_000u32 {
        let key = n.to_be_bytes();
        clients
            .send(&kafka.topic(), Some(&key), Some(b"v"), &deliveries)
            .expect("send");
    }
    clients.flush().expect("flush");
    deliveries
        .wait(Duration::ZERO)
        .expect("no record in flight after the flush");
    assert_eq!(deliveries.first_failure(), None);
}
