//! Threads: visibility across threads, owned iterators, and what an iterator may see of
//! writes made while it runs, checked against the declared `snapshot_iterators`.
//!
//! The cases that depend on iterator consistency run in both modes, with the stronger checks
//! for snapshot iterators; none is skipped.

use std::collections::BTreeMap;
use std::ops::Bound::Unbounded;

use store_api::{KeyValueStore, KvIter, KvPair};

use super::support::{all, drain, get, put_all, reverse_scan};
use crate::{StoreFactory, StoreFixture};

/// A write returned in one thread is visible to a read started afterwards in another.
pub fn writes_are_visible_across_threads(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    std::thread::scope(|scope| {
        scope
            .spawn(|| store.put(b"from thread", b"1").expect("put"))
            .join()
            .expect("writer");
    });
    assert_eq!(get(store, b"from thread"), Some(b"1".to_vec()));
    store.put(b"from main", b"2").expect("put");
    let seen = std::thread::scope(|scope| scope.spawn(|| get(store, b"from main")).join());
    assert_eq!(seen.expect("reader"), Some(b"2".to_vec()));
}

const WRITERS: u8 = 4;
const KEYS_PER_WRITER: u16 = 250;

/// Writers on separate threads, mixing `put`, `write` and `put_if_absent` on distinct keys,
/// lose nothing: afterwards every key holds its writer's value.
pub fn concurrent_writers_lose_nothing(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            scope.spawn(move || {
                for i in 0..KEYS_PER_WRITER {
                    let key = [&[writer][..], &i.to_be_bytes()].concat();
                    match i % 3 {
                        0 => store.put(&key, &[writer]).expect("put"),
                        1 => store
                            .write([op(&key, writer)].into_iter().collect())
                            .expect("write"),
                        _ => assert_eq!(store.put_if_absent(&key, &[writer]).expect("pia"), None),
                    }
                }
            });
        }
    });
    let entries = all(store);
    assert_eq!(
        entries.len(),
        usize::from(WRITERS) * usize::from(KEYS_PER_WRITER)
    );
    for (key, value) in entries {
        assert_eq!(
            value,
            vec![key[0]],
            "key {key:?} holds another writer's value"
        );
    }
}

fn op(key: &[u8], writer: u8) -> store_api::BatchOp {
    store_api::BatchOp::Put {
        key: key.to_vec(),
        value: vec![writer],
    }
}

/// Makes an iterator and ends the borrow of the store: the iterator is owned.
fn detached(store: &dyn KeyValueStore, reverse: bool) -> KvIter {
    let made = if reverse {
        store.reverse_prefix_scan(b"")
    } else {
        store.range(Unbounded, Unbounded)
    };
    made.expect("creating an iterator")
}

/// Iterators are owned (`'static + Send`): they outlive the borrow that made them, move to
/// another thread, and may be consumed there in part and then on a third thread.
pub fn iterators_are_owned_and_send(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let entries: [(&[u8], &[u8]); 3] = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")];
    put_all(fx.store(), &entries);
    let expected: Vec<KvPair> = entries
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    let (forward, reverse) = (detached(fx.store(), false), detached(fx.store(), true));
    let mut forward = std::thread::spawn(move || {
        let mut forward = forward;
        let first = forward.next().expect("an item").expect("an entry");
        (first, forward)
    });
    let reversed = std::thread::spawn(move || drain(reverse, "reverse scan on another thread"));
    let (first, rest) = forward.join().expect("first thread");
    forward = std::thread::spawn(move || (first, rest));
    let (first, rest) = forward.join().expect("second thread");
    let mut seen = vec![first];
    seen.extend(drain(rest, "forward scan finished on a third thread"));
    assert_eq!(seen, expected);
    let mut descending = expected;
    descending.reverse();
    assert_eq!(reversed.join().expect("reverse thread"), descending);
}

/// What a single-threaded iterator test allows per key after the writes: the values it may
/// show, `None` meaning it may be missing.
type Allowed = BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>>;

