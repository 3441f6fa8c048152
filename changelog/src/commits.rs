//! [`CommitReader`]: reading a changelog commit by commit.

use std::collections::BTreeSet;

use store_api::{BatchOp, Result};

use crate::record::{Changelog, ChangelogRecord, RecordKind};

/// Reads a changelog from an offset and releases only the updates of whole commits, in log
/// order (see the commit rules of [`Changelog`]).
///
/// It serves two readers:
/// - a restore or a standby catching up: [`catch_up`](CommitReader::catch_up) finds the last
///   commit end below an offset, after which every record up to it is released as it is
///   read, batch by batch, without holding anything back, so a log compacted into one huge
///   commit restores in bounded memory;
/// - a standby tailing a live log: each [`read`](CommitReader::read) holds back the framed
///   records after the last commit end it has seen (see [`pending`](CommitReader::pending))
///   and releases them when the record ending their commit arrives, so a commit is applied
///   whole even when it spans reads.
///
/// ```
/// use statestore_changelog::{Changelog, CommitReader, Framing, MemoryLog};
/// use store_api::BatchOp;
///
/// let log = MemoryLog::new("app-counts-changelog", 0);
/// let put = |k: &str| BatchOp::Put { key: k.into(), value: b"1".to_vec() };
/// log.append_framed(&[put("a"), put("b")], Framing::Commit)?; // offsets 0, 1, marker 2
/// log.append_framed(&[put("c")], Framing::Open)?; // offset 3: its commit is not closed
/// let mut reader = CommitReader::new(&log, 0);
/// let released = reader.read(100)?;
/// assert_eq!(released.ops, vec![put("a"), put("b")]);
/// assert_eq!((released.commit_end, reader.position()), (Some(2), 4));
/// assert_eq!(reader.pending().len(), 1);
/// log.append_framed(&[], Framing::Commit)?; // closes the commit of "c"
/// assert_eq!(reader.read(100)?.ops, vec![put("c")]);
/// # Ok::<(), store_api::Error>(())
/// ```
#[derive(Debug)]
pub struct CommitReader<'l> {
    log: &'l dyn Changelog,
    /// The next offset to read.
    next: u64,
    /// Records up to this offset are known to be followed by a commit end, so they are
    /// released without waiting for it.
    trusted: Option<u64>,
    /// Framed records read after the last commit end, in order.
    pending: Vec<ChangelogRecord>,
    /// The offset of the last commit end released.
    committed: Option<u64>,
    /// The highest writer epoch read so far: a record stamped with a lower one comes from a
    /// fenced writer and is ignored (see "Fencing" in [`Changelog`]).
    epoch: u64,
    /// The epoch of the record ending the trusted range: a record with a higher one before it
    /// means that record is a fenced writer's, so the range is not trusted from there on.
    trusted_epoch: u64,
    /// The keys of the records ignored as a fenced writer's.
    pub(crate) fenced: BTreeSet<Vec<u8>>,
}

/// What one [`CommitReader::read`] released.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// The updates to apply, in log order; markers are left out.
    pub ops: Vec<BatchOp>,
    /// The offset of the last record the read returned, released or held back; `None` when
    /// the log returned nothing.
    pub last_read: Option<u64>,
    /// The offset of the last record ending a commit among those released: the state after
    /// `ops` is the state after that commit when it is the last record released, and a
    /// checkpoint may name it. `None` when no commit ended in this read.
    pub commit_end: Option<u64>,
}

impl<'l> CommitReader<'l> {
    /// A reader of `log` from offset `from` (a commit boundary: the log's start, or one past
    /// a commit end), holding nothing back yet.
    pub fn new(log: &'l dyn Changelog, from: u64) -> Self {
        CommitReader {
            log,
            next: from,
            trusted: None,
            pending: Vec::new(),
            committed: None,
            epoch: 0,
            trusted_epoch: 0,
            fenced: BTreeSet::new(),
        }
    }

    /// As [`new`](CommitReader::new), for a reader that already applied records of writer
    /// epoch `epoch` (read from the state a restore resumes): records of lower epochs are
    /// ignored from the start.
    pub fn with_epoch(log: &'l dyn Changelog, from: u64, epoch: u64) -> Self {
        CommitReader {
            epoch,
            ..CommitReader::new(log, from)
        }
    }

    /// The highest writer epoch read so far (or given to [`with_epoch`](Self::with_epoch)).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The keys of the records ignored so far because a newer writer had fenced theirs.
    pub fn fenced_keys(&self) -> &BTreeSet<Vec<u8>> {
        &self.fenced
    }

