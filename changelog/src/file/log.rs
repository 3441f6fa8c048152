//! [`FileLog`]: the segment list behind one lock, and the `Changelog` implementation.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use store_api::{BatchOp, Error, Result};

use super::config::{FileLogConfig, SyncPolicy};
use super::format::{self, SEGMENT_HEADER_LEN};
use super::reader::{RecordReader, Scan};
use super::recovery::{self, ClosedSegment};
use super::segment::{self, ActiveSegment, Segment};
use crate::record::{Framing, RecordKind, check_append, marker_op};
use crate::{Changelog, ChangelogRecord};

/// A changelog partition kept in segment files on local disk.
///
/// One `FileLog` at a time may hold a partition directory: a second open, from this process
/// or another, fails with `Locked` until the first is dropped or [closed](FileLog::close).
/// Appends and syncs are serialized; reads run concurrently with them and with each other.
///
/// # Layout
/// A log lives in `<dir>/<topic>-<partition>/`, which holds a `.lock` file (an exclusive
/// `flock` held while a [`FileLog`] is open) and segment files named by the offset of their
/// first record, 20 zero-padded digits and `.log` (`00000000000000000000.log`), so names sort
/// like offsets. The last segment is the active one; appends go there until it would pass
/// [`FileLogConfig::segment_bytes`], when it is fsynced, closed, and a new one started.
///
/// # Format (all integers little-endian)
/// A segment starts with a 16-byte header: the magic `SSCLOG\0` and a format version byte
/// (`1`), then the base offset as `u64`. Records follow back to back:
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | `body_len: u32`, the bytes after the CRC: `16 + key_len + value bytes` |
/// | 4..8 | `crc: u32`, CRC32C (Castagnoli) of the body, bytes `8..8 + body_len` |
/// | 8..16 | `offset: u64` |
/// | 16..20 | `key_len: u32` in the low 30 bits; bit 31 set on a record inside a commit, bits 31 and 30 on a commit marker, both clear on an unframed record |
/// | 20..24 | `value_len: u32`, or `u32::MAX` for a tombstone (then no value bytes) |
/// | 24.. | key bytes, then value bytes |
///
/// The length is outside the checksum, but a damaged length is still caught: it must agree
/// with the checksummed key and value lengths, and it is bounded by the key and value
/// limits before anything is allocated for it.
///
/// # Recovery
/// Closed segments were fsynced when they were closed, so only the active segment can end
/// in a torn record. Opening a log checks every segment header and scans the active segment;
/// the first record that is short, fails its checksum or breaks the offset order ends the
/// valid data, and [`RecoveryMode`](crate::RecoveryMode) says whether the rest is cut (with a `tracing` warning)
/// or the open fails with `Corruption`. The end offset is one past the last whole record.
///
/// # Reads
/// Each segment keeps a sparse in-memory index, one entry per 4 KiB of records, so a read
/// decodes at most 4 KiB before the first record it returns. The active segment's index is
/// built by the recovery scan and the writer; a closed segment found at open is indexed by
/// one checking scan the first time a read reaches it, so opening a long log reads only its
/// last segment. A read first hands the write buffer to the OS, so records appended but not
/// yet synced are readable, then reads without holding the log's lock, through positional
/// reads of 256 KiB, on a read handle that stays valid if the file is deleted or replaced.
///
/// # Compaction and retention
/// [`compact`](FileLog::compact) rewrites closed segments to the latest record of each key;
/// [`FileLogConfig::retention_bytes`] compacts and then deletes the oldest segments left
/// without a record. Neither changes an offset or removes the latest record of a key:
/// compaction leaves gaps, retention raises the start offset.
///
/// ```
/// use statestore_changelog::{Changelog, FileLog, FileLogConfig};
/// use store_api::BatchOp;
///
/// let dir = tempfile::tempdir().unwrap();
/// let log = FileLog::open(dir.path(), "app-counts-changelog", 0, FileLogConfig::default())?;
/// let offsets = log.append(&[
///     BatchOp::Put { key: b"apple".to_vec(), value: b"3".to_vec() },
///     BatchOp::Delete { key: b"pear".to_vec() },
/// ])?;
/// assert_eq!(offsets, 0..2);
/// log.sync()?;
/// assert_eq!(log.read(1, 10)?[0].op, BatchOp::Delete { key: b"pear".to_vec() });
/// # Ok::<(), store_api::Error>(())
/// ```
#[derive(Debug)]
pub struct FileLog {
    topic: String,
    partition: u32,
    dir: PathBuf,
    config: FileLogConfig,
    pub(super) inner: Mutex<Inner>,
    /// Serializes compactions, which do most of their work without `inner`.
    pub(super) compaction: Mutex<()>,
}

