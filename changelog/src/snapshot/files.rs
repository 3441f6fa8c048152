//! Snapshots as a store's own files, for a backend that offers
//! [`Checkpoints`](store_api::Checkpoints) (RocksDB): the files of a checkpoint, uploaded as
//! they are, and a manifest naming them.
//!
//! # Objects
//! A snapshot of (topic, partition) at offset `o` and epoch `e` is
//! ```text
//! PREFIX/TOPIC/PARTITION/OOOOOOOOOOOOOOOOOOOO-EEEEEEEEEEEEEEEEEEEE.files/<file>   each file
//! PREFIX/TOPIC/PARTITION/OOOOOOOOOOOOOOOOOOOO-EEEEEEEEEEEEEEEEEEEE.ckpt           the manifest
//! ```
//! The manifest is written last, so a snapshot is visible (listed) whole or not at all:
//! ```text
//! magic        8 bytes  "STCKPT\0\x01" (the last byte is the format version)
//! body_len     u32 LE
//! body         JSON: format (the engine), topic, partition, offset, epoch, created_ms,
//!              files: [{name, size, crc32c}]
//! body_crc     u32 LE   CRC-32C of the body
//! ```
//! Files go up and down in [`CHUNK`]s, never whole in memory; each is checked against its
//! size and CRC-32C before the store is replaced by them.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, WriteMultipart};
use serde::{Deserialize, Serialize};
use store_api::{Checkpoints, Error, Result};

use super::{SnapshotInfo, SnapshotStore, object_error};

/// The first bytes of every manifest; the last one is the format version.
const MAGIC: &[u8; 8] = b"STCKPT\x00\x01";

/// The unit of a file's upload (a multipart part) and download (a range read).
const CHUNK: usize = 8 << 20;

/// Parts of one file uploaded at once.
const PARTS_IN_FLIGHT: usize = 2;

/// The suffix of a manifest's name.
pub(super) const MANIFEST_SUFFIX: &str = ".ckpt";

/// One file of a snapshot.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct FileEntry {
    name: String,
    size: u64,
    crc32c: u32,
}

/// What a manifest says.
#[derive(Debug, Deserialize, Serialize)]
struct Manifest {
    format: String,
    topic: String,
    partition: u32,
    offset: u64,
    epoch: u64,
    created_ms: u64,
    files: Vec<FileEntry>,
}

/// The directory of the files of the snapshot whose manifest is `manifest`.
pub(super) fn files_dir(manifest: &ObjectPath) -> Option<ObjectPath> {
    let name = manifest.filename()?;
    let stem = name.strip_suffix(MANIFEST_SUFFIX)?;
    let parent = ObjectPath::from_iter(
        manifest
            .parts()
            .collect::<Vec<_>>()
            .split_last()?
            .1
            .iter()
            .cloned(),
    );
    Some(parent.join(format!("{stem}.files")))
}

fn io(what: &str, path: &Path, err: std::io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), err)
}

/// A file name usable as one object name segment and one file name.
fn check_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && ObjectPath::parse(name).is_ok()
}

