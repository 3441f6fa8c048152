//! Cases of the typed and timestamped stores.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Bound;

use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, prop_oneof};
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use store_api::ErrorKind;

use super::support::{check, collect, fail, run_model};
use super::{Mode, OperatorFixture, StoreFactory};
use crate::{Json, TimestampedStore, TypedStore, ValueAndTimestamp};

/// The key of the model test: a string and a signed integer, so order depends on escaping,
/// termination and sign handling at once.
type Key = (String, i32);
type Model = BTreeMap<Key, u32>;

#[derive(Debug, Clone)]
enum Op {
    Put(Key, u32),
    PutReturningOld(Key, u32),
    PutIfAbsent(Key, u32),
    Delete(Key),
    DeleteReturningOld(Key),
    Write(Vec<(Key, Option<u32>)>),
    Get(Key),
    Range(Bound<Key>, Bound<Key>),
    ReverseRange(Bound<Key>, Bound<Key>),
    Prefix(String),
    Commit,
    Reopen,
}

fn key() -> impl Strategy<Value = Key> {
    let text = select(vec![
        "", "\0", "\u{1}", "a", "a\0", "a\u{1}", "ab", "\u{ff}",
    ]);
    let number = select(vec![i32::MIN, -2, -1, 0, 1, 2, i32::MAX]);
    (text, number).prop_map(|(text, number)| (text.to_string(), number))
}