/// The mutable state. Field order matters on drop: the active segment's buffer is flushed
/// before the lock file is released.
#[derive(Debug)]
pub(super) struct Inner {
    pub closed: Vec<ClosedSegment>,
    pub active: ActiveSegment,
    next_offset: u64,
    /// Appends so far; `synced` is the count the last successful fsync covered.
    appended: u64,
    synced: u64,
    /// Set by the first failed write or fsync: the buffered state is then unknown, so the log
    /// refuses appends (as fjall's journal does) and must be reopened to recover.
    failure: Option<String>,
    /// Set by a roll when retention is configured: the appender applies it once it has
    /// released this lock, since retention compacts first.
    pub retention_due: bool,
    /// The partition lock; `None` once closed.
    lock: Option<File>,
}

/// A segment, how many bytes of it a reader may read, and the base of the segment after it.
#[derive(Debug)]
pub(super) struct ReadPart {
    pub segment: Arc<Segment>,
    pub len: u64,
    pub limit: Option<u64>,
}

impl FileLog {
    /// Opens, creating if needed, partition `partition` of `topic` under `dir`, recovering a
    /// torn tail per `config.recovery`.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad topic name or config, `Locked` when another `FileLog`
    /// holds the partition, `Corruption` for a foreign file or a damaged segment header (or a
    /// torn tail under [`RecoveryMode::Fail`](super::RecoveryMode::Fail)), `Io`.
    pub fn open(dir: &Path, topic: &str, partition: u32, config: FileLogConfig) -> Result<Self> {
        format::validate_topic(topic)?;
        config.validate()?;
        let dir = dir.join(format!("{topic}-{partition}"));
        std::fs::create_dir_all(&dir)
            .map_err(|err| Error::io(format!("creating {}", dir.display()), err))?;
        let lock = recovery::lock(&dir)?;
        let recovered = recovery::recover(&dir, config.recovery)?;
        let inner = Inner {
            closed: recovered.closed,
            active: recovered.active,
            next_offset: recovered.next_offset,
            appended: 0,
            synced: 0,
            failure: None,
            retention_due: config.retention_bytes.is_some(),
            lock: Some(lock),
        };
        let log = FileLog {
            topic: topic.to_string(),
            partition,
            dir,
            config,
            inner: Mutex::new(inner),
            compaction: Mutex::new(()),
        };
        log.apply_retention();
        Ok(log)
    }

    /// The partition directory, `<dir>/<topic>-<partition>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options this log was opened with.
    pub fn config(&self) -> &FileLogConfig {
        &self.config
    }

    /// Flushes and, under [`SyncPolicy::EveryCommit`], fsyncs what was appended, then releases
    /// the partition lock. Every later call fails with `Closed`; closing again does nothing.
    ///
    /// # Errors
    /// `Io` when the final flush or fsync fails; the log is closed anyway.
    pub fn close(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        if inner.lock.is_none() {
            return Ok(());
        }
        let result = if inner.failure.is_some() {
            Ok(())
        } else {
            inner.active.flush().and_then(|()| match self.config.sync {
                SyncPolicy::EveryCommit => fsync(&inner.active.sync_handle),
                SyncPolicy::Never => Ok(()),
            })
        };
        inner.active.discard();
        inner.lock = None;
        result
    }

