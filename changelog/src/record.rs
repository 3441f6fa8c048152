//! The changelog trait, its record, and commit framing.

use std::fmt::Debug;
use std::ops::Range;

use store_api::{BatchOp, Error, Result};

/// The key of every commit marker record.
///
/// A Kafka topic is compacted by key, so a marker needs one; all markers share it, so
/// compaction keeps only the latest marker, which is all a reader ever needs (see
/// [`Changelog`]'s contract). Every log refuses an update of this key with `InvalidArgument`,
/// so compaction never mistakes a user's record for a marker or drops one for it.
pub const COMMIT_MARKER_KEY: &[u8] = b"\xffstatestore\x00commit\xff";

/// The key under which a fenced writer's store keeps its writer epoch (8 bytes, big-endian,
/// then 8 that tell two fences of one epoch apart):
/// written in the log by [`LoggedStore::fence`](crate::LoggedStore::fence), restored with the
/// rest, and read by the next restore to know which epochs are already fenced. A
/// [`LoggedStore`](crate::LoggedStore) refuses writes of it.
pub const EPOCH_KEY: &[u8] = b"\0statestore.epoch";

/// The longest topic name Kafka accepts, in bytes; changelog topic names keep to it everywhere.
pub(crate) const MAX_TOPIC_LEN: usize = 249;

/// How the records of one [`append_framed`](Changelog::append_framed) are framed into commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// Records outside any commit, as [`append`](Changelog::append) writes them: each one
    /// counts as a commit of its own.
    Unframed,
    /// Records of a commit that a later append closes; until then no reader applies them.
    Open,
    /// The last records of a commit, followed by the commit marker this append writes after
    /// them: the marker gets the last offset of the returned range. With no records, the
    /// append writes the marker alone.
    Commit,
}

/// What a record read from a changelog is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// An update written without framing: it ends a commit of its own.
    Unframed,
    /// An update inside a commit, applied only once a later record ends a commit.
    Framed,
    /// A commit marker: it ends the commit of the framed records before it. It holds no
    /// update; its `op` is a put of [`COMMIT_MARKER_KEY`] to an empty value and is never
    /// applied to a store.
    CommitMarker,
}

impl RecordKind {
    /// True for a record that ends a commit: a marker or an unframed update.
    pub fn ends_commit(self) -> bool {
        self != RecordKind::Framed
    }
}

/// One record of a changelog: an update of `key` at `offset`, or a commit marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogRecord {
    /// The record's position in its partition. Offsets ascend but may have gaps (compaction).
    pub offset: u64,
    /// The update: a put, or a delete (a tombstone). For a marker, see
    /// [`RecordKind::CommitMarker`].
    pub op: BatchOp,
    /// How the record is framed.
    pub kind: RecordKind,
    /// The writer epoch the record was appended under (see "Fencing" in [`Changelog`]); 0 for
    /// a record whose writer set none.
    pub epoch: u64,
}

impl ChangelogRecord {
    /// An unframed update, as [`append`](Changelog::append) writes one.
    pub fn unframed(offset: u64, op: BatchOp) -> Self {
        ChangelogRecord {
            offset,
            op,
            kind: RecordKind::Unframed,
            epoch: 0,
        }
    }

    /// A commit marker at `offset`.
    pub fn marker(offset: u64) -> Self {
        ChangelogRecord {
            offset,
            op: marker_op(),
            kind: RecordKind::CommitMarker,
            epoch: 0,
        }
    }
}

/// The operation a commit marker carries: a put of [`COMMIT_MARKER_KEY`] to an empty value.
pub fn marker_op() -> BatchOp {
    BatchOp::Put {
        key: COMMIT_MARKER_KEY.to_vec(),
        value: Vec::new(),
    }
}

/// Checks `ops` for an append to a log that accepts records of up to `max_record_len` bytes
/// of key and value, before anything is written.
///
/// # Errors
/// `InvalidArgument` for a key over the store limits, a record over `max_record_len`, or an
/// update of [`COMMIT_MARKER_KEY`].
pub fn check_append(ops: &[BatchOp], max_record_len: usize) -> Result<()> {
    ops.iter().try_for_each(|op| {
        check_record(op.key(), op.value().map_or(0, <[u8]>::len), max_record_len)
    })
}

/// Checks one update of `key` with `value_len` value bytes as [`check_append`] does.
///
/// # Errors
/// As [`check_append`].
pub fn check_record(key: &[u8], value_len: usize, max_record_len: usize) -> Result<()> {
    store_api::limits::check_key(key)?;
    if key == COMMIT_MARKER_KEY {
        return Err(Error::invalid(
            "the key is reserved for the changelog's commit markers",
        ));
    }
    if key.len().saturating_add(value_len) > max_record_len {
        return Err(Error::invalid(format!(
            "a record of {} key bytes and {value_len} value bytes exceeds this changelog's \
             largest record of {max_record_len} bytes",
            key.len()
        )));
    }
    Ok(())
}

