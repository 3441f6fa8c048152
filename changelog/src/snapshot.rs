//! Snapshots: a store's committed content, with the changelog position it holds, kept in an
//! object store, so that a new instance with an empty disk restores the snapshot and then only
//! the changelog's tail.
//!
//! # Format
//! A store that offers [`Checkpoints`](store_api::Checkpoints) (RocksDB) snapshots as its own
//! files and a manifest (see `snapshot/files.rs`); any other store as one object, an
//! engine-neutral export of every key-value pair in key order,
//! read and written through the [`KeyValueStore`] API, so any backend can take or load one:
//! ```text
//! magic        8 bytes  "STSNAP\0\x01" (the last byte is the format version)
//! header_len   u32 LE
//! header       JSON: topic, partition, offset, epoch, created_ms
//! header_crc   u32 LE   CRC-32C of the header
//! blocks       [payload_len u32 LE][crc32c(payload) u32 LE][payload], payload_len > 0;
//!              a payload is pairs: [key_len u32 LE][value_len u32 LE][key][value]
//! end          [0 u32][crc32c(trailer) u32][trailer: pairs u64 LE]
//! ```
//! A reader checks every checksum, the pair count and that nothing follows the end before it
//! writes anything to a store, so a corrupt or truncated snapshot never reaches one: it is a
//! [`Error::Corruption`].
//!
//! # Naming and retention
//! A snapshot of changelog (topic, partition) at offset `o` and writer epoch `e` is the object
//! `PREFIX/TOPIC/PARTITION/OOOOOOOOOOOOOOOOOOOO-EEEEEEEEEEEEEEEEEEEE.snap` (both zero-padded to
//! 20 digits, so names sort by offset). Object stores make an object visible whole or not at
//! all, so a snapshot is never seen half-written. [`SnapshotStore::retain`] keeps the newest
//! `keep` of a partition and deletes the others.

mod files;

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use store_api::{BatchOp, Error, KeyValueStore, Result};

/// The first bytes of every snapshot; the last one is the format version.
const MAGIC: &[u8; 8] = b"STSNAP\x00\x01";

/// Pairs per block: the unit a checksum covers.
const BLOCK_BYTES: usize = 1 << 20;

/// Pairs per `WriteBatch` (or bulk-loader chunk) when a snapshot is loaded.
const LOAD_BATCH: usize = 16 * 1024;

/// The default number of snapshots kept per changelog partition.
pub const DEFAULT_SNAPSHOTS_KEPT: usize = 3;

/// Where snapshots go and how many are kept. `Debug` hides the value of every option whose
/// name holds `secret`, `token`, `password` or `session`.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SnapshotConfig {
    /// The object store and prefix: `file:///absolute/dir`, or `s3://bucket/prefix` (with
    /// the changelog's `s3` feature).
    pub url: String,
    /// Options of the object store, as `object_store` names them: for S3 `aws_endpoint`,
    /// `aws_region`, `aws_access_key_id`, `aws_secret_access_key`, `aws_allow_http`, ...
    /// Unset options come from the environment (`AWS_*`) for S3.
    pub options: BTreeMap<String, String>,
    /// Snapshots kept per changelog partition after a new one is written (at least 1).
    /// Default: [`DEFAULT_SNAPSHOTS_KEPT`].
    pub keep: usize,
    /// A task snapshots each of its stores after every this many commits; 0 (the default)
    /// never does by itself.
    pub every_commits: u64,
    /// A task snapshots each of its stores at its first commit at least this many
    /// milliseconds after its last snapshot (or its open); 0 (the default) never does by
    /// itself. With `every_commits` too, whichever comes first.
    pub every_ms: u64,
}

impl std::fmt::Debug for SnapshotConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let options: BTreeMap<&str, &str> = self
            .options
            .iter()
            .map(|(name, value)| {
                let lower = name.to_ascii_lowercase();
                let secret = ["secret", "token", "password", "session"]
                    .iter()
                    .any(|word| lower.contains(word));
                (
                    name.as_str(),
                    if secret { "[redacted]" } else { value.as_str() },
                )
            })
            .collect();
        f.debug_struct("SnapshotConfig")
            .field("url", &self.url)
            .field("options", &options)
            .field("keep", &self.keep)
            .field("every_commits", &self.every_commits)
            .field("every_ms", &self.every_ms)
            .finish()
    }
}

