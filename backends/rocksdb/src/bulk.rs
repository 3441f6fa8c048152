//! Bulk loading by SST ingestion: a restore from empty writes the changelog into sorted SST
//! files and ingests them, instead of replaying it through the write-ahead log, the memtable,
//! flushes and compactions.
//!
//! The loader gathers operations until [`Config::bulk_load_bytes`](crate::Config) of keys and
//! values, sorts that chunk by key (a stable sort, so the writes of one key stay in log
//! order), keeps the last write of each key (a delete becomes a tombstone in the file, which
//! shadows the key in older chunks), writes one SST file and ingests it. Each ingestion gets a
//! newer sequence number than everything before it, so later chunks shadow earlier ones just
//! as later batches would: the state is the replay's, in memory bounded by two chunks.
//!
//! A chunk is spilled by a thread of its own while the next one is gathered (at most two are
//! held), and ingested only after the one before it: the caller's thread keeps reading the
//! log meanwhile. The spilling thread holds the database open (as an iterator does) and does
//! not take the store's write gate: a bulk load has the store to itself (see [`BulkLoader`]).
//!
//! The files are written in [`BULK_DIR`] inside the store's directory, so RocksDB links them
//! into the database instead of copying (`move_files`), and syncs them as it ingests them.
//! The directory is removed when the loader is finished or dropped, and when the store is
//! opened, so the files of a load killed halfway never outlive it.

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

/// The [`BulkLoader`] of a [`RocksDbStore`](crate::RocksDbStore); see the module docs.
///
/// A full chunk is sorted, written and ingested by a thread of its own while the loader
/// gathers the next one, so reading the log and building files overlap; the next spill
/// first waits for it, so files are ingested in order. At most two chunks are held.
pub(crate) struct SstLoader {
    db: Arc<DB>,
    sst_opts: Arc<Options>,
    dir: PathBuf,
    chunk: Vec<BatchOp>,
    chunk_bytes: usize,
    limit: usize,
    files: u64,
    spilling: Option<JoinHandle<Result<()>>>,
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
            spilling: None,
        })
    }

    /// Waits for the chunk being spilled, if any, and returns its outcome.
    fn wait(&mut self) -> Result<()> {
        match self.spilling.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(outcome)) => outcome,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
        }
    }

    /// Hands the gathered chunk to a thread that writes it into one SST file and ingests it,
    /// once the previous chunk is in; nothing when the chunk is empty.
    fn spill(&mut self) -> Result<()> {
        self.wait()?;
        let chunk = std::mem::take(&mut self.chunk);
        self.chunk_bytes = 0;
        if chunk.is_empty() {
            return Ok(());
        }
        let path = self.dir.join(format!("{:06}.sst", self.files));
        self.files += 1;
        let (db, opts) = (Arc::clone(&self.db), Arc::clone(&self.sst_opts));
        let spilling = std::thread::Builder::new()
            .name("rocksdb-bulk-load".to_owned())
            .spawn(move || ingest_chunk(&db, &opts, &path, chunk))
            .map_err(|err| Error::io("starting a bulk-load thread", err))?;
        self.spilling = Some(spilling);
        Ok(())
    }
}

/// Sorts `chunk` by key, writes the last write of each key into an SST file at `path` and
/// ingests it into `db`, moving the file.
fn ingest_chunk(db: &DB, opts: &Options, path: &Path, mut chunk: Vec<BatchOp>) -> Result<()> {
    // Stable: of several writes of one key, the last in log order stays last.
    chunk.sort_by(|a, b| a.key().cmp(b.key()));
    write_sst(opts, path, &chunk)?;
    drop(chunk);
    let mut ingest = IngestExternalFileOptions::default();
    ingest.set_move_files(true);
    db.ingest_external_file_opts(&ingest, vec![path])
        .map_err(from_rocksdb)
}

/// Writes the last write of each key of `sorted` (sorted by key, stably) into a new SST file
/// at `path`.
fn write_sst(opts: &Options, path: &Path, sorted: &[BatchOp]) -> Result<()> {
    let mut writer = SstFileWriter::create(opts);
    writer.open(path).map_err(from_rocksdb)?;
    for (at, op) in sorted.iter().enumerate() {
        let shadowed = sorted
            .get(at + 1)
            .is_some_and(|next| next.key() == op.key());
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
        self.wait()?;
        std::fs::remove_dir_all(&self.dir)
            .map_err(|err| Error::io(format!("removing {}", self.dir.display()), err))
    }
}

impl Drop for SstLoader {
    fn drop(&mut self) {
        // No file is removed under a thread still writing or ingesting it. Drop cannot report
        // a failure; the next load or open removes the directory again.
        let _ = self.wait();
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
