//! Compaction: rewriting closed segments to keep only the latest record of each key.
//!
//! Offsets never change, so a reader's position and a store's checkpoint stay valid; the
//! log only gains gaps. Commit markers share one key, so only the latest survives, merging
//! the commits before it (see [`Changelog`](crate::Changelog)); records after the last commit
//! end are kept and do not supersede anything. The latest record of every key is found across the whole log, the
//! active segment included, so a key updated there loses its older records in closed
//! segments too; the active segment itself is never rewritten. The map of latest offsets
//! holds every distinct key of the log in memory while compaction runs.
//!
//! Each segment is rewritten to `<name>.log.compact`, fsynced, and renamed over the original,
//! then the directory is fsynced. A crash leaves every segment either old or new, both
//! readable; an orphaned `.log.compact` file is deleted at the next open.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use store_api::{Error, Result};

use super::format::{self, COMPACT_SUFFIX, SEGMENT_HEADER_LEN};
use super::log::{FileLog, ReadPart, fsync, sync_dir};
use super::reader::{BUFFER_LEN, RecordReader, Scan};
use super::recovery::ClosedSegment;
use super::segment::{self, Segment, SparseIndex};
use crate::record::RecordKind;

/// What one [`FileLog::compact`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Closed segments rewritten (those holding at least one superseded record).
    pub segments_rewritten: usize,
    /// Records dropped because a later record of the same key exists.
    pub records_removed: u64,
    /// Size of the rewritten segments before, in bytes.
    pub bytes_before: u64,
    /// Size of the rewritten segments after, in bytes.
    pub bytes_after: u64,
}

/// A rewritten segment waiting to be renamed into place.
struct Rewrite {
    old: Arc<Segment>,
    temp: PathBuf,
    new: ClosedSegment,
    removed: u64,
}

impl FileLog {
    /// Rewrites every closed segment that holds a superseded record so that it keeps only
    /// the latest record of each key (tombstones included), without changing any offset.
    ///
    /// Appends and reads go on while it runs; records appended meanwhile are kept. Reads that
    /// started before a segment was replaced finish on the old file.
    ///
    /// # Errors
    /// `Corruption` for a bad record in any segment, `Closed`, `Io`. On error every segment
    /// is intact: either untouched or completely rewritten.
    pub fn compact(&self) -> Result<CompactionStats> {
        let _serial = self.compaction.lock();
        let (parts, _) = self.read_plan(0)?;
        let latest = latest_offsets(&parts)?;
        let mut rewrites = Vec::new();
        // The last part is the active segment, which is never rewritten.
        for part in &parts[..parts.len().saturating_sub(1)] {
            if let Some(rewrite) = rewrite(part, &latest)? {
                rewrites.push(rewrite);
            }
        }
        self.install(rewrites)
    }

    /// Renames each rewrite over its original and swaps it into the segment list, unless
    /// retention deleted the original meanwhile.
    fn install(&self, rewrites: Vec<Rewrite>) -> Result<CompactionStats> {
        let mut stats = CompactionStats::default();
        let mut inner = self.inner.lock();
        for rewrite in rewrites {
            let slot = inner
                .closed
                .iter()
                .position(|c| Arc::ptr_eq(&c.segment, &rewrite.old));
            let Some(slot) = slot else {
                remove_temp(&rewrite.temp);
                continue;
            };
            if let Err(err) = std::fs::rename(&rewrite.temp, &rewrite.old.path) {
                remove_temp(&rewrite.temp);
                return Err(Error::io(
                    format!("installing {}", rewrite.old.path.display()),
                    err,
                ));
            }
            stats.segments_rewritten += 1;
            stats.records_removed += rewrite.removed;
            stats.bytes_before += inner.closed[slot].len;
            stats.bytes_after += rewrite.new.len;
            inner.closed[slot] = rewrite.new;
        }
        drop(inner);
        if stats.segments_rewritten > 0 {
            sync_dir(self.dir())?;
        }
        Ok(stats)
    }
}

/// The latest record of every key among the records up to the last commit end, and that
/// commit end.
struct Latest {
    offsets: HashMap<Vec<u8>, u64>,
    commit_end: Option<u64>,
}

