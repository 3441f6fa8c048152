//! A changelog opened on a fresh topic in a temporary directory, and helpers for the cases.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use statestore_changelog::{Changelog, ChangelogRecord};
use store_api::BatchOp;
use tempfile::TempDir;

use super::ChangelogFactory;

/// One changelog under test: a fresh topic, partition 0, opened by a [`ChangelogFactory`] in
/// a fresh temporary directory.
///
/// Field order fixes drop order: the log goes first, so it releases its files before the
/// directory is deleted.
pub struct ChangelogFixture<'f> {
    /// `None` only while [`reopen`](ChangelogFixture::reopen) runs.
    log: Option<Arc<dyn Changelog>>,
    dir: TempDir,
    topic: String,
    factory: &'f dyn ChangelogFactory,
}

impl<'f> ChangelogFixture<'f> {
    /// Opens a log on a new topic named after `case`.
    ///
    /// # Panics
    /// When the directory cannot be created or the factory fails: the case cannot run.
    pub fn new(factory: &'f dyn ChangelogFactory, case: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("statestore-changelog-conformance-")
            .tempdir()
            .expect("creating a temporary directory for the changelog");
        let topic = unique_topic(case);
        let log = factory
            .open(dir.path(), &topic, 0)
            .unwrap_or_else(|err| panic!("the factory failed to open topic {topic}: {err}"));
        ChangelogFixture {
            log: Some(Arc::from(log)),
            dir,
            topic,
            factory,
        }
    }

    /// The open log.
    pub fn log(&self) -> &dyn Changelog {
        self.log
            .as_deref()
            .expect("the fixture always holds an open log")
    }

    /// Another handle on the open log, for sharing with threads.
    pub fn shared(&self) -> Arc<dyn Changelog> {
        Arc::clone(
            self.log
                .as_ref()
                .expect("the fixture always holds an open log"),
        )
    }

    /// The directory passed to the factory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The topic of this fixture.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Syncs and drops the log, then opens the same directory, topic and partition again.
    ///
    /// # Panics
    /// When the sync or the reopen fails, or a thread still holds a handle from
    /// [`shared`](ChangelogFixture::shared).
    pub fn reopen(&mut self) {
        let log = self
            .log
            .take()
            .expect("the fixture always holds an open log");
        log.sync()
            .unwrap_or_else(|err| panic!("sync before reopen failed: {err}"));
        assert_eq!(
            Arc::strong_count(&log),
            1,
            "a handle on the log is still in use"
        );
        drop(log);
        let log = self
            .factory
            .open(self.dir.path(), &self.topic, 0)
            .unwrap_or_else(|err| panic!("reopening topic {} failed: {err}", self.topic));
        self.log = Some(Arc::from(log));
    }
}

/// A topic name no other case, process or earlier run uses.
fn unique_topic(case: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("conformance-{case}-{}-{nanos}-{count}", std::process::id())
}

/// A put of `key` to `value`.
pub(crate) fn put(key: &[u8], value: &[u8]) -> BatchOp {
    BatchOp::Put {
        key: key.to_vec(),
        value: value.to_vec(),
    }
}

/// A delete (tombstone) of `key`.
pub(crate) fn delete(key: &[u8]) -> BatchOp {
    BatchOp::Delete { key: key.to_vec() }
}

/// The `n`-th operation of a deterministic sequence: puts with distinct keys and values, and
/// every seventh a tombstone, so each record's content tells which position it holds.
pub(crate) fn nth_op(n: u64) -> BatchOp {
    let key = format!("key-{n:08}").into_bytes();
    if n % 7 == 6 {
        BatchOp::Delete { key }
    } else {
        BatchOp::Put {
            key,
            value: format!("value-{n}").into_bytes(),
        }
    }
}

/// Operations `nth_op(from)` up to, not including, `nth_op(to)`.
pub(crate) fn ops(from: u64, to: u64) -> Vec<BatchOp> {
    (from..to).map(nth_op).collect()
}

/// Appends `ops`, failing the case on error.
pub(crate) fn append(log: &dyn Changelog, ops: &[BatchOp]) -> std::ops::Range<u64> {
    log.append(ops)
        .unwrap_or_else(|err| panic!("append of {} ops failed: {err}", ops.len()))
}

/// `read(from, max)`, failing the case on error.
pub(crate) fn read(log: &dyn Changelog, from: u64, max: usize) -> Vec<ChangelogRecord> {
    log.read(from, max)
        .unwrap_or_else(|err| panic!("read({from}, {max}) failed: {err}"))
}

/// The end offset, failing the case on error.
pub(crate) fn end(log: &dyn Changelog) -> u64 {
    log.end_offset()
        .unwrap_or_else(|err| panic!("end_offset failed: {err}"))
}

/// The start offset, failing the case on error.
pub(crate) fn start(log: &dyn Changelog) -> u64 {
    log.start_offset()
        .unwrap_or_else(|err| panic!("start_offset failed: {err}"))
}

/// The records at `first..` holding `ops` in order.
pub(crate) fn records(first: u64, ops: &[BatchOp]) -> Vec<ChangelogRecord> {
    ops.iter()
        .zip(first..)
        .map(|(op, offset)| ChangelogRecord::unframed(offset, op.clone()))
        .collect()
}

/// Every record from `from` to the end, read in batches of `batch`.
pub(crate) fn read_to_end(log: &dyn Changelog, from: u64, batch: usize) -> Vec<ChangelogRecord> {
    let end = end(log);
    let mut out = Vec::new();
    let mut next = from;
    while next < end {
        let got = read(log, next, batch);
        let Some(last) = got.last() else {
            panic!("read({next}, {batch}) returned nothing below the end offset {end}");
        };
        assert!(
            got.len() <= batch,
            "read returned more than {batch} records"
        );
        next = last.offset + 1;
        out.extend(got);
    }
    out
}
