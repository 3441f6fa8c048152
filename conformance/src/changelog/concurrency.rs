//! Logs shared by threads: readers racing an appender, and appenders racing each other.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use statestore_changelog::Changelog;
use store_api::BatchOp;

use super::ChangelogFactory;
use super::fixture::{ChangelogFixture, append, nth_op, ops, put, read, read_to_end, records};

const READERS: usize = 3;
const BATCHES: u64 = 100;
const BATCH_LEN: u64 = 10;

/// Readers on several threads, while one thread appends, only ever see whole records in
/// offset order with the content appended there, never miss a record whose append returned
/// before the read began, and never see the end offset go back.
pub fn concurrent_readers_while_appending(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "concurrent_readers_while_appending");
    let log = fx.log();
    let published = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for reader in 0..READERS as u64 {
            let (published, done) = (&published, &done);
            scope.spawn(move || {
                let mut from = reader;
                let mut last_end = 0;
                while !done.load(Ordering::Acquire) {
                    let seen = published.load(Ordering::Acquire);
                    last_end = check_read(log, from, seen, last_end);
                    from = (from + 37) % (BATCHES * BATCH_LEN);
                }
            });
        }
        for batch in 0..BATCHES {
            let first = batch * BATCH_LEN;
            let got = append(log, &ops(first, first + BATCH_LEN));
            assert_eq!(
                got,
                first..first + BATCH_LEN,
                "the appender's batch {batch}"
            );
            published.store(got.end, Ordering::Release);
        }
        done.store(true, Ordering::Release);
    });
    assert_eq!(
        read_to_end(log, 0, 256),
        records(0, &ops(0, BATCHES * BATCH_LEN))
    );
}

/// One reader step: reads up to 50 records from `from`, checks them against what the
/// appender wrote, and returns the end offset seen.
fn check_read(log: &dyn Changelog, from: u64, published: u64, last_end: u64) -> u64 {
    let end = log.end_offset().expect("end_offset while appending");
    assert!(
        end >= last_end,
        "the end offset went back from {last_end} to {end}"
    );
    assert!(
        end >= published,
        "end offset {end} below the {published} appended records"
    );
    let got = read(log, from, 50);
    let wanted = published.min(from + 50).saturating_sub(from);
    assert!(
        got.len() as u64 >= wanted,
        "read from {from} got {} records, but {published} were appended",
        got.len()
    );
    for (record, offset) in got.iter().zip(from..) {
        assert_eq!(
            record.offset, offset,
            "offsets skipped while reading from {from}"
        );
        assert_eq!(
            record.op,
            nth_op(offset),
            "record {offset} has the wrong content"
        );
    }
    end
}

/// Appenders on several threads each get disjoint offset ranges, consecutive within each
/// append, that together cover every offset once, with each range holding that thread's
/// records in order.
pub fn concurrent_appenders_get_distinct_offsets(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "concurrent_appenders_get_distinct_offsets");
    let log = fx.log();
    let mut appended: Vec<(Range<u64>, Vec<BatchOp>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|thread| scope.spawn(move || append_batches(log, thread)))
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("an appender thread panicked"))
            .collect()
    });
    appended.sort_by_key(|(range, _)| range.start);
    let mut next = 0;
    for (range, ops) in &appended {
        assert_eq!(range.start, next, "offset ranges overlap or leave a gap");
        assert_eq!(range.end - range.start, ops.len() as u64, "range {range:?}");
        next = range.end;
    }
    let all = read_to_end(log, 0, 1000);
    for (range, ops) in &appended {
        let slice = &all[range.start as usize..range.end as usize];
        assert_eq!(
            slice,
            records(range.start, ops),
            "records of append {range:?}"
        );
    }
    assert_eq!(
        read(log, next, 10),
        Vec::new(),
        "records past the last append"
    );
}

fn append_batches(log: &dyn Changelog, thread: u32) -> Vec<(Range<u64>, Vec<BatchOp>)> {
    (0..50)
        .map(|batch| {
            let ops: Vec<BatchOp> = (0..5)
                .map(|i| {
                    put(
                        format!("t{thread}-{batch}-{i}").as_bytes(),
                        &[thread as u8; 3],
                    )
                })
                .collect();
            (append(log, &ops), ops)
        })
        .collect()
}
