//! Opens every backend compiled into this build by name and exercises it: a batch, point
//! reads, a range, a prefix scan, a flush and, for persistent backends, a reopen.
//!
//! Run with `cargo run --release -p statestore --example tour`.

use std::ops::Bound;
use std::time::Instant;

use statestore::{BackendOptions, Result, WriteBatch};

const KEYS: u32 = 100_000;

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let root = tempfile::tempdir()?;
    for name in statestore::backend_names() {
        let dir = root.path().join(name);
        let started = Instant::now();
        let summary = exercise(name, &dir)?;
        println!("{name:>8}: {summary} in {:.2?}", started.elapsed());
    }
    Ok(())
}

fn exercise(name: &str, dir: &std::path::Path) -> Result<String> {
    let store = statestore::open(name, dir, &BackendOptions::Null)?;
    let mut batch = WriteBatch::with_capacity(KEYS as usize);
    for i in 0..KEYS {
        batch.put(format!("word/{i:08}"), i.to_le_bytes().to_vec());
    }
    store.write(batch)?;
    if store.get(b"word/00004242")? != Some(4242u32.to_le_bytes().to_vec()) {
        return Err(statestore::Error::Corruption(format!(
            "{name} lost a batched write"
        )));
    }
    let in_range = store
        .range(
            Bound::Included(b"word/00001000"),
            Bound::Excluded(b"word/00002000"),
        )?
        .count();
    let prefixed = store.prefix_scan(b"word/0009")?.count();
    store.flush()?;
    let reopened = if store.capabilities().persistent {
        store.close()?;
        let again = statestore::open(name, dir, &BackendOptions::Null)?;
        let found = again.get(b"word/00099999")?.is_some();
        again.close()?;
        if found {
            "data survived reopen"
        } else {
            "DATA LOST on reopen"
        }
    } else {
        "not persistent"
    };
    Ok(format!(
        "{KEYS} keys written in one batch, range of {in_range}, prefix scan of {prefixed}, {reopened}"
    ))
}