    /// Finds the last commit end below `end` (normally the log's end offset) and makes every
    /// record up to it released as it is read. Returns that offset, or `None` when no record
    /// from the reader's position up to `end` ends a commit.
    ///
    /// It reads the log backwards from `end`, `window` offsets at a time: one read when the
    /// log ends with a whole commit, as it does after any clean commit.
    ///
    /// # Errors
    /// Any error of the log's reads.
    pub fn catch_up(&mut self, end: u64, window: usize) -> Result<Option<u64>> {
        let found = last_commit_end_record(self.log, self.next, end, window)?;
        // A commit end stamped below the epoch already read is a fenced writer's: it ends no
        // commit, so nothing can be trusted to be followed by one.
        let found = found.filter(|record| record.epoch >= self.epoch);
        if let Some(record) = &found {
            self.trusted = Some(record.offset);
            self.trusted_epoch = record.epoch;
        }
        Ok(found.map(|record| record.offset))
    }

    /// Reads up to `max_records` records from the reader's position and releases the updates
    /// of the commits they complete.
    ///
    /// # Errors
    /// Any error of the log's read; the reader's position does not move then.
    pub fn read(&mut self, max_records: usize) -> Result<Released> {
        let trusted = self.trusted.filter(|&trusted| trusted >= self.next);
        // While catching up, a read stops at the trusted commit end, so a batch never mixes
        // records released unconditionally with records that must wait.
        let max = match trusted {
            Some(trusted) => {
                let left = usize::try_from(trusted - self.next).map_or(usize::MAX, |n| n + 1);
                max_records.min(left)
            }
            None => max_records,
        };
        let mut records = self.log.read(self.next, max)?;
        let answered = records.last().map(|record| record.offset);
        if let Some(trusted) = trusted {
            // A log with gaps may answer with records past the trusted end.
            records.retain(|record| record.offset <= trusted);
        }
        let mut released = Released {
            last_read: records.last().map(|record| record.offset),
            ..Released::default()
        };
        match (released.last_read, answered, trusted) {
            (Some(last), _, _) => self.next = last + 1,
            // Only records past the trusted end are left (compaction removed the marker it
            // was, for a later one): everything up to it has been released.
            (None, Some(_), Some(trusted)) => self.next = trusted + 1,
            _ => {}
        }
        let mut trusting = trusted.is_some();
        for record in records {
            if trusting && record.epoch > self.trusted_epoch {
                // A newer writer began before the trusted commit end, which is therefore a
                // fenced writer's: from here on, records wait for a commit end again.
                trusting = false;
                self.trusted = None;
            }
            self.take(record, trusting, &mut released);
        }
        if let Some(trusted) = trusted.filter(|&trusted| trusting && self.next > trusted) {
            released.commit_end = Some(trusted);
            self.committed = Some(trusted);
        }
        Ok(released)
    }

    /// Releases `record` with every held-back record before it, or holds it back.
    fn take(&mut self, record: ChangelogRecord, trusted: bool, out: &mut Released) {
        if record.epoch < self.epoch {
            if record.kind != RecordKind::CommitMarker {
                self.fenced.insert(record.op.key().to_vec());
            }
            return;
        }
        self.epoch = record.epoch;
        if !trusted && record.kind == RecordKind::Framed {
            self.pending.push(record);
            return;
        }
        out.ops.extend(self.pending.drain(..).map(|held| held.op));
        if record.kind.ends_commit() {
            out.commit_end = Some(record.offset);
            self.committed = Some(record.offset);
        }
        if record.kind != RecordKind::CommitMarker {
            out.ops.push(record.op);
        }
    }

    /// The next offset the reader reads.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// The offset of the last commit end released so far: the offset a checkpoint of the
    /// released state names.
    pub fn committed(&self) -> Option<u64> {
        self.committed
    }

    /// The framed records read after the last commit end and held back: a commit not
    /// closed yet, or abandoned by its writer.
    pub fn pending(&self) -> &[ChangelogRecord] {
        &self.pending
    }
}

/// The offset of the last record that ends a commit among the records of `log` in
/// `[from, end)`, or `None` when there is none. Reads backwards, `window` offsets at a time.
///
/// # Errors
/// Any error of the log's reads.
pub fn last_commit_end(
    log: &dyn Changelog,
    from: u64,
    end: u64,
    window: usize,
) -> Result<Option<u64>> {
    Ok(last_commit_end_record(log, from, end, window)?.map(|record| record.offset))
}

/// As [`last_commit_end`], returning the record.
fn last_commit_end_record(
    log: &dyn Changelog,
    from: u64,
    end: u64,
    window: usize,
) -> Result<Option<ChangelogRecord>> {
    let window = window.max(1) as u64;
    let mut high = end;
    while high > from {
        let low = high.saturating_sub(window).max(from);
        let span = usize::try_from(high - low).unwrap_or(usize::MAX);
        let records = log.read(low, span)?;
        let found = records
            .into_iter()
            .rev()
            .filter(|record| record.offset < high)
            .find(|record| record.kind.ends_commit());
        if let Some(record) = found {
            return Ok(Some(record));
        }
        high = low;
    }
    Ok(None)
}