impl SnapshotConfig {
    /// Checks the configuration without contacting the object store.
    ///
    /// # Errors
    /// `InvalidArgument` for a URL that does not parse, names a scheme this build cannot
    /// reach (S3 without the `s3` feature), a bad option, or `keep` 0.
    pub fn validate(&self) -> Result<()> {
        self.parse().map(drop)
    }

    /// The object store and prefix the configuration names, not yet contacted.
    fn parse(&self) -> Result<(Box<dyn ObjectStore>, ObjectPath)> {
        if self.keep == 0 {
            return Err(Error::invalid("snapshots: `keep` must be at least 1"));
        }
        let bad = |err: &dyn std::fmt::Display| {
            Error::invalid(format!("snapshots: url {:?}: {err}", self.url))
        };
        let url = url::Url::parse(&self.url).map_err(|err| bad(&err))?;
        object_store::parse_url_opts(&url, self.options.iter()).map_err(|err| bad(&err))
    }
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            url: String::new(),
            options: BTreeMap::new(),
            keep: DEFAULT_SNAPSHOTS_KEPT,
            every_commits: 0,
            every_ms: 0,
        }
    }
}

/// One snapshot in the object store, as its name describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The changelog topic.
    pub topic: String,
    /// The changelog partition.
    pub partition: u32,
    /// The offset of the commit marker of the last commit the snapshot holds.
    pub offset: u64,
    /// The writer epoch of that commit marker (0 for a log without epochs).
    pub epoch: u64,
    /// The object's path in the store: the snapshot, or the manifest of a snapshot of files.
    pub path: String,
}

impl SnapshotInfo {
    /// Whether the snapshot is a store's own files and a manifest naming them (see
    /// [`SnapshotStore::upload_files`]), not an export of its pairs.
    pub fn is_files(&self) -> bool {
        self.path.ends_with(files::MANIFEST_SUFFIX)
    }
}

/// A snapshot read and verified, ready to be loaded.
#[derive(Debug)]
pub struct Snapshot {
    /// Which snapshot.
    pub info: SnapshotInfo,
    /// The number of key-value pairs.
    pub pairs: u64,
    /// The blocks' payloads, each verified.
    blocks: Vec<Bytes>,
}

/// The header of a snapshot object.
#[derive(Debug, Deserialize, Serialize)]
struct Header {
    topic: String,
    partition: u32,
    offset: u64,
    epoch: u64,
    created_ms: u64,
}

/// An object store holding snapshots, with the runtime that drives its requests.
pub struct SnapshotStore {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    keep: usize,
    every_commits: u64,
    every_ms: u64,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for SnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotStore")
            .field("url", &self.url)
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

impl SnapshotStore {
    /// Opens the object store `config.url` names.
    ///
    /// # Errors
    /// `InvalidArgument` for a URL that does not parse, names a scheme this build cannot
    /// reach (S3 without the `s3` feature), a bad option, or `keep` 0; `Io` when the runtime
    /// cannot start.
    pub fn open(config: &SnapshotConfig) -> Result<SnapshotStore> {
        let (store, prefix) = config.parse()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| Error::io("starting the snapshot store's runtime", err))?;
        Ok(SnapshotStore {
            store: Arc::from(store),
            prefix,
            url: config.url.clone(),
            keep: config.keep,
            every_commits: config.every_commits,
            every_ms: config.every_ms,
            runtime,
        })
    }

    /// The URL the store was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Snapshots kept per partition by [`write`](SnapshotStore::write).
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Commits between two snapshots a logged store takes by itself; 0 for never.
    pub fn every_commits(&self) -> u64 {
        self.every_commits
    }

    /// Milliseconds between two snapshots a logged store takes by itself; 0 for never.
    pub fn every_ms(&self) -> u64 {
        self.every_ms
    }