/// An append-only log of one (topic, partition), framed into commits.
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
///
/// # Commits
/// A commit is the records of one [`append_framed`](Changelog::append_framed) with
/// [`Framing::Commit`], after those of any [`Framing::Open`] appends before it, closed by the
/// commit marker the call writes last. A reader (see [`CommitReader`](crate::CommitReader))
/// sees a commit's records all together or not at all:
/// - a record is applied once a record at or after it ends a commit: a marker, or an
///   unframed record ([`RecordKind::ends_commit`]); framed records after the last such record
///   (a commit torn by a crash, or abandoned by a writer that died) are not applied;
/// - a reader never needs an older marker than the last one it reads: compaction may remove
///   all but the latest marker, merging the commits before it, which a reader then applies
///   together.
///
/// A commit abandoned in the middle of the log (its writer died and a new writer restored
/// the state before it and committed more) would be applied by a later reader together with
/// the commit after it. So a writer that finds framed records after the last commit end
/// re-appends, for every key among them, the value its restored store holds (or a tombstone)
/// in its next commit, before anything else: [`LoggedStore::open`](crate::LoggedStore::open)
/// does it at once. Replaying up to that commit's marker then yields exactly the restored
/// state, abandoned records included.
///
/// Until that repair, a compaction that took an abandoned record for the latest of its key
/// would drop the committed record before it. The file log's compaction does not count
/// records after the last commit end; Kafka's cleaner never compacts the active segment, so
/// only an abandoned tail left unrepaired in a rolled segment for longer than the topic's
/// compaction lag is exposed.
///
/// # Fencing
/// A writer that takes a partition over from another (a task moving between instances) sets
/// a writer epoch higher than any in the log ([`set_writer_epoch`](Changelog::set_writer_epoch))
/// and the log stamps it on every record that writer appends. Readers
/// ([`CommitReader`](crate::CommitReader)) ignore every record whose epoch is below the highest
/// epoch before it (a record without one counts as epoch 0): a previous owner that wakes up
/// after the takeover (a pause past its session timeout) can still append, but no reader
/// applies what it appends, and it learns that it was fenced when its next commit finds the
/// newer epoch ([`LoggedStore::fence`](crate::LoggedStore::fence)). A log without stamped
/// records is read as all of epoch 0. Only a log that several processes write needs it: the Kafka and
/// memory logs stamp epochs; the file log, which one process owns through the state
/// directory's lock, does not.
pub trait Changelog: Send + Sync + Debug + 'static {
    /// The topic name, such as `app-counts-changelog`.
    fn topic(&self) -> &str;

    /// The partition number.
    fn partition(&self) -> u32;

    /// The largest record this log accepts: key bytes plus value bytes. An append holding a
    /// larger record fails with `InvalidArgument` and writes nothing.
    fn max_record_len(&self) -> usize;

    /// Appends `ops` in order, framed as `framing` says, and returns the offsets written
    /// (the marker's included).
    ///
    /// # Errors
    /// `InvalidArgument` for an oversized key or record, or an update of
    /// [`COMMIT_MARKER_KEY`], before anything is written; `Closed`; `Timeout` when a remote
    /// log does not acknowledge in time; or `Io`. After another error, no offset of this call
    /// is promised to be readable or not, and a reader may find any prefix of the call's
    /// records: framing keeps a torn commit from being applied.
    fn append_framed(&self, ops: &[BatchOp], framing: Framing) -> Result<Range<u64>>;

    /// Appends `ops` as [`append_framed`](Changelog::append_framed) does, inside the open
    /// transaction of the writer's transactional producer (beginning it if none is open).
    /// A reader that reads committed records only (every reader of a Kafka changelog) sees
    /// them once that transaction commits, and never if it aborts; the end offset it reads
    /// up to stops before them while the transaction is open. The records are acknowledged,
    /// not committed, when this returns: the owner of the transaction commits it.
    ///
    /// # Errors
    /// `Unsupported` for a log without transactions (the default, and a Kafka log whose
    /// clients are not transactional); otherwise as [`append_framed`](Changelog::append_framed).
    /// After an error the transaction must be aborted.
    fn append_transactional(&self, ops: &[BatchOp], framing: Framing) -> Result<Range<u64>> {
        let _ = (ops, framing);
        Err(Error::Unsupported(format!(
            "changelog {}/{} has no transactions",
            self.topic(),
            self.partition()
        )))
    }

    /// Appends `ops` unframed (each record ends a commit of its own) and returns the offsets
    /// they were given (empty for no ops).
    ///
    /// # Errors
    /// As [`append_framed`](Changelog::append_framed).
    fn append(&self, ops: &[BatchOp]) -> Result<Range<u64>> {
        self.append_framed(ops, Framing::Unframed)
    }

    /// Stamps `epoch` on every record this handle appends from now on (see "Fencing" above).
    ///
    /// # Errors
    /// `Unsupported` for a log that cannot carry epochs (the default).
    fn set_writer_epoch(&self, epoch: u64) -> Result<()> {
        let _ = epoch;
        Err(Error::Unsupported(format!(
            "changelog {}/{} cannot carry writer epochs",
            self.topic(),
            self.partition()
        )))
    }

    /// Waits until every record appended so far is durable under the log's sync policy.
    ///
    /// # Errors
    /// `Io` or `Timeout`. A file log that failed to sync refuses further appends.
    fn sync(&self) -> Result<()>;

    /// Up to `max_records` records with offsets at or after `from`, in offset order, commit
    /// markers included. Empty when `from` is at or past the end.
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