impl SnapshotStore {
    /// Uploads the checkpoint `(dir, files)` (its directory and files, relative to it, in the
    /// `format` of an engine, as [`Checkpoints::create`] returns them) as the snapshot of (`topic`, `partition`) at commit marker `offset` of writer
    /// `epoch`: the files first, then the manifest; then deletes all but the newest
    /// [`keep`](SnapshotStore::keep) snapshots of the partition. The caller makes sure the
    /// checkpoint holds exactly the commits up to `offset`.
    ///
    /// # Errors
    /// `InvalidArgument` for a topic or file name that cannot name an object, `Io` from the
    /// files or the object store (then the files uploaded are deleted, as far as possible,
    /// and the partition has the snapshots it had).
    pub fn upload_files(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        epoch: u64,
        format: &str,
        (dir, files): (&Path, &[PathBuf]),
    ) -> Result<SnapshotInfo> {
        super::check_segment(topic)?;
        let stem = format!("{offset:020}-{epoch:020}");
        let manifest_path = self
            .partition_dir(topic, partition)
            .join(format!("{stem}{MANIFEST_SUFFIX}"));
        let files_dir = self
            .partition_dir(topic, partition)
            .join(format!("{stem}.files"));
        let mut entries = Vec::with_capacity(files.len());
        for file in files {
            let name = file
                .to_str()
                .filter(|name| check_file_name(name))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "checkpoint file {} cannot name an object",
                        file.display()
                    ))
                })?;
            let uploaded = self.upload_file(&dir.join(file), &files_dir.clone().join(name));
            match uploaded {
                Ok((size, crc32c)) => entries.push(FileEntry {
                    name: name.to_string(),
                    size,
                    crc32c,
                }),
                Err(err) => {
                    let _ = self.delete_files(&files_dir);
                    return Err(err);
                }
            }
        }
        let created_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let manifest = Manifest {
            format: format.to_string(),
            topic: topic.to_string(),
            partition,
            offset,
            epoch,
            created_ms,
            files: entries,
        };
        let body = serde_json::to_vec(&manifest)
            .map_err(|err| Error::invalid(format!("encoding a snapshot manifest: {err}")))?;
        let mut object = Vec::with_capacity(body.len() + 16);
        object.extend_from_slice(MAGIC);
        object.extend_from_slice(&(body.len() as u32).to_le_bytes());
        object.extend_from_slice(&body);
        object.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        if let Err(err) = self.run(self.store.put(&manifest_path, Bytes::from(object).into())) {
            let _ = self.delete_files(&files_dir);
            return Err(object_error("writing", &manifest_path, err));
        }
        let info = SnapshotInfo {
            topic: topic.to_string(),
            partition,
            offset,
            epoch,
            path: manifest_path.to_string(),
        };
        tracing::info!(topic, partition, offset, epoch, path = %manifest_path, files = files.len(), "wrote a snapshot of the store's files");
        self.retain(topic, partition, self.keep)?;
        Ok(info)
    }

    /// Uploads one file in chunks; returns its size and CRC-32C.
    fn upload_file(&self, file: &Path, to: &ObjectPath) -> Result<(u64, u32)> {
        let mut source = std::fs::File::open(file).map_err(|err| io("opening", file, err))?;
        let size = source
            .metadata()
            .map_err(|err| io("reading", file, err))?
            .len();
        let (mut crc, mut sent) = (0u32, 0u64);
        let mut buf = vec![0u8; CHUNK];
        if size <= CHUNK as u64 {
            let len = read_full(&mut source, &mut buf).map_err(|err| io("reading", file, err))?;
            buf.truncate(len);
            let crc = crc32c::crc32c(&buf);
            self.run(self.store.put(to, Bytes::from(buf).into()))
                .map_err(|err| object_error("writing", to, err))?;
            return Ok((len as u64, crc));
        }
        self.run(async {
            let upload = self.store.put_multipart(to).await?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, CHUNK);
            loop {
                let len = match read_full(&mut source, &mut buf) {
                    Ok(len) => len,
                    Err(err) => {
                        writer.abort().await?;
                        return Err(object_store::Error::Generic {
                            store: "snapshot upload",
                            source: Box::new(err),
                        });
                    }
                };
                if len == 0 {
                    break;
                }
                crc = crc32c::crc32c_append(crc, &buf[..len]);
                sent += len as u64;
                writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                writer.write(&buf[..len]);
            }
            writer.finish().await.map(drop)
        })
        .map_err(|err| object_error("writing", to, err))?;
        Ok((sent, crc))
    }

    /// Deletes every object in `dir` (the files of one snapshot).
    pub(super) fn delete_files(&self, dir: &ObjectPath) -> Result<()> {
        let listed = self
            .run(self.store.list_with_delimiter(Some(dir)))
            .map_err(|err| object_error("listing", dir, err))?;
        for meta in &listed.objects {
            match self.run(self.store.delete(&meta.location)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => return Err(object_error("deleting", &meta.location, err)),
            }
        }
        Ok(())
    }

    /// Restores `into` from the snapshot of files `info`: reads its manifest, downloads every
    /// file into the store's staging directory checking its size and CRC-32C, then replaces
    /// the store's content with them. `Ok(false)` when the manifest is gone (deleted by
    /// retention meanwhile, say); then the store is untouched.
    ///
    /// # Errors
    /// `Corruption` when the manifest or a file fails its checks, a file is missing, the
    /// snapshot is of another engine, or the files do not open (then the store is empty);
    /// `Io` from the object store or the disk. Only the last case changes the store.
    pub fn restore_files(&self, info: &SnapshotInfo, into: &dyn Checkpoints) -> Result<bool> {
        let path = ObjectPath::from(info.path.as_str());
        let corrupt = |why: String| Error::Corruption(format!("snapshot {}: {why}", info.path));
        let Some(bytes) = self.get(&path)? else {
            return Ok(false);
        };
        let manifest = decode_manifest(&bytes).map_err(corrupt)?;
        if manifest.topic != info.topic
            || manifest.partition != info.partition
            || manifest.offset != info.offset
            || manifest.epoch != info.epoch
        {
            return Err(corrupt(format!(
                "its manifest names {}/{} at offset {} epoch {}, not what its name says",
                manifest.topic, manifest.partition, manifest.offset, manifest.epoch
            )));
        }
        if manifest.format != into.format() {
            return Err(corrupt(format!(
                "it holds {} files, the store is {}",
                manifest.format,
                into.format()
            )));
        }
        let files_dir = files_dir(&path).ok_or_else(|| corrupt("not a manifest name".into()))?;
        let staging = into.staging_dir()?;
        for entry in &manifest.files {
            if !check_file_name(&entry.name) {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(corrupt(format!("bad file name {:?}", entry.name)));
            }
            let object = files_dir.clone().join(entry.name.as_str());
            if let Err(err) = self.download_file(&object, &staging.join(&entry.name), entry) {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(match err {
                    Error::Corruption(why) => corrupt(why),
                    other => other,
                });
            }
        }
        into.restore(&staging)?;
        Ok(true)
    }

    /// Downloads `object` into the new file `file` in range reads, checking its size and
    /// CRC-32C against `entry`, and syncs it.
    fn download_file(&self, object: &ObjectPath, file: &Path, entry: &FileEntry) -> Result<()> {
        let size = match self.run(self.store.head(object)) {
            Ok(meta) => meta.size,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::Corruption(format!(
                    "its file {} is missing",
                    entry.name
                )));
            }
            Err(err) => return Err(object_error("reading", object, err)),
        };
        if size != entry.size {
            return Err(Error::Corruption(format!(
                "its file {} holds {size} bytes, its manifest says {}",
                entry.name, entry.size
            )));
        }
        let mut out = std::fs::File::create_new(file).map_err(|err| io("creating", file, err))?;
        let (mut crc, mut at) = (0u32, 0u64);
        while at < size {
            let end = size.min(at + CHUNK as u64);
            let chunk = match self.run(self.store.get_range(object, at..end)) {
                Ok(chunk) if chunk.len() as u64 == end - at => chunk,
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::Corruption(format!(
                        "its file {} changed while it was read",
                        entry.name
                    )));
                }
                Err(err) => return Err(object_error("reading", object, err)),
            };
            crc = crc32c::crc32c_append(crc, &chunk);
            out.write_all(&chunk)
                .map_err(|err| io("writing", file, err))?;
            at = end;
        }
        if crc != entry.crc32c {
            return Err(Error::Corruption(format!(
                "the checksum of its file {} does not match",
                entry.name
            )));
        }
        out.sync_all().map_err(|err| io("syncing", file, err))
    }
}