    /// Runs a request to completion; on a thread of its own when the caller is inside another
    /// runtime, which cannot block on this one.
    fn run<T: Send>(&self, request: impl Future<Output = T> + Send) -> T {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|scope| {
                match scope.spawn(|| self.runtime.block_on(request)).join() {
                    Ok(value) => value,
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            })
        } else {
            self.runtime.block_on(request)
        }
    }

    fn partition_dir(&self, topic: &str, partition: u32) -> ObjectPath {
        self.prefix
            .clone()
            .join(topic.to_string())
            .join(partition.to_string())
    }

    /// Exports `store` (every pair, in key order) as the snapshot of (`topic`, `partition`)
    /// at commit marker `offset` of writer `epoch`, uploads it, then deletes all but the
    /// newest [`keep`](SnapshotStore::keep) snapshots of the partition. The caller makes sure
    /// `store` holds exactly the commits up to `offset` while it is exported (see
    /// [`LoggedStore::snapshot`](crate::LoggedStore::snapshot)).
    ///
    /// # Errors
    /// An error of the store's scan, `InvalidArgument` for a topic that is not a valid path
    /// segment, or `Io` from the object store (then the partition has the snapshots it had).
    pub fn write(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        epoch: u64,
        store: &dyn KeyValueStore,
    ) -> Result<SnapshotInfo> {
        let body = export(topic, partition, offset, epoch, store)?;
        self.upload(topic, partition, offset, epoch, body)
    }

    /// Uploads a snapshot body [`export`] made, then applies retention.
    ///
    /// # Errors
    /// As [`write`](SnapshotStore::write).
    pub fn upload(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        epoch: u64,
        body: Vec<Bytes>,
    ) -> Result<SnapshotInfo> {
        check_segment(topic)?;
        let path = self
            .partition_dir(topic, partition)
            .join(format!("{offset:020}-{epoch:020}.snap"));
        let payload: PutPayload = body.into_iter().collect();
        self.run(self.store.put(&path, payload))
            .map_err(|err| object_error("writing", &path, err))?;
        let info = SnapshotInfo {
            topic: topic.to_string(),
            partition,
            offset,
            epoch,
            path: path.to_string(),
        };
        tracing::info!(topic, partition, offset, epoch, path = %path, "wrote a snapshot");
        self.retain(topic, partition, self.keep)?;
        Ok(info)
    }

    /// The snapshots of (`topic`, `partition`), newest (highest offset) first. Objects whose
    /// names are not snapshot names are ignored.
    ///
    /// # Errors
    /// `Io` from the object store.
    pub fn list(&self, topic: &str, partition: u32) -> Result<Vec<SnapshotInfo>> {
        check_segment(topic)?;
        let dir = self.partition_dir(topic, partition);
        let listed = self
            .run(self.store.list_with_delimiter(Some(&dir)))
            .map_err(|err| object_error("listing", &dir, err))?;
        let mut found: Vec<SnapshotInfo> = listed
            .objects
            .iter()
            .filter_map(|meta| {
                let name = meta.location.filename()?;
                let (offset, epoch) = parse_name(name)?;
                Some(SnapshotInfo {
                    topic: topic.to_string(),
                    partition,
                    offset,
                    epoch,
                    path: meta.location.to_string(),
                })
            })
            .collect();
        found.sort_by_key(|s| std::cmp::Reverse((s.offset, s.epoch)));
        Ok(found)
    }

    /// The newest snapshot of (`topic`, `partition`), or `None` without one.
    ///
    /// # Errors
    /// As [`list`](SnapshotStore::list).
    pub fn latest(&self, topic: &str, partition: u32) -> Result<Option<SnapshotInfo>> {
        Ok(self.list(topic, partition)?.into_iter().next())
    }

    /// Downloads and verifies `info`: `None` when the object is gone (deleted by retention
    /// meanwhile, say).
    ///
    /// # Errors
    /// `Corruption` when a checksum fails, the snapshot is truncated or its header does not
    /// match its name; `Io` from the object store.
    pub fn read(&self, info: &SnapshotInfo) -> Result<Option<Snapshot>> {
        let Some(bytes) = self.get(&ObjectPath::from(info.path.as_str()))? else {
            return Ok(None);
        };
        decode(info, bytes).map(Some)
    }

    /// The whole object at `path`; `None` when there is none (deleted meanwhile, say).
    fn get(&self, path: &ObjectPath) -> Result<Option<Bytes>> {
        match self.run(async {
            match self.store.get(path).await {
                Ok(got) => got.bytes().await,
                Err(err) => Err(err),
            }
        }) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(object_error("reading", path, err)),
        }
    }

    /// Deletes all but the newest `keep` snapshots of (`topic`, `partition`), every file of
    /// each, and the files of any snapshot whose manifest was never written (an upload that
    /// failed) older than the newest snapshot; returns how many snapshots it deleted.
    ///
    /// # Errors
    /// `Io` from the object store.
    pub fn retain(&self, topic: &str, partition: u32, keep: usize) -> Result<usize> {
        let listed = self.list(topic, partition)?;
        if let Some(newest) = listed.first() {
            self.remove_orphan_files(topic, partition, newest.offset, &listed)?;
        }
        let old: Vec<SnapshotInfo> = listed.into_iter().skip(keep.max(1)).collect();
        for info in &old {
            let path = ObjectPath::from(info.path.as_str());
            // The manifest first: the snapshot is no longer listed before its files go.
            match self.run(self.store.delete(&path)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => return Err(object_error("deleting", &path, err)),
            }
            if let Some(dir) = info.is_files().then(|| files::files_dir(&path)).flatten() {
                self.delete_files(&dir)?;
            }
            tracing::debug!(
                topic,
                partition,
                offset = info.offset,
                "deleted an old snapshot"
            );
        }
        Ok(old.len())
    }
}

