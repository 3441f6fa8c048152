//! Each disk adapter writes what its backend reads: the abstraction bench measures the store
//! API on the directory the native adapter preloaded, so the adapter must use the backend's
//! file names, table, tree and column family, and hand the directory over when it closes.

use std::ops::Bound;

use statestore_benches::data::{self, VALUE_LEN};
use statestore_benches::native::{DiskTarget, RedbTarget, RocksDbTarget, SledTarget};
use statestore_benches::{open_store, preload};

const RECORDS: u64 = 2_500;

/// Preloads, settles and closes natively, reopens natively (as the bench does), then opens the
/// backend on the same directory and reads every record back.
fn backend_reads_what_the_adapter_wrote<N: DiskTarget>() {
    let backend = N::BACKEND;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");

    let native = N::open(&path).expect("open");
    preload(&native, RECORDS, VALUE_LEN, |_| {}).expect("preload");
    native.settle().expect("settle");
    native.close().expect("close");

    let native = N::open(&path).expect("reopen");
    let last = data::key(RECORDS - 1);
    assert_eq!(
        native.get(&last).expect("get"),
        Some(VALUE_LEN),
        "{backend}"
    );
    native.settle().expect("settle again");
    native.close().expect("close again");

    let store = open_store(backend, &path).expect("open the backend");
    let pairs = store
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .collect::<Result<Vec<_>, _>>()
        .expect("pairs");
    assert_eq!(pairs.len() as u64, RECORDS, "{backend}");
    assert_eq!(pairs[0].0, data::key(0).to_vec(), "{backend}");
    assert!(
        pairs.iter().all(|(_, value)| value.len() == VALUE_LEN),
        "{backend}"
    );
    store.close().expect("close the backend");
}

#[test]
fn rocksdb_backend_reads_the_adapter_directory() {
    backend_reads_what_the_adapter_wrote::<RocksDbTarget>();
}

#[test]
fn sled_backend_reads_the_adapter_directory() {
    backend_reads_what_the_adapter_wrote::<SledTarget>();
}

#[test]
fn redb_backend_reads_the_adapter_directory() {
    backend_reads_what_the_adapter_wrote::<RedbTarget>();
}