/// The values one key may show, as written in a case.
type Choices<'a> = &'a [Option<&'a [u8]>];

/// Checks the rest of an iterator against the declared consistency: for snapshots exactly
/// `snapshot`, for weak iterators keys strictly in scan order, each once, with an allowed
/// value, and every key that cannot be missing present.
fn check_rest(
    store: &dyn KeyValueStore,
    descending: bool,
    rest: &[KvPair],
    snapshot: &[KvPair],
    allowed: &Allowed,
) {
    if store.capabilities().snapshot_iterators {
        assert_eq!(
            rest, snapshot,
            "a snapshot iterator saw writes made after its creation"
        );
        return;
    }
    for pair in rest.windows(2) {
        let in_order = if descending {
            pair[0].0 > pair[1].0
        } else {
            pair[0].0 < pair[1].0
        };
        assert!(
            in_order,
            "keys out of order or repeated: {:?}, {:?}",
            pair[0].0, pair[1].0
        );
    }
    for (key, value) in rest {
        let choices = allowed
            .get(key)
            .unwrap_or_else(|| panic!("unexpected key {key:?}"));
        assert!(
            choices.contains(&Some(value.clone())),
            "key {key:?}: value {value:?}"
        );
    }
    for (key, choices) in allowed {
        if !choices.contains(&None) {
            assert!(
                rest.iter().any(|(k, _)| k == key),
                "key {key:?} existed and was missed"
            );
        }
    }
}

fn allowed(entries: &[(&[u8], Choices<'_>)]) -> Allowed {
    let to_owned = |choice: &Option<&[u8]>| choice.map(<[u8]>::to_vec);
    entries
        .iter()
        .map(|(key, choices)| (key.to_vec(), choices.iter().map(to_owned).collect()))
        .collect()
}

fn pairs(entries: &[(&[u8], &[u8])]) -> Vec<KvPair> {
    entries
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

/// A forward iterator, after its first item, meets puts ahead of and behind its position, an
/// overwrite and deletes. A snapshot iterator shows none of them; a weak one shows keys
/// strictly ascending, each once, only values that were written, and every untouched key.
/// A new iterator afterwards sees every write.
pub fn iterator_consistency_forward(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    put_all(
        store,
        &[
            (b"a", b"1"),
            (b"c", b"1"),
            (b"e", b"1"),
            (b"g", b"1"),
            (b"i", b"1"),
            (b"k", b"1"),
        ],
    );
    let mut iter = store.range(Unbounded, Unbounded).expect("range");
    let first = iter.next().expect("an item").expect("an entry");
    assert_eq!(first, (b"a".to_vec(), b"1".to_vec()));
    put_all(
        store,
        &[(b"0", b"new"), (b"b", b"new"), (b"g", b"2"), (b"z", b"new")],
    );
    store.delete(b"e").expect("delete");
    store.delete(b"i").expect("delete");
    let rest = drain(iter, "forward iterator during writes");
    let snapshot = pairs(&[
        (b"c", b"1"),
        (b"e", b"1"),
        (b"g", b"1"),
        (b"i", b"1"),
        (b"k", b"1"),
    ]);
    let (one, two, new): (&[u8], &[u8], &[u8]) = (b"1", b"2", b"new");
    let allowed = allowed(&[
        (b"b", &[None, Some(new)]),
        (b"c", &[Some(one)]),
        (b"e", &[None, Some(one)]),
        (b"g", &[Some(one), Some(two)]),
        (b"i", &[None, Some(one)]),
        (b"k", &[Some(one)]),
        (b"z", &[None, Some(new)]),
    ]);
    check_rest(store, false, &rest, &snapshot, &allowed);
    let expected = pairs(&[
        (b"0", b"new"),
        (b"a", b"1"),
        (b"b", b"new"),
        (b"c", b"1"),
        (b"g", b"2"),
        (b"k", b"1"),
        (b"z", b"new"),
    ]);
    assert_eq!(
        all(store),
        expected,
        "a new iterator sees every completed write"
    );
}

/// As [`iterator_consistency_forward`], for a reverse iterator: keys strictly descend and
/// writes behind its position (greater keys) are never seen.
pub fn iterator_consistency_reverse(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    put_all(
        store,
        &[
            (b"a", b"1"),
            (b"c", b"1"),
            (b"e", b"1"),
            (b"g", b"1"),
            (b"i", b"1"),
            (b"k", b"1"),
        ],
    );
    let mut iter = store
        .reverse_range(Unbounded, Unbounded)
        .expect("reverse_range");
    let first = iter.next().expect("an item").expect("an entry");
    assert_eq!(first, (b"k".to_vec(), b"1".to_vec()));
    put_all(
        store,
        &[(b"z", b"new"), (b"j", b"new"), (b"e", b"2"), (b"0", b"new")],
    );
    store.delete(b"g").expect("delete");
    store.delete(b"c").expect("delete");
    let rest = drain(iter, "reverse iterator during writes");
    let snapshot = pairs(&[
        (b"i", b"1"),
        (b"g", b"1"),
        (b"e", b"1"),
        (b"c", b"1"),
        (b"a", b"1"),
    ]);
    let (one, two, new): (&[u8], &[u8], &[u8]) = (b"1", b"2", b"new");
    let allowed = allowed(&[
        (b"0", &[None, Some(new)]),
        (b"a", &[Some(one)]),
        (b"c", &[None, Some(one)]),
        (b"e", &[Some(one), Some(two)]),
        (b"g", &[None, Some(one)]),
        (b"i", &[Some(one)]),
        (b"j", &[None, Some(new)]),
    ]);
    check_rest(store, true, &rest, &snapshot, &allowed);
    let descending = reverse_scan(store, Unbounded, Unbounded);
    let keys: Vec<&[u8]> = descending.iter().map(|(k, _)| k.as_slice()).collect();
    let expected: [&[u8]; 7] = [b"z", b"k", b"j", b"i", b"e", b"a", b"0"];
    assert_eq!(keys, expected, "a new iterator sees every completed write");
}