impl Latest {
    /// True when the record at `offset` must be kept: it is the latest of its key, or it
    /// follows the last commit end (a commit not closed yet, or abandoned). Those records do
    /// not count as the latest of their keys either, since no reader applies them: counting
    /// them would drop the committed record a restore needs.
    fn keeps(&self, offset: u64, key: &[u8]) -> bool {
        self.commit_end.is_none_or(|end| offset > end) || self.offsets.get(key) == Some(&offset)
    }
}

/// The latest offsets of the keys of `parts` (see [`Latest`]).
fn latest_offsets(parts: &[ReadPart]) -> Result<Latest> {
    let mut latest = Latest {
        offsets: HashMap::new(),
        commit_end: None,
    };
    let mut open: Vec<(Vec<u8>, u64)> = Vec::new();
    for part in parts {
        for_each_record(part, |offset, key, kind, _| {
            if kind == RecordKind::Framed {
                open.push((key.to_vec(), offset));
                return Ok(());
            }
            for (key, offset) in open.drain(..) {
                latest.offsets.insert(key, offset);
            }
            match latest.offsets.get_mut(key) {
                Some(slot) => *slot = offset,
                None => {
                    latest.offsets.insert(key.to_vec(), offset);
                }
            }
            latest.commit_end = Some(offset);
            Ok(())
        })?;
    }
    Ok(latest)
}

/// Calls `visit(offset, key, kind, raw)` for every record of `part`.
fn for_each_record(
    part: &ReadPart,
    mut visit: impl FnMut(u64, &[u8], RecordKind, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut reader = RecordReader::new(&part.segment.file, SEGMENT_HEADER_LEN as u64, part.len);
    loop {
        match reader.next()? {
            Scan::Record(_, view) => visit(view.offset, view.key, view.kind, view.raw)?,
            Scan::End => return Ok(()),
            Scan::Bad { pos, reason } => {
                return Err(segment::corruption(&part.segment.path, pos, &reason));
            }
        }
    }
}

/// Writes the records of `part` that are the latest of their key to a temporary segment, or
/// returns `None` when every record is the latest and there is nothing to gain.
fn rewrite(part: &ReadPart, latest: &Latest) -> Result<Option<Rewrite>> {
    let is_latest = |offset: u64, key: &[u8]| latest.keeps(offset, key);
    let mut stale = 0u64;
    for_each_record(part, |offset, key, _, _| {
        stale += u64::from(!is_latest(offset, key));
        Ok(())
    })?;
    if stale == 0 {
        return Ok(None);
    }
    let segment = &part.segment;
    let temp = temp_path(&segment.path);
    let file = create_temp(&temp)?;
    let context = || format!("writing {}", temp.display());
    let mut writer = BufWriter::with_capacity(BUFFER_LEN, &file);
    writer
        .write_all(&format::segment_header(segment.base))
        .map_err(|err| Error::io(context(), err))?;
    let mut index = SparseIndex::default();
    let mut len = SEGMENT_HEADER_LEN as u64;
    for_each_record(part, |offset, key, _, raw| {
        if is_latest(offset, key) {
            writer
                .write_all(raw)
                .map_err(|err| Error::io(context(), err))?;
            index.note(offset, len);
            len += raw.len() as u64;
        }
        Ok(())
    })?;
    writer.flush().map_err(|err| Error::io(context(), err))?;
    drop(writer);
    fsync(&file)?;
    let new = Segment::indexed(segment.base, segment.path.clone(), file, index);
    Ok(Some(Rewrite {
        old: Arc::clone(segment),
        temp,
        new: ClosedSegment {
            segment: Arc::new(new),
            len,
        },
        removed: stale,
    }))
}

fn temp_path(segment: &Path) -> PathBuf {
    let mut name = segment.file_name().unwrap_or_default().to_os_string();
    name.push(COMPACT_SUFFIX.trim_start_matches(".log"));
    segment.with_file_name(name)
}

fn create_temp(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|err| Error::io(format!("creating {}", path.display()), err))
}

fn remove_temp(path: &Path) {
    if let Err(err) = std::fs::remove_file(path) {
        tracing::warn!(path = %path.display(), error = %err, "could not remove compaction output");
    }
}
