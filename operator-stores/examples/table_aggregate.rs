//! A table aggregation with old values, metered, its metrics shown as Prometheus text.
//!
//! Users move between regions (a changelog-style table of `user -> region`); the count of
//! users per region is an aggregate over that table. Each update of a user must retract the
//! user from the old region and add them to the new one, as Kafka Streams' table aggregations
//! forward `(new, old)` pairs: `put_returning_old` hands back the old region at the cost of
//! one read. Both stores are metered; the end prints the aggregate and the metrics.
//!
//! ```text
//! cargo run -p statestore-operator-stores --example table_aggregate
//! ```

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusBuilder;
use statestore_memory::{Config, MemoryStore};
use statestore_operator_stores::{MeteredStore, RecordingLevel, TypedStore};
use store_api::KeyValueStore;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder must be installed before metered stores register their handles.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    // A handful of calls: time every one, where the default times one in 64.
    let metered = |name: &str| -> Arc<dyn KeyValueStore> {
        let store = MeteredStore::new(Arc::new(MemoryStore::new(Config::default())), name);
        Arc::new(store.with_recording_level(RecordingLevel::EveryLatency))
    };
    let users: TypedStore<String, String> = TypedStore::new(metered("users"));
    let per_region: TypedStore<String, i64> = TypedStore::new(metered("users-per-region"));

    let updates = [
        ("ann", "eu-west"),
        ("bob", "us-east"),
        ("cy", "eu-west"),
        ("ann", "us-east"),
        ("bob", "ap-south"),
        ("ann", "us-east"),
    ];
    for (user, region) in updates {
        let old = users.put_returning_old(&user.to_string(), &region.to_string())?;
        if old.as_deref() == Some(region) {
            continue; // not a move: the aggregate does not change
        }
        if let Some(old) = old {
            add(&per_region, &old, -1)?;
        }
        add(&per_region, &region.to_string(), 1)?;
    }
    if let Some(old) = users.delete_returning_old(&"cy".to_string())? {
        add(&per_region, &old, -1)?;
    }

    for entry in per_region.all()? {
        let (region, users) = entry?;
        println!("{region}: {users}");
    }
    println!();
    print!("{}", prometheus.render());
    Ok(())
}

/// Adds `delta` to the count of `region`, dropping regions that reach zero.
fn add(per_region: &TypedStore<String, i64>, region: &String, delta: i64) -> store_api::Result<()> {
    let count = per_region.get(region)?.unwrap_or(0) + delta;
    if count == 0 {
        per_region.delete(region)
    } else {
        per_region.put(region, &count)
    }
}
