//! Reading: from every offset, bounded by `max_records`, in batches, before sync.

use super::ChangelogFactory;
use super::fixture::{ChangelogFixture, append, end, ops, put, read, read_to_end, records};

/// A 1 MiB value: larger than any buffer a log is likely to read through in one piece.
const LARGE_VALUE_LEN: usize = 1 << 20;

/// A read from any offset below the end returns exactly the records from that offset on; a
/// read from the end returns nothing.
pub fn read_from_every_offset(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "read_from_every_offset");
    let written = ops(0, 60);
    append(fx.log(), &written[..25]);
    append(fx.log(), &written[25..]);
    let all = records(0, &written);
    for from in 0..=60u64 {
        assert_eq!(
            read(fx.log(), from, 1000),
            all[from as usize..],
            "read from {from}"
        );
    }
}

/// Reads at, just past and far past the end are empty, not errors.
pub fn read_past_end_is_empty(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "read_past_end_is_empty");
    assert!(
        read(fx.log(), 5, 10).is_empty(),
        "read past the end of an empty log"
    );
    append(fx.log(), &ops(0, 5));
    for from in [5, 6, 1000, u64::MAX / 2, u64::MAX] {
        assert!(
            read(fx.log(), from, 10).is_empty(),
            "read from {from} of 5 records"
        );
    }
}

/// No read returns more than `max_records`, and a read stops exactly there.
pub fn read_respects_max_records(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "read_respects_max_records");
    let written = ops(0, 20);
    append(fx.log(), &written);
    let all = records(0, &written);
    assert_eq!(read(fx.log(), 0, 1), all[..1]);
    assert_eq!(read(fx.log(), 0, 7), all[..7]);
    assert_eq!(read(fx.log(), 5, 3), all[5..8]);
    assert_eq!(read(fx.log(), 18, 5), all[18..], "read over the end");
    assert_eq!(read(fx.log(), 0, usize::MAX), all, "an unbounded read");
}

/// `max_records` of 0 reads nothing.
pub fn read_of_zero_records_is_empty(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "read_of_zero_records_is_empty");
    append(fx.log(), &ops(0, 3));
    assert!(read(fx.log(), 0, 0).is_empty());
    assert!(read(fx.log(), 2, 0).is_empty());
}

/// Reading from the start in batches, each from one past the last offset seen, as a restore
/// does, returns every record exactly once, for several batch sizes.
pub fn read_in_batches_sees_everything(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "read_in_batches_sees_everything");
    let written = ops(0, 3000);
    for chunk in written.chunks(250) {
        append(fx.log(), chunk);
    }
    let all = records(0, &written);
    for batch in [97, 1000, 5000] {
        assert_eq!(read_to_end(fx.log(), 0, batch), all, "batches of {batch}");
    }
    // One record per call, over a stretch rather than all 3000 calls.
    let one_by_one: Vec<_> = (1200..1300)
        .flat_map(|from| read(fx.log(), from, 1))
        .collect();
    assert_eq!(one_by_one, all[1200..1300]);
}

/// A record is readable as soon as its append returned, before any `sync`.
pub fn records_are_readable_before_sync(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "records_are_readable_before_sync");
    for i in 0..20u64 {
        append(fx.log(), &ops(i, i + 1));
        assert_eq!(
            read(fx.log(), i, 10),
            records(i, &ops(i, i + 1)),
            "record {i}"
        );
        assert_eq!(end(fx.log()), i + 1);
    }
}

/// A 1 MiB value round-trips between small records, and reads starting at it or after it
/// work.
pub fn large_value_round_trips(factory: &dyn ChangelogFactory) {
    let fx = ChangelogFixture::new(factory, "large_value_round_trips");
    let large: Vec<u8> = (0..LARGE_VALUE_LEN).map(|i| (i % 251) as u8).collect();
    let written = vec![
        put(b"small", b"1"),
        put(b"large", &large),
        put(b"after", b"2"),
    ];
    append(fx.log(), &written[..1]);
    append(fx.log(), &written[1..]);
    let all = records(0, &written);
    assert_eq!(read(fx.log(), 0, 10), all);
    assert_eq!(read(fx.log(), 1, 1), all[1..2]);
    assert_eq!(read(fx.log(), 2, 10), all[2..]);
}
