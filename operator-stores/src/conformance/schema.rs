//! Cases of schema evolution: values written by one version of a type, read by the next.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use store_api::{ErrorKind, Result};

use super::{Mode, OperatorFixture, StoreFactory};
use crate::{
    Evolving, OrderedKeys, Postcard, SCHEMA_MAGIC, Schema, TtlClock, TtlConfig, TtlStore,
    TypedStore, ValueCodec, stored_version,
};

/// Version 1 of a value: a count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CountV1 {
    count: u32,
}

impl Schema for CountV1 {
    const VERSION: u16 = 1;

    fn migrate(_: u16, _: &[u8]) -> Result<Option<Self>> {
        Ok(None)
    }
}

/// Version 2: the count widened and a field added. Values stored before the store used an
/// envelope were plain postcard `CountV1`s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CountV2 {
    count: u64,
    label: String,
}

impl Schema for CountV2 {
    const VERSION: u16 = 2;
    const UNVERSIONED: Option<u16> = Some(1);

    fn migrate(version: u16, bytes: &[u8]) -> Result<Option<Self>> {
        Ok(match version {
            1 => {
                let old: CountV1 = Postcard::decode_value(bytes)?;
                Some(CountV2 {
                    count: u64::from(old.count),
                    label: "migrated".into(),
                })
            }
            _ => None,
        })
    }
}

/// Version 2 once every old value was rewritten: no unversioned values any more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CountV2Strict {
    count: u64,
    label: String,
}

impl Schema for CountV2Strict {
    const VERSION: u16 = 2;

    fn migrate(_: u16, _: &[u8]) -> Result<Option<Self>> {
        Ok(None)
    }
}

type Legacy = TypedStore<String, CountV1>;
type V1 = TypedStore<String, CountV1, OrderedKeys, Evolving>;
type V2 = TypedStore<String, CountV2, OrderedKeys, Evolving>;
type V2Strict = TypedStore<String, CountV2Strict, OrderedKeys, Evolving>;

fn migrated(count: u64) -> CountV2 {
    CountV2 {
        count,
        label: "migrated".into(),
    }
}

fn all_v2(store: &V2) -> Vec<(String, CountV2)> {
    store
        .all()
        .expect("all")
        .collect::<Result<_>>()
        .expect("every value reads as version 2")
}

/// A store written without an envelope, then by version 1 of a type, reopened (restored from
/// the changelog alone when logged) and read by version 2: every value comes back migrated;
/// a value of an unknown version is a `SchemaVersion` error; after `rewrite_old_versions`
/// every stored value is version 2 and reads without the migrations.
pub fn old_versions_read_migrated(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let legacy = Legacy::new(fx.store());
    legacy.put(&"a".into(), &CountV1 { count: 1 }).expect("put");
    let v1 = V1::new(fx.store());
    v1.put(&"b".into(), &CountV1 { count: 2 }).expect("put");
    let raw = |key: &str| {
        let key = <OrderedKeys as crate::KeyCodec<String>>::encode_key(&key.into()).expect("key");
        fx.store().get(&key).expect("get").expect("stored")
    };
    assert_eq!(stored_version(&raw("a")), None, "no envelope");
    assert_eq!(stored_version(&raw("b")), Some(1));
    fx.commit();
    drop((legacy, v1));
    fx.reopen();
    let v2 = V2::new(fx.store());
    v2.put(
        &"c".into(),
        &CountV2 {
            count: 3,
            label: "new".into(),
        },
    )
    .expect("put");
    let expected = vec![
        ("a".to_string(), migrated(1)),
        ("b".to_string(), migrated(2)),
        (
            "c".to_string(),
            CountV2 {
                count: 3,
                label: "new".into(),
            },
        ),
    ];
    assert_eq!(all_v2(&v2), expected, "reopened and read by version 2");
    // A value from the future: version 3.
    let key = <OrderedKeys as crate::KeyCodec<String>>::encode_key(&"z".into()).expect("key");
    let mut future = SCHEMA_MAGIC.to_vec();
    future.extend_from_slice(&3u16.to_be_bytes());
    future.extend_from_slice(b"anything");
    fx.store().put(&key, &future).expect("raw put");
    let err = v2.get(&"z".into()).expect_err("version 3 is unknown");
    assert_eq!(err.kind(), ErrorKind::SchemaVersion, "{err}");
    let err = v2.rewrite_old_versions().expect_err("refused whole");
    assert_eq!(err.kind(), ErrorKind::SchemaVersion, "{err}");
    fx.store().delete(&key).expect("delete");
    assert_eq!(v2.rewrite_old_versions().expect("rewrite"), 2, "a and b");
    fx.commit();
    drop(v2);
    fx.reopen();
    let strict = V2Strict::new(fx.store());
    let read: Vec<_> = strict
        .all()
        .expect("all")
        .collect::<Result<Vec<_>>>()
        .expect("no migration needed");
    assert_eq!(read.len(), 3);
    // Without `UNVERSIONED`, a value without an envelope is refused, not misread.
    Legacy::new(fx.store())
        .put(&"old".into(), &CountV1 { count: 9 })
        .expect("put");
    let err = strict.get(&"old".into()).expect_err("no envelope");
    assert_eq!(err.kind(), ErrorKind::SchemaVersion, "{err}");
}

/// The schema envelope inside a TTL store's: version-1 values over a TTL store, restored and
/// read by version 2, migrated and still expiring at their time; rewriting them keeps their
/// expiry.
pub fn schema_and_ttl_envelopes_nest(factory: &dyn StoreFactory, mode: Mode) {
    let mut fx = OperatorFixture::new(factory, mode);
    let config = TtlConfig {
        sweep_interval_ms: 1,
        ..TtlConfig::new(100, TtlClock::StreamTime)
    };
    let ttl = Arc::new(TtlStore::open(fx.store(), config).expect("ttl"));
    ttl.advance_stream_time(0).expect("advance");
    let v1 = TypedStore::<String, CountV1, OrderedKeys, Evolving>::with_ttl(Arc::clone(&ttl));
    v1.put(&"short".into(), &CountV1 { count: 1 }).expect("put"); // expires at 100
    v1.put_with_ttl(&"long".into(), &CountV1 { count: 2 }, Some(1_000))
        .expect("put"); // 1000
    fx.commit();
    drop((v1, ttl));
    fx.reopen();
    if !fx.survives_reopen() {
        return;
    }
    let ttl = Arc::new(TtlStore::open(fx.store(), config).expect("ttl"));
    let v2 = V2::with_ttl(Arc::clone(&ttl));
    assert_eq!(
        all_v2(&v2),
        [
            ("long".to_string(), migrated(2)),
            ("short".to_string(), migrated(1))
        ]
    );
    assert_eq!(v2.rewrite_old_versions().expect("rewrite"), 2);
    ttl.advance_stream_time(100).expect("advance");
    assert_eq!(
        all_v2(&v2),
        [("long".to_string(), migrated(2))],
        "expiry kept"
    );
    ttl.advance_stream_time(1_000).expect("advance");
    assert_eq!(all_v2(&v2), [], "expiry kept by the rewrite");
}
