//! One segment file: its shared read side with a sparse offset index, and the writer of the
//! active segment.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use store_api::{BatchOp, Error, Result};

use super::format::{self, SEGMENT_HEADER_LEN};
use super::reader::{RecordReader, Scan};
use crate::record::RecordKind;

/// One index entry per this many bytes of records: a read starts at most this far before the
/// record it wants, and a 64 MiB segment needs 16 Ki entries (256 KiB).
const INDEX_INTERVAL: u64 = 4096;

/// Size of the write buffer of the active segment: appends cost no syscall until it fills.
const WRITE_BUFFER_LEN: usize = 512 * 1024;

/// Offset to file position, one entry every [`INDEX_INTERVAL`] bytes.
#[derive(Default)]
pub(crate) struct SparseIndex {
    entries: Vec<(u64, u64)>,
    /// False for a closed segment found at open, until a reader has scanned it once; the
    /// index is then built lazily so opening a long log reads only its last segment.
    complete: bool,
}

// A summary: the entries of a big log would flood any debug output of the log.
impl std::fmt::Debug for SparseIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseIndex")
            .field("entries", &self.entries.len())
            .field("complete", &self.complete)
            .finish()
    }
}

impl SparseIndex {
    /// Records that the record `offset` starts at `pos`, if it is due an entry.
    pub(crate) fn note(&mut self, offset: u64, pos: u64) {
        let due = self
            .entries
            .last()
            .is_none_or(|&(_, last)| pos - last >= INDEX_INTERVAL);
        if due {
            self.entries.push((offset, pos));
        }
    }

    /// The position of the last indexed record at or before `offset`: a record boundary from
    /// which a scan reaches `offset`.
    fn floor(&self, offset: u64) -> u64 {
        let after = self.entries.partition_point(|&(o, _)| o <= offset);
        match after {
            0 => SEGMENT_HEADER_LEN as u64,
            n => self.entries[n - 1].1,
        }
    }
}

/// What a full scan of a segment found.
#[derive(Debug)]
pub(crate) struct ScanOutcome {
    /// The end of the last whole, valid record.
    pub valid_len: u64,
    /// One past the last offset found, or the base for an empty segment.
    pub next_offset: u64,
    /// The first bad record, as `(position, reason)`, if the scan stopped at one.
    pub bad: Option<(u64, String)>,
}

/// The read side of a segment, shared by the log and its readers.
#[derive(Debug)]
pub(crate) struct Segment {
    /// The offset of its first record (also in its name and header).
    pub base: u64,
    /// Its file.
    pub path: PathBuf,
    /// A read-only handle used with positional reads; it keeps the data readable after the
    /// file is deleted or replaced.
    pub file: File,
    index: RwLock<SparseIndex>,
}

impl Segment {
    /// A segment whose index is complete (the caller scanned or wrote every record).
    pub(crate) fn indexed(base: u64, path: PathBuf, file: File, index: SparseIndex) -> Self {
        let index = SparseIndex {
            complete: true,
            ..index
        };
        Segment {
            base,
            path,
            file,
            index: RwLock::new(index),
        }
    }

    /// A closed segment found at open, indexed on first read.
    pub(crate) fn unindexed(base: u64, path: PathBuf, file: File) -> Self {
        Segment {
            base,
            path,
            file,
            index: RwLock::new(SparseIndex::default()),
        }
    }

    /// Adds an index entry for a record the writer just appended.
    pub(crate) fn note(&self, offset: u64, pos: u64) {
        self.index.write().note(offset, pos);
    }

    /// A record boundary at or before `offset` within the first `len` bytes. Builds the index
    /// first if this segment has none yet, checking every record; `limit` is the base of the
    /// next segment, which no offset here may reach.
    ///
    /// # Errors
    /// `Corruption` for a bad record, `Io`.
    pub(crate) fn position_for(&self, offset: u64, len: u64, limit: Option<u64>) -> Result<u64> {
        {
            let index = self.index.read();
            if index.complete {
                return Ok(index.floor(offset));
            }
        }
        let mut index = self.index.write();
        if !index.complete {
            let mut built = SparseIndex::default();
            let outcome = scan(&self.file, self.base, len, &mut built)?;
            if let Some((pos, reason)) = outcome.bad {
                return Err(corruption(&self.path, pos, &reason));
            }
            if limit.is_some_and(|limit| outcome.next_offset > limit) {
                let message = "offsets overlap the next segment";
                return Err(corruption(&self.path, outcome.valid_len, message));
            }
            *index = SparseIndex {
                complete: true,
                ..built
            };
        }
        Ok(index.floor(offset))
    }
}

/// The error for a bad record at `pos` of segment `path`.
pub(crate) fn corruption(path: &Path, pos: u64, reason: &str) -> Error {
    Error::Corruption(format!("{}: {reason} at byte {pos}", path.display()))
}

