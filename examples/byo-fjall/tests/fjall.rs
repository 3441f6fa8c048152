//! fjall-specific behaviour the conformance suite covers only at its edges: keys longer than
//! fjall takes (kept in buckets) in every operation, in order, across a reopen.

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use byo_fjall::{Config, FjallStore};
use store_api::limits::MAX_KEY_LEN;
use store_api::{KeyValueStore, WriteBatch};

fn keys(store: &FjallStore, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Vec<Vec<u8>> {
    let iter = if reverse {
        store.reverse_range(from, to)
    } else {
        store.range(from, to)
    }
    .expect("range");
    iter.map(|pair| pair.expect("pair").0).collect()
}

#[test]
fn long_keys_share_buckets_and_keep_their_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = vec![b'p'; MAX_KEY_LEN - 1];
    let with = |byte: u8| [prefix.as_slice(), &[byte]].concat();
    let short = b"p".to_vec();
    let after = b"q".to_vec();
    let store = FjallStore::open(dir.path(), &Config::default()).expect("open");
    store.put(&with(9), b"nine").expect("put");
    store.put(&prefix, b"prefix").expect("put");
    store.put(&short, b"short").expect("put");
    let mut batch = WriteBatch::new();
    batch
        .put(with(0), b"zero".to_vec())
        .put(with(200), b"two hundred".to_vec())
        .delete(with(9))
        .put(after.clone(), b"after".to_vec())
        .put(with(9), b"nine again".to_vec());
    store.write(batch).expect("batch");
    assert_eq!(
        store.put_if_absent(&with(0), b"x").expect("pia"),
        Some(b"zero".to_vec())
    );
    assert_eq!(store.put_if_absent(&with(1), b"one").expect("pia"), None);
    store.delete(&with(200)).expect("delete");

    let expected = vec![
        short.clone(),
        prefix.clone(),
        with(0),
        with(1),
        with(9),
        after.clone(),
    ];
    assert_eq!(keys(&store, Unbounded, Unbounded, false), expected);
    let mut reversed = expected.clone();
    reversed.reverse();
    assert_eq!(keys(&store, Unbounded, Unbounded, true), reversed);
    assert_eq!(
        keys(&store, Excluded(&with(0)), Included(&with(9)), false),
        [with(1), with(9)]
    );
    assert_eq!(
        keys(&store, Excluded(&prefix), Excluded(&with(9)), true),
        [with(1), with(0)]
    );
    store.close().expect("close");

    let store = FjallStore::open(dir.path(), &Config::default()).expect("reopen");
    assert_eq!(
        store.get(&with(9)).expect("get"),
        Some(b"nine again".to_vec())
    );
    assert_eq!(store.get(&with(200)).expect("get"), None);
    assert_eq!(store.get(&prefix).expect("get"), Some(b"prefix".to_vec()));
    assert_eq!(keys(&store, Unbounded, Unbounded, false), expected);
}
