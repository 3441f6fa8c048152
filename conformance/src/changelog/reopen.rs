//! What survives dropping a log and opening it again. Each case syncs first (the fixture's
//! `reopen` does), since the contract promises durability from `sync` on.

use super::ChangelogFactory;
use super::fixture::{ChangelogFixture, append, delete, end, ops, put, read, records, start};

/// Every synced record, tombstones included, reads back the same after a reopen, with the
/// same start and end offsets.
pub fn reopen_keeps_records(factory: &dyn ChangelogFactory) {
    let mut fx = ChangelogFixture::new(factory, "reopen_keeps_records");
    let mut written = ops(0, 40);
    written.push(delete(b"key-00000001"));
    written.push(put(b"", b""));
    append(fx.log(), &written);
    let before = (start(fx.log()), end(fx.log()));
    fx.reopen();
    assert_eq!(
        (start(fx.log()), end(fx.log())),
        before,
        "start and end offsets"
    );
    assert_eq!(read(fx.log(), 0, 100), records(0, &written));
}

/// After a reopen, appends continue at the old end offset, and old and new records read
/// back together in order.
pub fn reopen_continues_offsets(factory: &dyn ChangelogFactory) {
    let mut fx = ChangelogFixture::new(factory, "reopen_continues_offsets");
    append(fx.log(), &ops(0, 10));
    fx.reopen();
    assert_eq!(
        append(fx.log(), &ops(10, 15)),
        10..15,
        "the first append after reopen"
    );
    assert_eq!(end(fx.log()), 15);
    assert_eq!(read(fx.log(), 0, 100), records(0, &ops(0, 15)));
}

/// A log reopened before anything was appended is still empty and starts at offset 0.
pub fn reopen_of_empty_log(factory: &dyn ChangelogFactory) {
    let mut fx = ChangelogFixture::new(factory, "reopen_of_empty_log");
    fx.reopen();
    assert_eq!((start(fx.log()), end(fx.log())), (0, 0));
    assert!(read(fx.log(), 0, 10).is_empty());
    assert_eq!(append(fx.log(), &ops(0, 1)), 0..1);
}

/// Five cycles of append and reopen lose nothing and never reuse an offset.
pub fn reopen_many_times(factory: &dyn ChangelogFactory) {
    let mut fx = ChangelogFixture::new(factory, "reopen_many_times");
    for cycle in 0..5u64 {
        let got = append(fx.log(), &ops(cycle * 7, cycle * 7 + 7));
        assert_eq!(got, cycle * 7..cycle * 7 + 7, "append of cycle {cycle}");
        fx.reopen();
        assert_eq!(read(fx.log(), 0, 100), records(0, &ops(0, cycle * 7 + 7)));
    }
}

/// A 1 MiB value survives a reopen, as do the records around it.
pub fn reopen_keeps_large_value(factory: &dyn ChangelogFactory) {
    let mut fx = ChangelogFixture::new(factory, "reopen_keeps_large_value");
    let large: Vec<u8> = (0..1usize << 20).map(|i| (i * 7 % 256) as u8).collect();
    let written = vec![put(b"a", b"1"), put(b"large", &large), put(b"z", b"2")];
    append(fx.log(), &written);
    fx.reopen();
    assert_eq!(read(fx.log(), 0, 10), records(0, &written));
    assert_eq!(append(fx.log(), &ops(3, 4)), 3..4);
}
