//! Opening a partition directory: the lock, the segment list, and recovery of the active
//! segment's tail.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use store_api::{Error, Result};

use super::config::RecoveryMode;
use super::format::{self, COMPACT_SUFFIX, LOCK_FILE, SEGMENT_HEADER_LEN};
use super::reader::read_exact_at;
use super::segment::{self, ActiveSegment, Segment, SparseIndex};

/// A closed segment and the length of its valid bytes.
#[derive(Debug, Clone)]
pub(crate) struct ClosedSegment {
    /// The segment.
    pub segment: Arc<Segment>,
    /// Its length in bytes.
    pub len: u64,
}

/// The state of a log after opening.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Closed segments, oldest first.
    pub closed: Vec<ClosedSegment>,
    /// The last segment, positioned after its last whole record.
    pub active: ActiveSegment,
    /// The offset the next append gets.
    pub next_offset: u64,
}

/// Takes the exclusive lock of a partition directory, held as long as the returned file is.
///
/// # Errors
/// `Locked` when another log holds it (in this process or another), `Io`.
pub(crate) fn lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|err| Error::io(format!("opening lock file {}", path.display()), err))?;
    // Fully qualified: `File::try_lock` from std would shadow the fs4 method.
    match fs4::FileExt::try_lock(&file) {
        Ok(()) => Ok(file),
        Err(fs4::TryLockError::WouldBlock) => Err(Error::locked(
            dir,
            "another FileLog holds this changelog partition",
        )),
        Err(fs4::TryLockError::Error(err)) => {
            Err(Error::io(format!("locking {}", path.display()), err))
        }
    }
}

/// Lists the segments of `dir` by base offset, removing compaction leftovers.
///
/// # Errors
/// `Corruption` for a file that is neither a segment nor the lock, `Io`.
fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let context = || format!("listing changelog directory {}", dir.display());
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|err| Error::io(context(), err))? {
        let path = entry.map_err(|err| Error::io(context(), err))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name == LOCK_FILE {
            continue;
        }
        if name.ends_with(COMPACT_SUFFIX) {
            // A compaction interrupted before its rename: the original segment is intact.
            tracing::info!(path = %path.display(), "removing unfinished compaction output");
            std::fs::remove_file(&path).map_err(|err| Error::io(context(), err))?;
            continue;
        }
        let Some(base) = format::parse_segment_name(name).filter(|_| path.is_file()) else {
            return Err(Error::Corruption(format!(
                "unexpected file {} in changelog directory",
                path.display()
            )));
        };
        segments.push((base, path));
    }
    segments.sort_unstable();
    Ok(segments)
}

/// Opens the log in `dir`: every segment's header is checked, the last one is scanned and its
/// torn tail handled per `mode`.
///
/// # Errors
/// `Corruption` for a foreign file or a bad segment header, or a bad tail under
/// [`RecoveryMode::Fail`]; `Io`.
pub(crate) fn recover(dir: &Path, mode: RecoveryMode) -> Result<Recovered> {
    let mut segments = list_segments(dir)?;
    let Some((last_base, last_path)) = segments.pop() else {
        return Ok(Recovered {
            closed: Vec::new(),
            active: ActiveSegment::create(dir, 0)?,
            next_offset: 0,
        });
    };
    let mut closed = Vec::with_capacity(segments.len());
    for (base, path) in segments {
        closed.push(open_closed(base, path)?);
    }
    let (active, next_offset) = open_active(last_base, last_path, mode)?;
    Ok(Recovered {
        closed,
        active,
        next_offset,
    })
}

fn open_closed(base: u64, path: PathBuf) -> Result<ClosedSegment> {
    let file = File::open(&path)
        .map_err(|err| Error::io(format!("opening changelog segment {}", path.display()), err))?;
    let len = file_len(&file, &path)?;
    if len < SEGMENT_HEADER_LEN as u64 {
        return Err(segment::corruption(
            &path,
            0,
            "segment shorter than its header",
        ));
    }
    check_header(&file, &path, base)?;
    let segment = Arc::new(Segment::unindexed(base, path, file));
    Ok(ClosedSegment { segment, len })
}

/// Opens the last segment for writing after cutting any torn tail.
fn open_active(base: u64, path: PathBuf, mode: RecoveryMode) -> Result<(ActiveSegment, u64)> {
    let context = || format!("recovering changelog segment {}", path.display());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|err| Error::io(context(), err))?;
    let len = file_len(&file, &path)?;
    if len < SEGMENT_HEADER_LEN as u64 || header_is_zero(&file)? {
        // Torn while being created: nothing was ever appended to it.
        tolerate(mode, &path, 0, len, "torn segment header")?;
        drop(file);
        std::fs::remove_file(&path).map_err(|err| Error::io(context(), err))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        return Ok((ActiveSegment::create(dir, base)?, base));
    }
    check_header(&file, &path, base)?;
    let mut index = SparseIndex::default();
    let outcome = segment::scan(&file, base, len, &mut index)?;
    if let Some((pos, reason)) = outcome.bad {
        tolerate(mode, &path, pos, len, &reason)?;
        file.set_len(pos).map_err(|err| Error::io(context(), err))?;
        file.sync_all().map_err(|err| Error::io(context(), err))?;
    }
    let active = ActiveSegment::resume(path, base, file, outcome.valid_len, index)?;
    Ok((active, outcome.next_offset))
}

/// Accepts a bad tail from `pos` to `len` under `TolerateTornTail`, with a warning.
fn tolerate(mode: RecoveryMode, path: &Path, pos: u64, len: u64, reason: &str) -> Result<()> {
    match mode {
        RecoveryMode::TolerateTornTail => {
            tracing::warn!(
                segment = %path.display(),
                position = pos,
                dropped_bytes = len - pos,
                reason,
                "truncating the torn tail of a changelog segment"
            );
            Ok(())
        }
        RecoveryMode::Fail => Err(segment::corruption(path, pos, reason)),
    }
}

fn file_len(file: &File, path: &Path) -> Result<u64> {
    file.metadata()
        .map(|meta| meta.len())
        .map_err(|err| Error::io(format!("reading the size of {}", path.display()), err))
}

fn read_header(file: &File) -> Result<[u8; SEGMENT_HEADER_LEN]> {
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    read_exact_at(file, &mut header, 0)?;
    Ok(header)
}

/// A file system may keep a crashed file's size but not its data, leaving zeros.
fn header_is_zero(file: &File) -> Result<bool> {
    Ok(read_header(file)?.iter().all(|&b| b == 0))
}

fn check_header(file: &File, path: &Path, base: u64) -> Result<()> {
    if read_header(file)? != format::segment_header(base) {
        let reason = format!("not a changelog segment with base offset {base} (bad header)");
        return Err(segment::corruption(path, 0, &reason));
    }
    Ok(())
}