/// Scans every record of a segment from its header to `len`, filling `index`, and stops at
/// the first bad record. Offsets must ascend from `base`; one that does not is a bad record.
///
/// # Errors
/// `Io` only: bad records are reported in the outcome.
pub(crate) fn scan(
    file: &File,
    base: u64,
    len: u64,
    index: &mut SparseIndex,
) -> Result<ScanOutcome> {
    let mut reader = RecordReader::new(file, SEGMENT_HEADER_LEN as u64, len);
    let mut next_offset = base;
    loop {
        match reader.next()? {
            // `u64::MAX` would leave no end offset (one past the last record) to report.
            Scan::Record(pos, view) if view.offset >= next_offset && view.offset < u64::MAX => {
                index.note(view.offset, pos);
                next_offset = view.offset + 1;
            }
            Scan::Record(pos, view) => {
                let reason = format!("offset {} where {next_offset} or more was due", view.offset);
                return Ok(outcome(pos, next_offset, Some((pos, reason))));
            }
            Scan::End => return Ok(outcome(reader.position(), next_offset, None)),
            Scan::Bad { pos, reason } => return Ok(outcome(pos, next_offset, Some((pos, reason)))),
        }
    }
}

fn outcome(valid_len: u64, next_offset: u64, bad: Option<(u64, String)>) -> ScanOutcome {
    ScanOutcome {
        valid_len,
        next_offset,
        bad,
    }
}

/// The segment being appended to.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    /// Its read side.
    pub segment: Arc<Segment>,
    /// `None` once [`discard`](ActiveSegment::discard)ed.
    writer: Option<BufWriter<File>>,
    /// A duplicate of the write handle, so `sync` can fsync without holding the log's lock.
    pub sync_handle: Arc<File>,
    /// Bytes written, buffered ones included.
    pub len: u64,
    /// Bytes handed to the operating system: what readers may read.
    pub flushed: u64,
    /// The position from which the next record gets an index entry; checked here so an
    /// append takes the index lock only once per [`INDEX_INTERVAL`] bytes.
    next_index_at: u64,
    /// The record being appended, encoded whole so its checksum takes one pass; reused.
    scratch: Vec<u8>,
}

impl ActiveSegment {
    /// Creates the segment file for `base` in `dir` (it must not exist) and writes its header.
    ///
    /// # Errors
    /// `Io`, including when the file already exists.
    pub(crate) fn create(dir: &Path, base: u64) -> Result<Self> {
        let path = dir.join(format::segment_name(base));
        let context = || format!("creating changelog segment {}", path.display());
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|err| Error::io(context(), err))?;
        file.write_all(&format::segment_header(base))
            .map_err(|err| Error::io(context(), err))?;
        let len = SEGMENT_HEADER_LEN as u64;
        Self::resume(path, base, file, len, SparseIndex::default())
    }

    /// Continues writing `file`, a segment whose first `len` bytes are valid and indexed.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn resume(
        path: PathBuf,
        base: u64,
        mut file: File,
        len: u64,
        index: SparseIndex,
    ) -> Result<Self> {
        let context = || format!("opening changelog segment {}", path.display());
        file.seek(SeekFrom::Start(len))
            .map_err(|err| Error::io(context(), err))?;
        let read = File::open(&path).map_err(|err| Error::io(context(), err))?;
        let sync_handle = Arc::new(file.try_clone().map_err(|err| Error::io(context(), err))?);
        Ok(ActiveSegment {
            segment: Arc::new(Segment::indexed(base, path, read, index)),
            writer: Some(BufWriter::with_capacity(WRITE_BUFFER_LEN, file)),
            sync_handle,
            len,
            flushed: len,
            next_index_at: 0,
            scratch: Vec::new(),
        })
    }

    /// Buffers the record of `op` at `offset`, framed as `kind`; the caller checked the op
    /// against the limits.
    ///
    /// # Errors
    /// `Io` when the buffer could not be written out.
    pub(crate) fn append(&mut self, offset: u64, op: &BatchOp, kind: RecordKind) -> Result<()> {
        let writer = self.writer.as_mut().ok_or_else(discarded)?;
        self.scratch.clear();
        format::encode_record(offset, op, kind, &mut self.scratch);
        writer
            .write_all(&self.scratch)
            .map_err(|err| Error::io("appending to a changelog segment", err))?;
        if self.scratch.capacity() > WRITE_BUFFER_LEN {
            // A huge record's buffer is not kept for the small ones after it.
            self.scratch = Vec::new();
        }
        if self.len >= self.next_index_at {
            self.segment.note(offset, self.len);
            self.next_index_at = self.len + INDEX_INTERVAL;
        }
        self.len += format::record_len(op) as u64;
        Ok(())
    }

    /// Hands buffered bytes to the operating system, making them readable.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.flushed < self.len {
            let writer = self.writer.as_mut().ok_or_else(discarded)?;
            writer
                .flush()
                .map_err(|err| Error::io("flushing a changelog segment", err))?;
            self.flushed = self.len;
        }
        Ok(())
    }

    /// Drops the write buffer without writing it. After a failed write its contents are in
    /// an unknown state, and after `close` another log may own the directory: either way,
    /// the buffer must not reach the file when the log is dropped.
    pub(crate) fn discard(&mut self) {
        if let Some(writer) = self.writer.take() {
            let (_file, _unwritten) = writer.into_parts();
        }
    }
}

fn discarded() -> Error {
    Error::io(
        "writing a changelog segment",
        std::io::Error::other("the segment writer was discarded after a failure or close"),
    )
}