impl SnapshotStore {
    /// Deletes the file directories of (`topic`, `partition`) below offset `below` that no
    /// snapshot in `listed` owns.
    fn remove_orphan_files(
        &self,
        topic: &str,
        partition: u32,
        below: u64,
        listed: &[SnapshotInfo],
    ) -> Result<()> {
        let dir = self.partition_dir(topic, partition);
        let found = self
            .run(self.store.list_with_delimiter(Some(&dir)))
            .map_err(|err| object_error("listing", &dir, err))?;
        for prefix in &found.common_prefixes {
            let Some(stem) = prefix
                .filename()
                .and_then(|name| name.strip_suffix(".files"))
            else {
                continue;
            };
            let owned = listed.iter().any(|info| {
                info.path
                    .ends_with(&format!("{stem}{}", files::MANIFEST_SUFFIX))
            });
            let offset = stem
                .split_once('-')
                .and_then(|(offset, _)| offset.parse::<u64>().ok());
            if !owned && offset.is_some_and(|offset| offset < below) {
                self.delete_files(prefix)?;
            }
        }
        Ok(())
    }
}

impl Snapshot {
    /// Loads every pair into `store`, which should be empty: through its
    /// [`bulk_loader`](KeyValueStore::bulk_loader) when it offers one, else in
    /// `WriteBatch`es. Returns the pairs loaded. Does not flush.
    ///
    /// # Errors
    /// An error of the store; then it holds a prefix of the pairs.
    pub fn load_into(&self, store: &dyn KeyValueStore) -> Result<u64> {
        let mut loader = store.bulk_loader()?;
        let mut batch = Vec::with_capacity(LOAD_BATCH);
        let mut loaded = 0u64;
        let mut flush = |batch: &mut Vec<BatchOp>| -> Result<()> {
            let ops = std::mem::replace(batch, Vec::with_capacity(LOAD_BATCH));
            loaded += ops.len() as u64;
            match loader.as_mut() {
                Some(loader) => loader.load(ops),
                None => store.write(ops.into_iter().collect()),
            }
        };
        for block in &self.blocks {
            let mut rest = &block[..];
            while !rest.is_empty() {
                // `decode` checked every frame, so the reads here cannot fail.
                let (key, value, after) = split_pair(rest).ok_or_else(|| {
                    Error::Corruption("a verified snapshot block did not parse".into())
                })?;
                batch.push(BatchOp::Put {
                    key: key.to_vec(),
                    value: value.to_vec(),
                });
                rest = after;
                if batch.len() >= LOAD_BATCH {
                    flush(&mut batch)?;
                }
            }
        }
        if !batch.is_empty() {
            flush(&mut batch)?;
        }
        if let Some(loader) = loader {
            loader.finish()?;
        }
        Ok(loaded)
    }
}

