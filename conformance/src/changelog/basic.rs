//! Appends, offsets and record contents.

use store_api::ErrorKind;
use store_api::limits::MAX_KEY_LEN;

use super::ChangelogFactory;
use super::fixture::{
    ChangelogFixture, append, delete, end, nth_op, ops, put, read, records, start,
};

/// A new log holds nothing: start and end offsets are 0 and a read from 0 is empty.
pub fn fresh_log_is_empty(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "fresh_log_is_empty");
    assert_eq!(start(fx.log()), 0, "start offset of a new log");
    assert_eq!(end(fx.log()), 0, "end offset of a new log");
    assert!(
        read(fx.log(), 0, 10).is_empty(),
        "a new log returned records"
    );
}

/// Records come back in the order they were appended, within and across appends.
pub fn appends_keep_order(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "appends_keep_order");
    let first = vec![put(b"b", b"1"), put(b"a", b"2"), put(b"b", b"3")];
    let second = vec![delete(b"a"), put(b"c", b"4")];
    append(fx.log(), &first);
    append(fx.log(), &second);
    let expected: Vec<_> = first.into_iter().chain(second).collect();
    assert_eq!(read(fx.log(), 0, 100), records(0, &expected));
}

/// The records of one append get consecutive offsets, the first one at the previous end
/// offset, and offsets ascend across appends.
pub fn offsets_are_consecutive_and_ascending(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "offsets_are_consecutive_and_ascending");
    let mut previous_end = 0;
    for (i, size) in [1u64, 5, 2, 17, 1].into_iter().enumerate() {
        let before = end(fx.log());
        let got = append(fx.log(), &ops(i as u64 * 100, i as u64 * 100 + size));
        assert_eq!(
            got.start, before,
            "append {i} did not start at the end offset"
        );
        assert_eq!(got.end - got.start, size, "append {i} returned {got:?}");
        assert!(got.start >= previous_end, "offsets went back: {got:?}");
        previous_end = got.end;
    }
    let offsets: Vec<u64> = read(fx.log(), 0, 100).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..previous_end).collect::<Vec<_>>());
}

/// Appending no operations returns an empty range and changes nothing.
pub fn empty_append_writes_nothing(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "empty_append_writes_nothing");
    assert!(
        append(fx.log(), &[]).is_empty(),
        "empty append on an empty log"
    );
    append(fx.log(), &ops(0, 3));
    let got = append(fx.log(), &[]);
    assert!(got.is_empty(), "empty append returned {got:?}");
    assert_eq!(end(fx.log()), 3);
    assert_eq!(read(fx.log(), 0, 10), records(0, &ops(0, 3)));
}

/// A delete is stored as a tombstone and read back as a delete of the same key, distinct
/// from a put of an empty value.
pub fn tombstones_round_trip(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "tombstones_round_trip");
    let written = vec![
        put(b"k", b"v"),
        delete(b"k"),
        put(b"k", b""),
        delete(b"never-put"),
    ];
    append(fx.log(), &written);
    assert_eq!(read(fx.log(), 0, 10), records(0, &written));
}

/// The empty key and the empty value are ordinary.
pub fn empty_key_and_value_round_trip(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "empty_key_and_value_round_trip");
    let written = vec![
        put(b"", b"value of the empty key"),
        put(b"k", b""),
        put(b"", b""),
        delete(b""),
    ];
    append(fx.log(), &written);
    assert_eq!(read(fx.log(), 0, 10), records(0, &written));
}

/// Keys and values holding 0x00, 0xFF and every other byte round-trip unchanged.
pub fn binary_keys_and_values_round_trip(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "binary_keys_and_values_round_trip");
    let all_bytes: Vec<u8> = (0..=255).collect();
    let written = vec![
        put(b"\x00", b"\xff"),
        put(b"\xff\xff", b"\x00\x00"),
        put(
            &all_bytes,
            &all_bytes.iter().rev().copied().collect::<Vec<_>>(),
        ),
        delete(b"k\x00v"),
    ];
    append(fx.log(), &written);
    assert_eq!(read(fx.log(), 0, 10), records(0, &written));
}

/// The end offset is one past the last offset appended, after every append.
pub fn end_offset_follows_appends(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "end_offset_follows_appends");
    let mut next = 0;
    for size in [3, 1, 10] {
        let got = append(fx.log(), &ops(next, next + size));
        assert_eq!(end(fx.log()), got.end, "end offset after appending {got:?}");
        next += size;
    }
    assert_eq!(end(fx.log()), next);
}

/// Without retention nothing is removed, so the start offset stays at 0.
pub fn start_offset_of_unretained_log_is_zero(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "start_offset_of_unretained_log_is_zero");
    append(fx.log(), &ops(0, 50));
    fx.log().sync().expect("sync");
    assert_eq!(start(fx.log()), 0);
    assert_eq!(read(fx.log(), start(fx.log()), 1)[0].offset, 0);
}

/// A key longer than `MAX_KEY_LEN` fails the append with `InvalidArgument` and writes none
/// of the call's records, even the valid ones before it.
pub fn oversized_key_writes_nothing(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "oversized_key_writes_nothing");
    append(fx.log(), &ops(0, 2));
    let oversized = vec![nth_op(2), put(&vec![b'k'; MAX_KEY_LEN + 1], b"v")];
    match fx.log().append(&oversized) {
        Err(err) => assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}"),
        Ok(range) => panic!("an oversized key was appended at {range:?}"),
    }
    assert_eq!(end(fx.log()), 2, "a rejected append moved the end offset");
    assert_eq!(
        append(fx.log(), &ops(2, 3)),
        2..3,
        "the log is unusable after a rejection"
    );
    assert_eq!(read(fx.log(), 0, 10), records(0, &ops(0, 3)));
}

/// `topic` and `partition` report what the log was opened with.
pub fn topic_and_partition_are_reported(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "topic_and_partition_are_reported");
    assert_eq!(fx.log().topic(), fx.topic());
    assert_eq!(fx.log().partition(), 0);
}

/// `sync` succeeds, repeatedly, and leaves every record readable; appends continue after it.
pub fn sync_keeps_records_readable(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "sync_keeps_records_readable");
    fx.log().sync().expect("sync of an empty log");
    append(fx.log(), &ops(0, 4));
    fx.log().sync().expect("sync");
    fx.log().sync().expect("second sync");
    append(fx.log(), &ops(4, 6));
    fx.log().sync().expect("sync after more appends");
    assert_eq!(read(fx.log(), 0, 10), records(0, &ops(0, 6)));
}