/// Reads until `buf` is full or the end of `source`; returns the bytes read.
fn read_full(source: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match source.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// Checks and parses a manifest object.
fn decode_manifest(bytes: &[u8]) -> std::result::Result<Manifest, String> {
    let rest = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or("not a version-1 manifest (bad magic or truncated)")?;
    let len = rest
        .get(..4)
        .and_then(|raw| raw.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or("the manifest is truncated")? as usize;
    let body = rest.get(4..4 + len).ok_or("the manifest is truncated")?;
    let crc = rest
        .get(4 + len..)
        .filter(|tail| tail.len() == 4)
        .and_then(|raw| raw.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or("the manifest is truncated or has bytes after its end")?;
    if crc != crc32c::crc32c(body) {
        return Err("the manifest's checksum does not match".into());
    }
    serde_json::from_slice(body).map_err(|err| format!("bad manifest: {err}"))
}

#[cfg(test)]
mod tests {
    use store_api::KeyValueStore;

    use super::*;
    use crate::snapshot::tests::{config, contents};

    fn rocksdb(dir: &Path) -> Box<dyn KeyValueStore> {
        statestore::open("rocksdb", dir, &serde_json::Value::Null).expect("rocksdb")
    }

    /// A snapshot whose upload fails is never listed and leaves no file behind; one that
    /// succeeds restores into another store exactly.
    #[test]
    fn a_failed_upload_leaves_nothing_and_a_whole_one_restores_exactly() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let snapshots = SnapshotStore::open(&config(&dir.path().join("objects")))?;
        let source = rocksdb(&dir.path().join("source"));
        for i in 0..5_000u32 {
            source.put(format!("key-{i:06}").as_bytes(), &i.to_le_bytes())?;
        }
        let checkpoints = source.checkpoints().expect("rocksdb offers checkpoints");
        let (taken, mut files) = checkpoints.create()?;
        let good = files.clone();
        files.push(PathBuf::from("000999.sst"));
        let err = snapshots
            .upload_files("t", 0, 9, 1, "rocksdb", (&taken, &files))
            .expect_err("a file is missing");
        assert_eq!(err.kind(), store_api::ErrorKind::Io, "{err}");
        assert!(
            snapshots.list("t", 0)?.is_empty(),
            "no manifest, no snapshot"
        );
        let files_dir = dir
            .path()
            .join("objects/t/0/00000000000000000009-00000000000000000001.files");
        let left = std::fs::read_dir(&files_dir).map_or(0, |entries| entries.count());
        assert_eq!(left, 0, "the files uploaded before the failure are deleted");

        let info = snapshots.upload_files("t", 0, 9, 1, "rocksdb", (&taken, &good))?;
        assert!(info.is_files());
        assert_eq!(snapshots.list("t", 0)?, vec![info.clone()]);
        let copy = rocksdb(&dir.path().join("copy"));
        copy.put(b"stale", b"gone after the restore")?;
        assert!(snapshots.restore_files(&info, copy.checkpoints().expect("checkpoints"))?);
        assert_eq!(contents(copy.as_ref()), contents(source.as_ref()));
        Ok(())
    }

    /// Files that do not open as a RocksDB store leave it open, empty and writable, and the
    /// error says the checkpoint is corrupt.
    #[test]
    fn a_checkpoint_that_does_not_open_leaves_the_store_empty() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let store = rocksdb(&dir.path().join("store"));
        store.put(b"old", b"content")?;
        let checkpoints = store.checkpoints().expect("checkpoints");
        let staging = checkpoints.staging_dir()?;
        std::fs::write(staging.join("CURRENT"), b"MANIFEST-000999\n")
            .map_err(|e| Error::io("write", e))?;
        let err = checkpoints.restore(&staging).expect_err("no such manifest");
        assert_eq!(err.kind(), store_api::ErrorKind::Corruption, "{err}");
        assert!(contents(store.as_ref()).is_empty());
        store.put(b"new", b"value")?;
        store.flush()?;
        assert_eq!(store.get(b"new")?, Some(b"value".to_vec()));
        Ok(())
    }

    /// A file whose CRC-32C does not match its manifest, or that is missing, is found before
    /// anything of the store is replaced: the store keeps its content.
    #[test]
    fn a_corrupt_or_missing_file_is_found_before_the_store_is_touched() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let snapshots = SnapshotStore::open(&config(&dir.path().join("objects")))?;
        let source = rocksdb(&dir.path().join("source"));
        for i in 0..5_000u32 {
            source.put(format!("key-{i:06}").as_bytes(), &[7; 100])?;
        }
        let (taken, files) = source.checkpoints().expect("checkpoints").create()?;
        let info = snapshots.upload_files("t", 0, 9, 1, "rocksdb", (&taken, &files))?;
        let objects = Path::new("/").join(&info.path).with_extension("files");
        let sst = files
            .iter()
            .find(|file| file.extension().is_some_and(|ext| ext == "sst"))
            .map(|file| objects.join(file))
            .expect("an SST file");
        let good = std::fs::read(&sst).map_err(|e| Error::io("read", e))?;
        let copy = rocksdb(&dir.path().join("copy"));
        copy.put(b"kept", b"until a good snapshot")?;
        let mut bad = good.clone();
        bad[good.len() / 3] ^= 0x01;
        std::fs::write(&sst, &bad).map_err(|e| Error::io("write", e))?;
        let checkpoints = copy.checkpoints().expect("checkpoints");
        let err = snapshots
            .restore_files(&info, checkpoints)
            .expect_err("corrupt");
        assert_eq!(err.kind(), store_api::ErrorKind::Corruption, "{err}");
        assert!(err.to_string().contains("checksum"), "{err}");
        std::fs::remove_file(&sst).map_err(|e| Error::io("remove", e))?;
        let err = snapshots
            .restore_files(&info, checkpoints)
            .expect_err("missing");
        assert!(err.to_string().contains("missing"), "{err}");
        assert_eq!(copy.get(b"kept")?, Some(b"until a good snapshot".to_vec()));
        Ok(())
    }
}