/// Encodes every pair of `store`, in key order, as a snapshot body (chunks to upload in
/// order).
///
/// # Errors
/// An error of the store's scan.
pub fn export(
    topic: &str,
    partition: u32,
    offset: u64,
    epoch: u64,
    store: &dyn KeyValueStore,
) -> Result<Vec<Bytes>> {
    let created_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let header = serde_json::to_vec(&Header {
        topic: topic.to_string(),
        partition,
        offset,
        epoch,
        created_ms,
    })
    .map_err(|err| Error::invalid(format!("encoding a snapshot header: {err}")))?;
    let mut head = Vec::with_capacity(header.len() + 16);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&(header.len() as u32).to_le_bytes());
    head.extend_from_slice(&header);
    head.extend_from_slice(&crc32c::crc32c(&header).to_le_bytes());
    let mut chunks = vec![Bytes::from(head)];
    let mut block = Vec::with_capacity(BLOCK_BYTES + 8);
    block.extend_from_slice(&[0; 8]);
    let mut pairs = 0u64;
    let mut too_large = None;
    store.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        false,
        &mut |key, value| {
            let (Ok(key_len), Ok(value_len)) =
                (u32::try_from(key.len()), u32::try_from(value.len()))
            else {
                too_large = Some(key.len().max(value.len()));
                return ControlFlow::Break(());
            };
            block.extend_from_slice(&key_len.to_le_bytes());
            block.extend_from_slice(&value_len.to_le_bytes());
            block.extend_from_slice(key);
            block.extend_from_slice(value);
            pairs += 1;
            if block.len() >= BLOCK_BYTES {
                chunks.push(seal(&mut block));
            }
            ControlFlow::Continue(())
        },
    )?;
    if let Some(len) = too_large {
        return Err(Error::invalid(format!(
            "a key or value of {len} bytes does not fit a snapshot frame"
        )));
    }
    if block.len() > 8 {
        chunks.push(seal(&mut block));
    }
    let trailer = pairs.to_le_bytes();
    let mut end = Vec::with_capacity(16);
    end.extend_from_slice(&0u32.to_le_bytes());
    end.extend_from_slice(&crc32c::crc32c(&trailer).to_le_bytes());
    end.extend_from_slice(&trailer);
    chunks.push(Bytes::from(end));
    Ok(chunks)
}

/// Fills in the length and checksum of `block` (8 reserved bytes, then the payload) and
/// starts the next one.
fn seal(block: &mut Vec<u8>) -> Bytes {
    let payload_len = (block.len() - 8) as u32;
    let crc = crc32c::crc32c(&block[8..]);
    block[..4].copy_from_slice(&payload_len.to_le_bytes());
    block[4..8].copy_from_slice(&crc.to_le_bytes());
    let sealed = std::mem::replace(block, Vec::with_capacity(BLOCK_BYTES + 8));
    block.extend_from_slice(&[0; 8]);
    Bytes::from(sealed)
}

