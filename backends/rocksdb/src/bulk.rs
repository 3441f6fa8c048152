//! Bulk loading by SST ingestion: a restore from empty writes the changelog into sorted SST
//! files and ingests them, instead of replaying it through the write-ahead log, the memtable,
//! flushes and compactions.
//!
//! The loader gathers operations until [`Config::bulk_load_bytes`](crate::Config) of keys and
//! values, orders that chunk by key (and by log position for one key, so its writes stay in
//! log order), keeps the last write of each key (a delete becomes a tombstone in the file, which
//! shadows the key in older chunks), writes one SST file and ingests it. Each ingestion gets a
//! newer sequence number than everything before it, so later chunks shadow earlier ones just
//! as later batches would: the state is the replay's, in memory bounded by three chunks.
//!
//! Each full chunk is sorted and written into its file by a thread of its own, up to two at
//! once, while the loader's thread goes on gathering the next chunk from the log; the loader's
//! thread ingests the written files strictly in chunk order. So at most three chunks are held,
//! and reading the log and building files use both cores of a small machine. A bulk load has
//! the store to itself (see [`BulkLoader`]): ingestion does not take the store's write gate,
//! and a loader, like an iterator, holds the database open until it is dropped.
//!
//! The files are written in [`BULK_DIR`] inside the store's directory, so RocksDB links them
//! into the database instead of copying (`move_files`), and syncs them as it ingests them.
//! The directory is removed when the loader is finished or dropped, and when the store is
//! opened, so the files of a load killed halfway never outlive it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use rocksdb::{DB, IngestExternalFileOptions, Options, SstFileWriter};
use store_api::limits::check_ops;
use store_api::{BatchOp, BulkLoader, Error, Result};

use crate::error::from_rocksdb;

/// The directory, inside the store's, that holds the SST files of a bulk load in progress.
pub(crate) const BULK_DIR: &str = "bulk-load";

/// Charged per gathered operation beyond its key and value: the `BatchOp` and its two
/// vector headers, so a chunk of tiny records is bounded too.
const OP_OVERHEAD: usize = 64;

/// Chunks written into files at once, each by a thread of its own, besides the one being
/// gathered: two, one per core of a small machine, while the loader's thread reads the log
/// and ingests the written files in order.
const WRITERS: usize = 2;

/// A chunk being written into its file.
type Writing = (JoinHandle<Result<Vec<BatchOp>>>, PathBuf);

/// The [`BulkLoader`] of a [`RocksDbStore`](crate::RocksDbStore); see the module docs.
pub(crate) struct SstLoader {
    db: Arc<DB>,
    sst_opts: Arc<Options>,
    dir: PathBuf,
    chunk: Vec<BatchOp>,
    chunk_bytes: usize,
    limit: usize,
    files: u64,
    /// The chunks being written, oldest first: ingested in this order.
    writing: VecDeque<Writing>,
}

impl SstLoader {
    /// A loader into the database `db` of the store in `store_dir`, gathering chunks of
    /// `limit` bytes written with `sst_opts`, with an empty file directory.
    pub(crate) fn new(
        db: Arc<DB>,
        store_dir: &Path,
        sst_opts: Arc<Options>,
        limit: usize,
    ) -> Result<Self> {
        let dir = store_dir.join(BULK_DIR);
        remove_bulk_dir(store_dir)?;
        std::fs::create_dir(&dir)
            .map_err(|err| Error::io(format!("creating {}", dir.display()), err))?;
        Ok(SstLoader {
            db,
            sst_opts,
            dir,
            chunk: Vec::new(),
            chunk_bytes: 0,
            limit: limit.max(1),
            files: 0,
            writing: VecDeque::new(),
        })
    }

    /// Waits for the oldest chunk being written and ingests its file; nothing when no chunk
    /// is being written.
    fn ingest_oldest(&mut self) -> Result<()> {
        let Some((writer, path)) = self.writing.pop_front() else {
            return Ok(());
        };
        let chunk = match writer.join() {
            Ok(written) => written?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        let ingested = self
            .db
            .ingest_external_file_opts(&ingest, vec![&path])
            .map_err(from_rocksdb);
        // Freed here rather than by a writing thread: those are the bottleneck.
        drop(chunk);
        ingested
    }

    /// Hands the gathered chunk to a thread that writes it into one SST file, once fewer
    /// than [`WRITERS`] chunks are being written; nothing when the chunk is empty.
    fn spill(&mut self) -> Result<()> {
        let chunk = std::mem::take(&mut self.chunk);
        self.chunk_bytes = 0;
        if chunk.is_empty() {
            return Ok(());
        }
        while self.writing.len() >= WRITERS {
            self.ingest_oldest()?;
        }
        let path = self.dir.join(format!("{:06}.sst", self.files));
        self.files += 1;
        let (opts, file) = (Arc::clone(&self.sst_opts), path.clone());
        let writer = std::thread::Builder::new()
            .name("rocksdb-bulk-load".to_owned())
            .spawn(move || {
                write_sst(&opts, &file, &chunk, &key_order(&chunk))?;
                Ok(chunk)
            })
            .map_err(|err| Error::io("starting a bulk-load thread", err))?;
        self.writing.push_back((writer, path));
        Ok(())
    }
}

/// The positions of `chunk`'s operations in key order, and for one key in log order, so the
/// last write of a key comes last; each with its sort word (below).
///
/// Keys of one store share long prefixes (a key schema, zero-padded numbers), on which a
/// plain comparison sort spent most of a bulk load in `memcmp` through a pointer per key. So
/// each position is sorted with the 8 bytes that follow the prefix common to the whole chunk
/// (zero-padded: a shorter key ties with, never passes, a longer one), and only equal 8-byte
/// words compare the keys themselves.
fn key_order(chunk: &[BatchOp]) -> Vec<(u64, usize)> {
    let first = chunk.first().map_or(&[][..], BatchOp::key);
    let common = chunk.iter().fold(first.len(), |common, op| {
        common.min(shared_prefix(first, op.key()))
    });
    let mut order: Vec<(u64, usize)> = chunk
        .iter()
        .enumerate()
        .map(|(at, op)| (word_after(op.key(), common), at))
        .collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| chunk[a.1].key()[common..].cmp(&chunk[b.1].key()[common..]))
            .then(a.1.cmp(&b.1))
    });
    order
}

