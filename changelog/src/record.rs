//! The changelog trait and its record.

use std::fmt::Debug;
use std::ops::Range;

use store_api::{BatchOp, Result};

/// One record of a changelog: an update of `key` at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogRecord {
    /// The record's position in its partition. Offsets ascend but may have gaps (compaction).
    pub offset: u64,
    /// The update: a put, or a delete (a tombstone).
    pub op: BatchOp,
}

/// An append-only log of one (topic, partition).
///
/// # Contract
/// - Offsets are assigned in append order and strictly ascend. Records appended in one call
///   get consecutive offsets.
/// - A record is readable once `append` returns. It survives a crash once
///   [`sync`](Changelog::sync) returns (for the Kafka log: once the brokers acknowledged it,
///   which `append` itself waits for).
/// - Compaction and retention may remove records below [`end_offset`](Changelog::end_offset),
///   raising [`start_offset`](Changelog::start_offset) or leaving gaps, but they never remove
///   the latest record of a key.
pub trait Changelog: Send + Sync + Debug + 'static {
    /// The topic name, such as `app-counts-changelog`.
    fn topic(&self) -> &str;

    /// The partition number.
    fn partition(&self) -> u32;

    /// Appends `ops` in order and returns the offsets they were given (empty for no ops).
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or value, `Closed`, `Timeout` when a remote log
    /// does not acknowledge in time, or `Io`. After an error, no offset of this call is
    /// promised to be readable or not.
    fn append(&self, ops: &[BatchOp]) -> Result<Range<u64>>;

    /// Waits until every record appended so far is durable under the log's sync policy.
    ///
    /// # Errors
    /// `Io` or `Timeout`. A file log that failed to sync refuses further appends.
    fn sync(&self) -> Result<()>;

    /// Up to `max_records` records with offsets at or after `from`, in offset order. Empty when
    /// `from` is at or past the end.
    ///
    /// # Errors
    /// `Corruption` for a record that fails its checksum, `Io`, `Timeout`, or `Closed`.
    fn read(&self, from: u64, max_records: usize) -> Result<Vec<ChangelogRecord>>;

    /// The lowest offset the log still holds (0 until retention removes anything).
    ///
    /// # Errors
    /// `Io`, `Timeout` or `Closed`.
    fn start_offset(&self) -> Result<u64>;

    /// One past the highest offset written: the offset the next append gets.
    ///
    /// # Errors
    /// `Io`, `Timeout` or `Closed`.
    fn end_offset(&self) -> Result<u64>;
}