    /// The segments a read from `from` visits, after flushing the write buffer, and the end
    /// offset at that moment.
    pub(super) fn read_plan(&self, from: u64) -> Result<(Vec<ReadPart>, u64)> {
        let mut inner = self.inner.lock();
        inner.check_open()?;
        if from >= inner.next_offset {
            return Ok((Vec::new(), inner.next_offset));
        }
        if inner.failure.is_none()
            && let Err(err) = inner.active.flush()
        {
            inner.poison(&err);
            return Err(err);
        }
        Ok((inner.parts_from(from), inner.next_offset))
    }
}

impl Inner {
    fn check_open(&self) -> Result<()> {
        match self.lock {
            Some(_) => Ok(()),
            None => Err(Error::Closed),
        }
    }

    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        match &self.failure {
            None => Ok(()),
            Some(failure) => Err(Error::io(
                "writing to a changelog that failed earlier; reopen it to recover",
                std::io::Error::other(failure.clone()),
            )),
        }
    }

    fn poison(&mut self, err: &Error) {
        tracing::error!(error = %err, "changelog write failed; refusing further appends");
        self.failure.get_or_insert_with(|| err.to_string());
        self.active.discard();
    }

    fn append_all(
        &mut self,
        ops: &[BatchOp],
        framing: Framing,
        dir: &Path,
        config: &FileLogConfig,
    ) -> Result<()> {
        let kind = match framing {
            Framing::Unframed => RecordKind::Unframed,
            Framing::Open | Framing::Commit => RecordKind::Framed,
        };
        for op in ops {
            self.append_one(op, kind, dir, config)?;
        }
        if framing == Framing::Commit {
            self.append_one(&marker_op(), RecordKind::CommitMarker, dir, config)?;
        }
        self.appended += 1;
        Ok(())
    }

    /// Appends one record, rolling first when it would take the active segment past its
    /// size. A commit may so span segments: the marker, not the segment, frames it.
    fn append_one(
        &mut self,
        op: &BatchOp,
        kind: RecordKind,
        dir: &Path,
        config: &FileLogConfig,
    ) -> Result<()> {
        let size = format::record_len(op) as u64;
        let has_records = self.active.len > SEGMENT_HEADER_LEN as u64;
        if has_records && self.active.len + size > config.segment_bytes {
            self.roll(dir, config)?;
        }
        self.active.append(self.next_offset, op, kind)?;
        self.next_offset += 1;
        Ok(())
    }

    /// Closes the active segment, durably, and starts the next one.
    fn roll(&mut self, dir: &Path, config: &FileLogConfig) -> Result<()> {
        self.active.flush()?;
        // Whatever the sync policy, a closed segment is durable, so recovery only ever has
        // the active segment's tail to repair.
        fsync(&self.active.sync_handle)?;
        let next = ActiveSegment::create(dir, self.next_offset)?;
        sync_dir(dir)?;
        let old = std::mem::replace(&mut self.active, next);
        self.closed.push(ClosedSegment {
            segment: old.segment,
            len: old.len,
        });
        self.retention_due = config.retention_bytes.is_some();
        Ok(())
    }

    pub(super) fn total_len(&self) -> u64 {
        self.closed.iter().map(|c| c.len).sum::<u64>() + self.active.len
    }

    fn start_offset(&self) -> u64 {
        self.closed
            .first()
            .map_or(self.active.segment.base, |c| c.segment.base)
    }

    fn parts_from(&self, from: u64) -> Vec<ReadPart> {
        let active_base = self.active.segment.base;
        let mut parts = Vec::new();
        if from < active_base {
            let first = self.closed.partition_point(|c| c.segment.base <= from);
            for (i, closed) in self.closed.iter().enumerate().skip(first.saturating_sub(1)) {
                let next_base = self
                    .closed
                    .get(i + 1)
                    .map_or(active_base, |n| n.segment.base);
                parts.push(ReadPart {
                    segment: Arc::clone(&closed.segment),
                    len: closed.len,
                    limit: Some(next_base),
                });
            }
        }
        parts.push(ReadPart {
            segment: Arc::clone(&self.active.segment),
            len: self.active.flushed,
            limit: None,
        });
        parts
    }
}