/// Verifies a snapshot body and splits it into its blocks' payloads.
fn decode(info: &SnapshotInfo, bytes: Bytes) -> Result<Snapshot> {
    let corrupt = |why: String| Error::Corruption(format!("snapshot {}: {why}", info.path));
    let mut at = 0usize;
    let take = |at: &mut usize, len: usize| -> Result<Bytes> {
        let end = at
            .checked_add(len)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| corrupt(format!("truncated at byte {at}")))?;
        let slice = bytes.slice(*at..end);
        *at = end;
        Ok(slice)
    };
    let u32_at = |at: &mut usize| -> Result<u32> {
        let raw = take(at, 4)?;
        Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]))
    };
    if take(&mut at, MAGIC.len())?[..] != MAGIC[..] {
        return Err(corrupt("not a version-1 snapshot (bad magic)".into()));
    }
    let header_len = u32_at(&mut at)? as usize;
    let header = take(&mut at, header_len)?;
    if u32_at(&mut at)? != crc32c::crc32c(&header) {
        return Err(corrupt("the header checksum does not match".into()));
    }
    let header: Header =
        serde_json::from_slice(&header).map_err(|err| corrupt(format!("bad header: {err}")))?;
    if header.topic != info.topic
        || header.partition != info.partition
        || header.offset != info.offset
        || header.epoch != info.epoch
    {
        return Err(corrupt(format!(
            "its header names {}/{} at offset {} epoch {}, not what its name says",
            header.topic, header.partition, header.offset, header.epoch
        )));
    }
    let mut blocks = Vec::new();
    let mut pairs = 0u64;
    loop {
        let len = u32_at(&mut at)? as usize;
        let crc = u32_at(&mut at)?;
        if len == 0 {
            let trailer = take(&mut at, 8)?;
            if crc != crc32c::crc32c(&trailer) {
                return Err(corrupt("the trailer checksum does not match".into()));
            }
            let count = u64::from_le_bytes(
                trailer[..]
                    .try_into()
                    .map_err(|_| corrupt("short trailer".into()))?,
            );
            if count != pairs {
                return Err(corrupt(format!(
                    "the trailer counts {count} pairs, the blocks hold {pairs}"
                )));
            }
            if at != bytes.len() {
                return Err(corrupt(format!(
                    "{} bytes follow the end",
                    bytes.len() - at
                )));
            }
            break;
        }
        let payload = take(&mut at, len)?;
        if crc != crc32c::crc32c(&payload) {
            return Err(corrupt(format!(
                "the checksum of the block at byte {} does not match",
                at - len - 8
            )));
        }
        let mut rest = &payload[..];
        while !rest.is_empty() {
            let (_, _, after) =
                split_pair(rest).ok_or_else(|| corrupt("a pair overruns its block".into()))?;
            rest = after;
            pairs += 1;
        }
        blocks.push(payload);
    }
    Ok(Snapshot {
        info: info.clone(),
        pairs,
        blocks,
    })
}

/// Splits the first `[key_len][value_len][key][value]` pair off `bytes`.
fn split_pair(bytes: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let key_len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let value_len = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    let rest = bytes.get(8..)?;
    let key = rest.get(..key_len)?;
    let value = rest.get(key_len..key_len.checked_add(value_len)?)?;
    Some((key, value, &rest[key_len + value_len..]))
}

/// The offset and epoch of a snapshot object name.
fn parse_name(name: &str) -> Option<(u64, u64)> {
    let stem = name
        .strip_suffix(".snap")
        .or_else(|| name.strip_suffix(files::MANIFEST_SUFFIX))?;
    let (offset, epoch) = stem.split_once('-')?;
    if offset.len() != 20 || epoch.len() != 20 {
        return None;
    }
    Some((offset.parse().ok()?, epoch.parse().ok()?))
}

/// A topic usable as one path segment of an object name.
fn check_segment(topic: &str) -> Result<()> {
    if topic.is_empty() || topic.contains('/') || topic == "." || topic == ".." {
        return Err(Error::invalid(format!(
            "topic {topic:?} cannot name a snapshot directory"
        )));
    }
    Ok(())
}