fn bound() -> impl Strategy<Value = Bound<Key>> {
    prop_oneof![
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
        Just(Bound::Unbounded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let value = 0_u32..4;
    prop_oneof![
        4 => (key(), value.clone()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (key(), value.clone()).prop_map(|(k, v)| Op::PutReturningOld(k, v)),
        1 => (key(), value.clone()).prop_map(|(k, v)| Op::PutIfAbsent(k, v)),
        1 => key().prop_map(Op::Delete),
        2 => key().prop_map(Op::DeleteReturningOld),
        1 => vec((key(), proptest::option::of(value)), 0..4).prop_map(Op::Write),
        2 => key().prop_map(Op::Get),
        1 => (bound(), bound()).prop_map(|(from, to)| Op::Range(from, to)),
        1 => (bound(), bound()).prop_map(|(from, to)| Op::ReverseRange(from, to)),
        1 => select(vec!["", "a", "a\0", "b"]).prop_map(|p| Op::Prefix(p.to_string())),
        1 => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

fn in_bounds(key: &Key, from: &Bound<Key>, to: &Bound<Key>) -> bool {
    let after_from = match from {
        Bound::Included(from) => key >= from,
        Bound::Excluded(from) => key > from,
        Bound::Unbounded => true,
    };
    let before_to = match to {
        Bound::Included(to) => key <= to,
        Bound::Excluded(to) => key < to,
        Bound::Unbounded => true,
    };
    after_from && before_to
}

/// Applies one operation to the store and the model, checking every answer.
fn step(fx: &mut OperatorFixture<'_>, model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let store: TypedStore<Key, u32> = TypedStore::new(fx.store());
    match op {
        Op::Put(k, v) => {
            store.put(k, v).map_err(fail)?;
            model.insert(k.clone(), *v);
        }
        Op::PutReturningOld(k, v) => {
            let old = store.put_returning_old(k, v).map_err(fail)?;
            check("put_returning_old", old, model.insert(k.clone(), *v))?;
        }
        Op::PutIfAbsent(k, v) => {
            let existing = store.put_if_absent(k, v).map_err(fail)?;
            check("put_if_absent", existing, model.get(k).copied())?;
            model.entry(k.clone()).or_insert(*v);
        }
        Op::Delete(k) => {
            store.delete(k).map_err(fail)?;
            model.remove(k);
        }
        Op::DeleteReturningOld(k) => {
            let old = store.delete_returning_old(k).map_err(fail)?;
            check("delete_returning_old", old, model.remove(k))?;
        }
        Op::Write(ops) => {
            store
                .write(ops.iter().map(|(k, v)| (k, v.as_ref())))
                .map_err(fail)?;
            for (k, v) in ops {
                match v {
                    Some(v) => model.insert(k.clone(), *v),
                    None => model.remove(k),
                };
            }
        }
        Op::Get(k) => check("get", store.get(k).map_err(fail)?, model.get(k).copied())?,
        Op::Range(from, to) => {
            let got = collect(store.range(from.as_ref(), to.as_ref()))?;
            let want: Vec<_> = model
                .iter()
                .filter(|(k, _)| in_bounds(k, from, to))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            check("range", got, want)?;
        }
        Op::ReverseRange(from, to) => {
            let got = collect(store.reverse_range(from.as_ref(), to.as_ref()))?;
            let want: Vec<_> = model
                .iter()
                .rev()
                .filter(|(k, _)| in_bounds(k, from, to))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            check("reverse_range", got, want)?;
        }
        Op::Prefix(prefix) => {
            let got = collect(store.prefix_scan(prefix))?;
            let want: Vec<_> = model
                .iter()
                .filter(|((text, _), _)| text == prefix)
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            check("prefix_scan", got, want)?;
        }
        Op::Commit => fx.commit(),
        Op::Reopen => {
            drop(store);
            fx.reopen();
        }
    }
    Ok(())
}

/// Random sequences of typed operations, checked after each against a `BTreeMap` of the
/// typed keys: answers, the order of ranges (the logical order of `(String, i32)`), the old
/// values returned, and everything again after reopening or restoring from the changelog.
pub fn model(factory: &dyn StoreFactory, mode: Mode) {
    run_model("typed store", mode, vec(op(), 1..40), |ops| {
        let mut fx = OperatorFixture::new(factory, mode);
        let mut model = Model::new();
        for op in &ops {
            step(&mut fx, &mut model, op)?;
        }
        Ok(())
    });
}

/// Typed scans follow the logical order of integers, strings with 0x00 and 0x01 inside,
/// byte strings, tuples whose first element is a prefix of another's, and derived structs.
pub fn logical_key_order(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    check_order(&fx, vec![i64::MIN, -300, -1, 0, 1, 255, 256, i64::MAX]);
    check_order(&fx, vec![0_u64, 1, 255, 256, u64::MAX]);
    check_order(
        &fx,
        [
            "", "\0", "\0\0", "\u{1}", "a", "a\0", "a\0b", "a\u{1}", "ab", "b", "é",
        ]
        .map(String::from)
        .to_vec(),
    );
    check_order(
        &fx,
        vec![
            vec![],
            vec![0_u8],
            vec![0, 0],
            vec![0, 1],
            vec![1],
            vec![255],
        ],
    );
    check_order(
        &fx,
        vec![
            ("a".to_string(), 5_i32),
            ("a".to_string(), 7),
            ("a\0".to_string(), -9),
            ("ab".to_string(), -9),
            ("b".to_string(), i32::MIN),
        ],
    );
    check_order(
        &fx,
        vec![
            Account {
                region: 1,
                name: "zed".into(),
            },
            Account {
                region: 2,
                name: "".into(),
            },
            Account {
                region: 2,
                name: "ann".into(),
            },
        ],
    );
}

/// A struct key: ordered by region, then name, as `derive(Ord)` orders it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, storekey::Encode, storekey::Decode)]
struct Account {
    region: u16,
    name: String,
}

/// Writes `keys` (sorted) in reverse and checks that scans return them sorted, forward and
/// backward.
fn check_order<K>(fx: &OperatorFixture<'_>, mut keys: Vec<K>)
where
    K: Ord + Clone + Debug + storekey::Encode + storekey::Decode + 'static,
{
    keys.sort();
    let store: TypedStore<K, u32> = TypedStore::new(fx.store());
    for (index, key) in keys.iter().enumerate().rev() {
        store.put(key, &(index as u32)).expect("put");
    }
    let scanned: Vec<K> = store
        .all()
        .expect("scan")
        .map(|e| e.expect("entry").0)
        .collect();
    let reverse: Vec<K> = store
        .reverse_range(Bound::Unbounded, Bound::Unbounded)
        .expect("scan")
        .map(|e| e.expect("entry").0)
        .collect();
    // Emptied for the next key type, whose encodings would interleave with these.
    for key in &keys {
        store.delete(key).expect("delete");
    }
    assert_eq!(
        scanned,
        keys,
        "ascending scan of {}",
        std::any::type_name::<K>()
    );
    keys.reverse();
    assert_eq!(
        reverse,
        keys,
        "descending scan of {}",
        std::any::type_name::<K>()
    );
}

/// A prefix scan by the leading element of a tuple key selects exactly that element's keys,
/// not those whose first element merely starts with the same text.
pub fn prefix_scan_by_leading_elements(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let store: TypedStore<(String, u32, String), u8> = TypedStore::new(fx.store());
    let keys = [
        ("app".to_string(), 1, "x".to_string()),
        ("apple".to_string(), 2, "b".to_string()),
        ("apple".to_string(), 10, "a".to_string()),
        ("apple".to_string(), 10, "b".to_string()),
        ("apple\0".to_string(), 0, String::new()),
        ("apples".to_string(), 0, String::new()),
    ];
    for key in &keys {
        store.put(key, &1).expect("put");
    }
    let first = |prefix: &String| -> Vec<_> {
        let scan = store.prefix_scan(prefix).expect("prefix scan");
        scan.map(|e| e.expect("entry").0).collect()
    };
    assert_eq!(first(&"apple".to_string()), keys[1..4].to_vec());
    let two: Vec<_> = store
        .reverse_prefix_scan(&("apple".to_string(), 10_u32))
        .expect("prefix scan")
        .map(|e| e.expect("entry").0)
        .collect();
    assert_eq!(two, [keys[3].clone(), keys[2].clone()]);
    assert!(
        first(&"ap".to_string()).is_empty(),
        "a prefix of a string is not a key prefix"
    );
}

/// The table aggregation of Kafka Streams: a user moves between regions, and the count per
/// region subtracts the old region using the old value the put returned. The counts stay
/// right across commits and a reopen (a restore when logged).
pub fn old_values(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let moves = [
        ("ann", "eu"),
        ("bob", "us"),
        ("ann", "us"),
        ("cy", "eu"),
        ("bob", "eu"),
    ];
    // Two tables in one store, apart by the first element of their keys.
    type Table<V, VC> = TypedStore<(String, String), V, crate::OrderedKeys, VC>;
    let user = |name: &str| ("user".to_string(), name.to_string());
    let region = |name: &str| ("region".to_string(), name.to_string());
    for (round, (name, to)) in moves.iter().enumerate() {
        let users: Table<String, Json> = TypedStore::new(fx.store());
        let counts: Table<i64, crate::Postcard> = TypedStore::new(fx.store());
        let old = users
            .put_returning_old(&user(name), &to.to_string())
            .expect("put_returning_old");
        if let Some(old) = old {
            let count = counts.get(&region(&old)).expect("get").unwrap_or(0);
            counts.put(&region(&old), &(count - 1)).expect("put");
        }
        let count = counts.get(&region(to)).expect("get").unwrap_or(0);
        counts.put(&region(to), &(count + 1)).expect("put");
        drop((users, counts));
        if round == 2 {
            fx.commit();
            fx.reopen();
        }
    }
    let users: Table<String, Json> = TypedStore::new(fx.store());
    let old = users.delete_returning_old(&user("cy")).expect("delete");
    assert_eq!(old, Some("eu".to_string()));
    assert_eq!(
        users.delete_returning_old(&user("cy")).expect("delete"),
        None
    );
    let counts: Table<i64, crate::Postcard> = TypedStore::new(fx.store());
    let scan = counts.prefix_scan(&"region".to_string()).expect("scan");
    let all: Vec<_> = scan.map(|e| e.expect("entry")).collect();
    assert_eq!(all, [(region("eu"), 2), (region("us"), 1)]);
}

/// A timestamped store keeps the timestamp beside the value, and `put_if_newer` refuses an
/// older record but accepts an equal one, across a reopen.
pub fn timestamped_put_if_newer(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let key = "sensor".to_string();
    {
        let store: TimestampedStore<String, String> = TimestampedStore::new(fx.store());
        let first = ValueAndTimestamp::new("21.5".to_string(), -5);
        assert!(store.put_if_newer(&key, &first).expect("put"));
        let older = ValueAndTimestamp::new("19".to_string(), -6);
        assert!(!store.put_if_newer(&key, &older).expect("put"));
        assert_eq!(store.get(&key).expect("get"), Some(first));
        fx.commit();
    }
    fx.reopen();
    let store: TimestampedStore<String, String> = TimestampedStore::new(fx.store());
    if fx.survives_reopen() {
        let same = ValueAndTimestamp::new("22".to_string(), -5);
        assert!(
            store.put_if_newer(&key, &same).expect("put"),
            "an equal timestamp writes"
        );
        assert_eq!(store.get(&key).expect("get"), Some(same));
    }
    let newest = ValueAndTimestamp::new("30".to_string(), i64::MAX);
    assert!(store.put_if_newer(&key, &newest).expect("put"));
    assert_eq!(store.get(&key).expect("get"), Some(newest));
}

/// Bytes that are not a typed key or value are `Corruption` errors, never panics: a value too
/// short for a timestamp, a value that does not decode, a key that does not decode (which
/// ends a scan).
pub fn undecodable_bytes_are_errors(factory: &dyn StoreFactory, mode: Mode) {
    let fx = OperatorFixture::new(factory, mode);
    let raw = fx.store();
    raw.put(
        &storekey::encode_vec(&"short".to_string()).expect("encode"),
        b"1234",
    )
    .expect("put");
    raw.put(
        &storekey::encode_vec(&"bad".to_string()).expect("encode"),
        &[0xFF; 12],
    )
    .expect("put");
    raw.put(b"\x00\x02not a string key", b"").expect("put");
    let timestamped: TimestampedStore<String, String> = TimestampedStore::new(fx.store());
    let short = timestamped
        .get(&"short".to_string())
        .expect_err("a 4-byte timestamped value");
    assert_eq!(short.kind(), ErrorKind::Corruption);
    let newer = ValueAndTimestamp::new(String::new(), 0);
    let err = timestamped
        .put_if_newer(&"short".to_string(), &newer)
        .expect_err("4 bytes");
    assert_eq!(err.kind(), ErrorKind::Corruption);
    let typed: TypedStore<String, String> = TypedStore::new(fx.store());
    let bad = typed
        .get(&"bad".to_string())
        .expect_err("0xFF is not a postcard string");
    assert_eq!(bad.kind(), ErrorKind::Corruption);
    let mut scan = typed.all().expect("scan");
    let first = scan
        .next()
        .expect("an item")
        .expect_err("the raw key is first and bad");
    assert_eq!(first.kind(), ErrorKind::Corruption);
    assert!(scan.next().is_none(), "a scan ends after its first error");
}
