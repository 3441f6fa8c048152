//! Sequential, buffered decoding of the records of one segment.
//!
//! Reads are positional (`pread`) on a shared read handle, so many readers and the writer use
//! one segment at once without moving a shared cursor, and a segment that retention deletes or
//! compaction replaces stays readable through the handle a reader already holds. One read
//! syscall fetches up to [`BUFFER_LEN`] bytes, so small records cost no syscall each.

use std::fs::File;
use std::io;

use store_api::{Error, Result};

use super::format::{self, RECORD_PREFIX_LEN, RecordView};

/// Bytes fetched per read. Records up to this size are decoded in place in the buffer; larger
/// ones are read whole into a second buffer.
pub(crate) const BUFFER_LEN: usize = 256 * 1024;

/// One step of a scan.
#[derive(Debug)]
pub(crate) enum Scan<'a> {
    /// A whole, valid record starting at the given file position.
    Record(u64, RecordView<'a>),
    /// The scan reached the end of the valid bytes exactly at a record boundary.
    End,
    /// The bytes at `pos` are not a whole valid record: a torn tail or corruption.
    Bad {
        /// Where the bad record starts.
        pos: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// Decodes records from `file` between a start position and `end`.
#[derive(Debug)]
pub(crate) struct RecordReader<'f> {
    file: &'f File,
    end: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_pos: u64,
    /// First byte of `buf` not yet decoded.
    start: usize,
    /// Bytes of `buf` holding file data.
    filled: usize,
    large: Vec<u8>,
}

impl<'f> RecordReader<'f> {
    /// A reader of the records from `pos` (a record boundary) up to `end`.
    pub(crate) fn new(file: &'f File, pos: u64, end: u64) -> Self {
        let remaining = end.saturating_sub(pos);
        // Never more than the bytes left, so a short segment gets a short buffer.
        let len = usize::try_from(remaining).map_or(BUFFER_LEN, |r| r.min(BUFFER_LEN));
        RecordReader {
            file,
            end,
            buf: vec![0; len],
            buf_pos: pos,
            start: 0,
            filled: 0,
            large: Vec::new(),
        }
    }

    /// The file position of the next record.
    pub(crate) fn position(&self) -> u64 {
        self.buf_pos + self.start as u64
    }

    /// Decodes the next record.
    ///
    /// # Errors
    /// `Io` when reading fails; a bad record is not an error here but [`Scan::Bad`], because
    /// recovery treats it as a tail to cut while a reader reports corruption.
    pub(crate) fn next(&mut self) -> Result<Scan<'_>> {
        let pos = self.position();
        let remaining = self.end.saturating_sub(pos);
        if remaining == 0 {
            return Ok(Scan::End);
        }
        if remaining < RECORD_PREFIX_LEN as u64 {
            return Ok(bad(pos, "torn record header"));
        }
        self.fill(RECORD_PREFIX_LEN)?;
        let prefix = [
            self.buf[self.start],
            self.buf[self.start + 1],
            self.buf[self.start + 2],
            self.buf[self.start + 3],
        ];
        let total = match format::body_len(&prefix) {
            Ok(body) => RECORD_PREFIX_LEN + body,
            Err(reason) => return Ok(Scan::Bad { pos, reason }),
        };
        if total as u64 > remaining {
            return Ok(bad(pos, "record runs past the end of the segment"));
        }
        let raw: &[u8] = if total <= self.buf.len() {
            self.fill(total)?;
            let range = self.start..self.start + total;
            self.start += total;
            &self.buf[range]
        } else {
            self.read_large(pos, total)?;
            &self.large
        };
        Ok(match format::decode(raw) {
            Ok(view) => Scan::Record(pos, view),
            Err(reason) => Scan::Bad { pos, reason },
        })
    }

    /// Makes at least `n` undecoded bytes available in the buffer; the caller has checked
    /// that they exist before `end` and fit in the buffer.
    fn fill(&mut self, n: usize) -> Result<()> {
        if self.filled - self.start >= n {
            return Ok(());
        }
        self.buf.copy_within(self.start..self.filled, 0);
        self.buf_pos += self.start as u64;
        self.filled -= self.start;
        self.start = 0;
        while self.filled < n {
            let file_pos = self.buf_pos + self.filled as u64;
            let room = (self.buf.len() - self.filled) as u64;
            let want = room.min(self.end - file_pos) as usize;
            let read = read_at(
                self.file,
                &mut self.buf[self.filled..self.filled + want],
                file_pos,
            )
            .map_err(|err| Error::io("reading a changelog segment", err))?;
            if read == 0 {
                return Err(short_file());
            }
            self.filled += read;
        }
        Ok(())
    }

    /// Reads a record larger than the buffer into `large`, leaving the buffer empty after it.
    fn read_large(&mut self, pos: u64, total: usize) -> Result<()> {
        let buffered = self.filled - self.start;
        self.large.clear();
        self.large
            .extend_from_slice(&self.buf[self.start..self.filled]);
        self.large.resize(total, 0);
        read_exact_at(
            self.file,
            &mut self.large[buffered..],
            pos + buffered as u64,
        )?;
        self.buf_pos = pos + total as u64;
        self.start = 0;
        self.filled = 0;
        Ok(())
    }
}

fn bad(pos: u64, reason: &str) -> Scan<'static> {
    Scan::Bad {
        pos,
        reason: reason.to_string(),
    }
}

fn short_file() -> Error {
    Error::io(
        "reading a changelog segment",
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "segment shorter than recorded",
        ),
    )
}

/// Fills `buf` from `pos`.
///
/// # Errors
/// `Io` when reading fails or the file ends first.
pub(crate) fn read_exact_at(file: &File, mut buf: &mut [u8], mut pos: u64) -> Result<()> {
    while !buf.is_empty() {
        let read =
            read_at(file, buf, pos).map_err(|err| Error::io("reading a changelog segment", err))?;
        if read == 0 {
            return Err(short_file());
        }
        buf = &mut buf[read..];
        pos += read as u64;
    }
    Ok(())
}

/// One positional read, retried when interrupted by a signal.
fn read_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    loop {
        #[cfg(unix)]
        let result = std::os::unix::fs::FileExt::read_at(file, buf, pos);
        #[cfg(windows)]
        let result = std::os::windows::fs::FileExt::seek_read(file, buf, pos);
        match result {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