/// The length of the longest common prefix of `a` and `b`.
fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The 8 bytes of `key` from `at`, zero-padded, as a big-endian number.
fn word_after(key: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    let tail = key.get(at..).unwrap_or_default();
    let len = tail.len().min(8);
    word[..len].copy_from_slice(&tail[..len]);
    u64::from_be_bytes(word)
}

/// Writes the last write of each key of `chunk`, taken in `order` (see [`key_order`]), into
/// a new SST file at `path`.
fn write_sst(opts: &Options, path: &Path, chunk: &[BatchOp], order: &[(u64, usize)]) -> Result<()> {
    let mut writer = SstFileWriter::create(opts);
    writer.open(path).map_err(from_rocksdb)?;
    for (rank, &(word, at)) in order.iter().enumerate() {
        let op = &chunk[at];
        // Different words are different keys: only equal words need the keys compared.
        let shadowed = order
            .get(rank + 1)
            .is_some_and(|&(next_word, next)| next_word == word && chunk[next].key() == op.key());
        if shadowed {
            continue;
        }
        match op {
            BatchOp::Put { key, value } => writer.put(key, value),
            BatchOp::Delete { key } => writer.delete(key),
        }
        .map_err(from_rocksdb)?;
    }
    writer.finish().map_err(from_rocksdb)
}

impl BulkLoader for SstLoader {
    fn load(&mut self, ops: Vec<BatchOp>) -> Result<()> {
        check_ops(&ops)?;
        for op in ops {
            self.chunk_bytes += OP_OVERHEAD + op.key().len() + op.value().map_or(0, <[u8]>::len);
            self.chunk.push(op);
        }
        if self.chunk_bytes >= self.limit {
            self.spill()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.spill()?;
        while !self.writing.is_empty() {
            self.ingest_oldest()?;
        }
        std::fs::remove_dir_all(&self.dir)
            .map_err(|err| Error::io(format!("removing {}", self.dir.display()), err))
    }
}

impl Drop for SstLoader {
    fn drop(&mut self) {
        // No file is removed under a thread still writing it. Drop cannot report a failure
        // (nor rethrow a thread's panic); the next load or open removes the directory again.
        for (writer, _) in self.writing.drain(..) {
            let _ = writer.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the bulk-load directory of the store in `store_dir`, if there is one.
pub(crate) fn remove_bulk_dir(store_dir: &Path) -> Result<()> {
    let dir = store_dir.join(BULK_DIR);
    match std::fs::remove_dir_all(&dir) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("removing {}", dir.display()), err))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &[u8], n: u8) -> BatchOp {
        BatchOp::Put {
            key: key.to_vec(),
            value: vec![n],
        }
    }

    /// The word-keyed order is a stable sort by key, for keys that are prefixes of one
    /// another, hold zero bytes, or differ only past the word.
    #[test]
    fn key_order_is_a_stable_sort_by_key() {
        let keys: [&[u8]; 12] = [
            b"userab",
            b"userab\0",
            b"user",
            b"userab\0\0",
            b"userabcdefghij",
            b"usera",
            b"userabcdefghi",
            b"userabcdefghij\0",
            b"userb",
            b"userab\x01",
            b"userab",
            b"user",
        ];
        for skip in 0..3 {
            let chunk: Vec<BatchOp> = keys
                .iter()
                .chain(&keys[..5])
                .enumerate()
                .map(|(n, key)| put(&key[skip.min(key.len())..], n as u8))
                .collect();
            let mut expected: Vec<usize> = (0..chunk.len()).collect();
            expected.sort_by(|&a, &b| chunk[a].key().cmp(chunk[b].key()));
            let order: Vec<usize> = key_order(&chunk).into_iter().map(|(_, at)| at).collect();
            assert_eq!(order, expected, "keys without their first {skip} bytes");
        }
        assert!(key_order(&[]).is_empty());
    }
}
