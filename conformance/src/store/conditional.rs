//! `put_if_absent`: writes only when the key is absent, atomically with other writes.

use std::sync::Barrier;

use store_api::KeyValueStore;

use super::support::{all, get};
use crate::{StoreFactory, StoreFixture};

/// On an absent key `put_if_absent` returns `None` and writes the value.
pub fn put_if_absent_writes_when_absent(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let previous = fx.store().put_if_absent(b"k", b"v").expect("put_if_absent");
    assert_eq!(previous, None, "nothing was there");
    assert_eq!(get(fx.store(), b"k"), Some(b"v".to_vec()));
}

/// On a present key `put_if_absent` returns the existing value and leaves it unchanged.
pub fn put_if_absent_keeps_existing(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"k", b"original").expect("put");
    let previous = fx
        .store()
        .put_if_absent(b"k", b"intruder")
        .expect("put_if_absent");
    assert_eq!(previous, Some(b"original".to_vec()));
    assert_eq!(get(fx.store(), b"k"), Some(b"original".to_vec()));
    let again = fx
        .store()
        .put_if_absent(b"k", b"intruder")
        .expect("put_if_absent");
    assert_eq!(
        again,
        Some(b"original".to_vec()),
        "a refused write changes nothing"
    );
}

/// An empty value is present: `put_if_absent` over it returns `Some(vec![])` and writes
/// nothing; an empty value can also be the one written.
pub fn put_if_absent_respects_empty_value(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"k", b"").expect("put of an empty value");
    let previous = fx.store().put_if_absent(b"k", b"v").expect("put_if_absent");
    assert_eq!(previous, Some(Vec::new()));
    assert_eq!(get(fx.store(), b"k"), Some(Vec::new()));
    let written = fx.store().put_if_absent(b"e", b"").expect("put_if_absent");
    assert_eq!(written, None);
    assert_eq!(get(fx.store(), b"e"), Some(Vec::new()));
}

/// A deleted key is absent again: `put_if_absent` writes it.
pub fn put_if_absent_after_delete(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    fx.store().put(b"k", b"old").expect("put");
    fx.store().delete(b"k").expect("delete");
    let previous = fx
        .store()
        .put_if_absent(b"k", b"new")
        .expect("put_if_absent");
    assert_eq!(previous, None);
    assert_eq!(get(fx.store(), b"k"), Some(b"new".to_vec()));
}

/// The empty key works with `put_if_absent` like any other.
pub fn put_if_absent_empty_key(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    assert_eq!(fx.store().put_if_absent(b"", b"1").expect("first"), None);
    assert_eq!(
        fx.store().put_if_absent(b"", b"2").expect("second"),
        Some(b"1".to_vec())
    );
    assert_eq!(all(fx.store()), vec![(Vec::new(), b"1".to_vec())]);
}

const RACERS: usize = 4;
const RACE_KEYS: usize = 200;

/// Threads racing `put_if_absent` on the same keys: for each key exactly one thread gets
/// `None`, every other thread gets the winner's value, and the store holds the winner's value.
pub fn put_if_absent_race_has_one_winner(factory: &dyn StoreFactory) {
    let fx = StoreFixture::new(factory);
    let store = fx.store();
    // Every racer starts each key together with the others, so the calls really overlap.
    // Racers never panic between barriers (errors are returned), so none can strand the others
    // at a barrier.
    let barrier = &Barrier::new(RACERS);
    let outcomes: Vec<Vec<Outcome>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..RACERS)
            .map(|racer| scope.spawn(move || race(store, barrier, racer)))
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a racer panicked"))
            .collect()
    });
    for key in 0..RACE_KEYS {
        let results: Vec<&Outcome> = outcomes.iter().map(|per_key| &per_key[key]).collect();
        check_race(store, key, &results);
    }
}

/// Checks one raced key: one winner, every loser saw the winner's value, and it is stored.
fn check_race(store: &dyn KeyValueStore, key: usize, results: &[&Outcome]) {
    let previous: Vec<&Option<Vec<u8>>> = results
        .iter()
        .enumerate()
        .map(|(racer, outcome)| match outcome {
            Ok(previous) => previous,
            Err(err) => panic!("racer {racer}, key {key}: put_if_absent failed: {err}"),
        })
        .collect();
    let winners: Vec<usize> = (0..previous.len())
        .filter(|&r| previous[r].is_none())
        .collect();
    assert_eq!(winners.len(), 1, "key {key}: winners {winners:?}");
    let winning_value = racer_value(winners[0]);
    for (racer, seen) in previous.iter().enumerate() {
        if racer != winners[0] {
            assert_eq!(
                seen.as_ref(),
                Some(&winning_value),
                "key {key}, racer {racer}"
            );
        }
    }
    assert_eq!(get(store, &race_key(key)), Some(winning_value), "key {key}");
}

type Outcome = store_api::Result<Option<Vec<u8>>>;

fn race_key(key: usize) -> Vec<u8> {
    format!("race/{key:03}").into_bytes()
}

fn racer_value(racer: usize) -> Vec<u8> {
    format!("racer {racer}").into_bytes()
}

/// One racer: `put_if_absent` of its own value on every key, in step with the others.
fn race(store: &dyn KeyValueStore, barrier: &Barrier, racer: usize) -> Vec<Outcome> {
    (0..RACE_KEYS)
        .map(|key| {
            barrier.wait();
            store.put_if_absent(&race_key(key), &racer_value(racer))
        })
        .collect()
}
