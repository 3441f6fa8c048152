//! Peak memory of one instance's RocksDB stores, with and without a shared memory budget.
//!
//! Opens `tasks x stores` RocksDB stores through the backend factory with the options a task's
//! `StoreSpec` would carry (so the budget is configuration), writes `keys` values of `bytes`
//! bytes into each, round-robin over the stores in batches of 100 (as tasks commit), then
//! reads `reads` random keys. Prints the write and read rates and the peak resident set size
//! (`VmHWM`). What it does not measure: a changelog, a consumer, or compaction done after it
//! ends.
//!
//! ```text
//! cargo run --release -p statestore-rocksdb --example memory_budget -- [budget_mib] \
//!     [tasks] [stores] [keys] [bytes] [reads]
//! ```
//! `budget_mib` 0 (the default) gives each store its own cache and memtables, as before
//! budgets existed; defaults: 64 tasks, 2 stores, 20 000 keys of 256 bytes, 200 000 reads.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use statestore_rocksdb::RocksDbFactory;
use store_api::{BackendFactory, KeyValueStore, WriteBatch};

fn arg(index: usize, default: u64) -> u64 {
    std::env::args()
        .nth(index)
        .map_or(default, |text| text.parse().expect("a number"))
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let budget_mib = arg(1, 0);
    let tasks = arg(2, 64);
    let stores_per_task = arg(3, 2);
    let keys = arg(4, 20_000);
    let bytes = arg(5, 256) as usize;
    let reads = arg(6, 200_000);
    let options = if budget_mib == 0 {
        json!(null)
    } else {
        json!({ "memory_budget": { "total_bytes": budget_mib << 20 } })
    };
    let dir = tempfile::tempdir()?;
    let mut stores: Vec<Box<dyn KeyValueStore>> = Vec::new();
    for task in 0..tasks {
        for store in 0..stores_per_task {
            let path = Path::new(dir.path()).join(format!("{task}/store-{store}"));
            stores.push(RocksDbFactory.open(&path, &options)?);
        }
    }
    let value = vec![0x5a; bytes];
    let started = Instant::now();
    for chunk in (0..keys).step_by(100) {
        for store in &stores {
            let mut batch = WriteBatch::with_capacity(100);
            for key in chunk..(chunk + 100).min(keys) {
                batch.put(key.to_be_bytes().to_vec(), value.clone());
            }
            store.write(batch)?;
        }
    }
    let writes = (keys * stores.len() as u64) as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut seed: u64 = 0x5eed;
    let mut found = 0u64;
    for _ in 0..reads {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let store = &stores[(seed >> 40) as usize % stores.len()];
        let key = (seed >> 8) % keys;
        found += u64::from(store.get(&key.to_be_bytes())?.is_some());
    }
    let read_rate = reads as f64 / started.elapsed().as_secs_f64();
    assert_eq!(found, reads, "every key read back");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "budget {} | {} stores | {:.0} writes/s | {:.0} reads/s | peak RSS {:.0} MiB | \
         loadavg {}",
        if budget_mib == 0 {
            "none (50 MiB cache + 3 x 16 MiB memtables per store)".to_string()
        } else {
            format!("{budget_mib} MiB shared")
        },
        stores.len(),
        writes,
        read_rate,
        peak_rss_mib(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}