fn object_error(what: &str, path: &ObjectPath, err: object_store::Error) -> Error {
    Error::io(
        format!("{what} snapshot {path}"),
        std::io::Error::other(err.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use statestore_memory::{Config, MemoryStore};

    pub(super) fn config(dir: &std::path::Path) -> SnapshotConfig {
        SnapshotConfig {
            url: format!("file://{}", dir.display()),
            ..SnapshotConfig::default()
        }
    }

    fn filled(pairs: u32) -> MemoryStore {
        let store = MemoryStore::new(Config::default());
        for i in 0..pairs {
            store
                .put(
                    format!("key-{i:06}").as_bytes(),
                    &i.to_le_bytes().repeat(30),
                )
                .expect("put");
        }
        store
    }

    pub(super) fn contents(store: &dyn KeyValueStore) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        store
            .scan(Bound::Unbounded, Bound::Unbounded, false, &mut |k, v| {
                all.push((k.to_vec(), v.to_vec()));
                ControlFlow::Continue(())
            })
            .expect("scan");
        all
    }

    #[test]
    fn round_trip_list_and_retention() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let snapshots = SnapshotStore::open(&SnapshotConfig {
            keep: 2,
            ..config(dir.path())
        })?;
        assert_eq!(snapshots.latest("t", 0)?, None);
        // Blocks of 1 MiB: 20 000 pairs of ~130 bytes span a few.
        let source = filled(20_000);
        for offset in [10, 30, 20] {
            snapshots.write("t", 0, offset, 7, &source)?;
        }
        let listed: Vec<u64> = snapshots.list("t", 0)?.iter().map(|s| s.offset).collect();
        assert_eq!(listed, vec![30, 20], "keep 2: the oldest was deleted");
        let latest = snapshots.latest("t", 0)?.expect("a snapshot");
        let snapshot = snapshots.read(&latest)?.expect("present");
        assert_eq!(snapshot.pairs, 20_000);
        let copy = MemoryStore::new(Config::default());
        assert_eq!(snapshot.load_into(&copy)?, 20_000);
        assert_eq!(contents(&copy), contents(&source));
        assert!(snapshots.list("t", 1)?.is_empty());
        Ok(())
    }

    #[test]
    fn corrupt_is_typed_and_missing_is_none() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let snapshots = SnapshotStore::open(&config(dir.path()))?;
        let info = snapshots.write("t", 3, 41, 0, &filled(5_000))?;
        let file = std::path::Path::new("/").join(&info.path);
        let good = std::fs::read(&file).map_err(|e| Error::io("read", e))?;
        // A flipped bit anywhere (header, a block, the trailer) and a cut anywhere.
        for at in [10, good.len() / 2, good.len() - 3] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            std::fs::write(&file, &bad).map_err(|e| Error::io("write", e))?;
            let err = snapshots
                .read(&info)
                .expect_err("a flipped bit is detected");
            assert_eq!(err.kind(), store_api::ErrorKind::Corruption, "{err}");
        }
        for len in [0, 5, good.len() / 3, good.len() - 1] {
            std::fs::write(&file, &good[..len]).map_err(|e| Error::io("write", e))?;
            let err = snapshots.read(&info).expect_err("a cut is detected");
            assert_eq!(err.kind(), store_api::ErrorKind::Corruption, "{err}");
        }
        std::fs::remove_file(&file).map_err(|e| Error::io("remove", e))?;
        assert!(snapshots.read(&info)?.is_none(), "missing is None");
        Ok(())
    }

    #[test]
    fn debug_hides_secrets() {
        let config = SnapshotConfig {
            url: "s3://bucket/prefix".into(),
            options: [
                ("aws_secret_access_key".to_string(), "hunter2".to_string()),
                ("aws_region".to_string(), "eu-west-1".to_string()),
            ]
            .into(),
            ..SnapshotConfig::default()
        };
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("eu-west-1"),
            "{shown}"
        );
    }

    #[test]
    fn bad_configuration_is_an_invalid_argument() {
        for url in ["", "not a url", "gopher://x/y"] {
            let err = SnapshotStore::open(&SnapshotConfig {
                url: url.into(),
                ..SnapshotConfig::default()
            })
            .expect_err(url);
            assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument, "{err}");
        }
        let err = SnapshotStore::open(&SnapshotConfig {
            keep: 0,
            url: "file:///tmp".into(),
            ..SnapshotConfig::default()
        })
        .expect_err("keep 0");
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
    }
}