/// Appends the records of `part` at or after `from` to `out` until it holds `max`.
fn read_part(part: &ReadPart, from: u64, max: usize, out: &mut Vec<ChangelogRecord>) -> Result<()> {
    let pos = part.segment.position_for(from, part.len, part.limit)?;
    let mut reader = RecordReader::new(&part.segment.file, pos, part.len);
    while out.len() < max {
        match reader.next()? {
            Scan::Record(_, view) if view.offset < from => {}
            Scan::Record(_, view) => out.push(ChangelogRecord {
                offset: view.offset,
                op: view.to_op(),
                kind: view.kind,
                epoch: 0,
            }),
            Scan::End => break,
            Scan::Bad { pos, reason } => {
                return Err(segment::corruption(&part.segment.path, pos, &reason));
            }
        }
    }
    Ok(())
}

pub(super) fn fsync(file: &File) -> Result<()> {
    file.sync_data()
        .map_err(|err| Error::io("fsyncing a changelog segment", err))
}

/// Makes file creations, renames and deletions in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let context = || format!("fsyncing directory {}", dir.display());
        let handle = File::open(dir).map_err(|err| Error::io(context(), err))?;
        handle.sync_all().map_err(|err| Error::io(context(), err))?;
    }
    #[cfg(not(unix))]
    let _ = dir; // Directories cannot be opened for fsync here; NTFS journals metadata.
    Ok(())
}

impl Changelog for FileLog {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn partition(&self) -> u32 {
        self.partition
    }

    fn max_record_len(&self) -> usize {
        self.config.max_record_bytes
    }

    fn append_framed(&self, ops: &[BatchOp], framing: Framing) -> Result<Range<u64>> {
        check_append(ops, self.config.max_record_bytes)?;
        let mut inner = self.inner.lock();
        inner.check_writable()?;
        let start = inner.next_offset;
        if ops.is_empty() && framing != Framing::Commit {
            return Ok(start..start);
        }
        // A commit adds its marker after the ops.
        if start.checked_add(ops.len() as u64 + 1).is_none() {
            // Only a damaged or forged segment name gets a log this far.
            return Err(Error::Corruption(format!(
                "changelog {}: offsets exhausted at {start}",
                self.dir.display()
            )));
        }
        if let Err(err) = inner.append_all(ops, framing, &self.dir, &self.config) {
            inner.poison(&err);
            return Err(err);
        }
        let written = start..inner.next_offset;
        drop(inner);
        self.apply_retention();
        Ok(written)
    }

    fn sync(&self) -> Result<()> {
        let (handle, target) = {
            let mut inner = self.inner.lock();
            inner.check_writable()?;
            if let Err(err) = inner.active.flush() {
                inner.poison(&err);
                return Err(err);
            }
            if self.config.sync == SyncPolicy::Never || inner.synced == inner.appended {
                return Ok(());
            }
            (Arc::clone(&inner.active.sync_handle), inner.appended)
        };
        // The fsync runs without the lock, so readers and appenders are not held up by it.
        // Should a roll happen meanwhile, the segment rolled away was fsynced by the roll.
        let result = fsync(&handle);
        let mut inner = self.inner.lock();
        match result {
            Ok(()) => inner.synced = inner.synced.max(target),
            Err(ref err) => inner.poison(err),
        }
        result
    }

    fn read(&self, from: u64, max_records: usize) -> Result<Vec<ChangelogRecord>> {
        let (parts, end) = self.read_plan(from)?;
        let wanted = usize::try_from(end.saturating_sub(from)).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(max_records.min(wanted).min(64 * 1024));
        for part in &parts {
            if out.len() >= max_records {
                break;
            }
            read_part(part, from, max_records, &mut out)?;
        }
        Ok(out)
    }

    fn start_offset(&self) -> Result<u64> {
        let inner = self.inner.lock();
        inner.check_open()?;
        Ok(inner.start_offset())
    }

    fn end_offset(&self) -> Result<u64> {
        let inner = self.inner.lock();
        inner.check_open()?;
        Ok(inner.next_offset)
    }
}
