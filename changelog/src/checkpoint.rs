//! The task checkpoint file, in Kafka Streams' text format.
//!
//! A checkpoint says, per changelog (topic, partition), the offset of the last record the
//! task's store already holds. Restore replays only what follows it. The file looks like
//! ```text
//! 0
//! 2
//! app-counts-changelog 3 41
//! app-totals-changelog 3 17
//! ```
//! (version, number of entries, then one `topic partition offset` line each), so Kafka Streams'
//! tools read it. It is replaced atomically: written to `.checkpoint.tmp`, fsynced, renamed over
//! `.checkpoint`, and the directory fsynced, so a crash leaves either the old or the new file.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{ErrorKind as IoErrorKind, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use store_api::{Error, Result};

/// The checkpoint file name inside a task directory.
pub const CHECKPOINT_FILE: &str = ".checkpoint";

/// The temporary file a new checkpoint is written to before it is renamed.
pub const CHECKPOINT_TMP_FILE: &str = ".checkpoint.tmp";

/// The only format version written and read.
const VERSION: u32 = 0;

/// A changelog partition: the key of a checkpoint entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The changelog topic.
    pub topic: String,
    /// The partition number.
    pub partition: u32,
}

impl TopicPartition {
    /// A (topic, partition) pair.
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// Checkpoint entries: for each changelog partition, the offset of the last record held.
pub type CheckpointEntries = BTreeMap<TopicPartition, u64>;

/// The checkpoint file of one task, shared by all the task's stores.
///
/// It keeps two sets of entries. The *live* entries say what each store holds now, in this
/// process ([`get`](Checkpoint::get)); a commit that leaves the store's writes unflushed
/// records its offset there alone ([`advance`](Checkpoint::advance)). The *file* entries say
/// what each store holds durably: only an offset whose store content was flushed is
/// [staged](Checkpoint::stage) for the file, and one [`write_staged`](Checkpoint::write_staged)
/// rewrites the file with every staged entry, so a task whose stores all committed writes it
/// once. The file therefore never vouches for store content that a crash can lose; after a
/// crash it may name an older offset than the store holds, and restore replays from there,
/// which rebuilds the same state (see [`restore`](crate::restore())).
///
/// Every rewrite merges the entries of every store, so two stores never overwrite each
/// other's offsets. Share one instance per file (the [`TaskDirectory`](crate::TaskDirectory)
/// hands out an `Arc`): two instances on one path would race on the temporary file.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    entries: Mutex<Entries>,
}

/// The live entries, the file's, and those staged for the next file write.
#[derive(Debug, Default)]
struct Entries {
    live: CheckpointEntries,
    file: CheckpointEntries,
    staged: CheckpointEntries,
    /// Rewrites of the file through this instance.
    writes: u64,
}

impl Checkpoint {
    /// Opens the checkpoint at `path`, reading its entries; a missing file has none.
    ///
    /// # Errors
    /// `Corruption` when the file is not a version-0 checkpoint, or `Io`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Checkpoint> {
        let path = path.into();
        let file = read_checkpoint(&path)?.unwrap_or_default();
        Ok(Checkpoint {
            path,
            entries: Mutex::new(Entries {
                live: file.clone(),
                file,
                staged: CheckpointEntries::new(),
                writes: 0,
            }),
        })
    }

    /// The checkpoint file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The offset of (`topic`, `partition`) that its store holds now (the live entry), if any.
    pub fn get(&self, topic: &str, partition: u32) -> Option<u64> {
        let key = TopicPartition::new(topic, partition);
        self.entries.lock().live.get(&key).copied()
    }

    /// A copy of every live entry.
    pub fn entries(&self) -> CheckpointEntries {
        self.entries.lock().live.clone()
    }

    /// A copy of the entries the file holds: those whose store content was flushed.
    pub fn file_entries(&self) -> CheckpointEntries {
        self.entries.lock().file.clone()
    }

    /// How many times this instance rewrote the file (each costs two fsyncs).
    pub fn file_writes(&self) -> u64 {
        self.entries.lock().writes
    }

    /// Records that the store of (`topic`, `partition`) holds every record up to `offset`,
    /// durably, and rewrites the file atomically with it and every staged entry. Writing an
    /// unchanged file does nothing.
    ///
    /// # Errors
    /// `InvalidArgument` for a topic the text format cannot hold, or `Io`; then the file keeps
    /// its previous content and the entry stays staged.
    pub fn set(&self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        self.stage(topic, partition, offset)?;
        self.write_staged()
    }

    /// Records that the store of (`topic`, `partition`) holds every record up to `offset`
    /// now, in this process, but not durably (its writes are not flushed): the file keeps its
    /// entry, so after a crash restore replays from the offset the file names.
    ///
    /// # Errors
    /// `InvalidArgument` for a topic the text format cannot hold.
    pub fn advance(&self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        check_topic(topic)?;
        let key = TopicPartition::new(topic, partition);
        self.entries.lock().live.insert(key, offset);
        Ok(())
    }

    /// Records that the store of (`topic`, `partition`) holds every record up to `offset`
    /// durably (its writes were flushed), for the next [`write_staged`](Checkpoint::write_staged).
    /// Call it only after the store's flush returned.
    ///
    /// # Errors
    /// `InvalidArgument` for a topic the text format cannot hold.
    pub fn stage(&self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        check_topic(topic)?;
        let key = TopicPartition::new(topic, partition);
        let mut entries = self.entries.lock();
        entries.live.insert(key.clone(), offset);
        entries.staged.insert(key, offset);
        Ok(())
    }

    /// Rewrites the file atomically with every staged entry merged into it: one write for all
    /// the stores that staged since the last one. Does nothing when the file would not change.
    ///
    /// # Errors
    /// `Io`; then the file keeps its previous content and the entries stay staged.
    pub fn write_staged(&self) -> Result<()> {
        let mut entries = self.entries.lock();
        if entries.staged.is_empty() {
            return Ok(());
        }
        let mut next = entries.file.clone();
        next.extend(
            entries
                .staged
                .iter()
                .map(|(key, &offset)| (key.clone(), offset)),
        );
        if next != entries.file {
            write_checkpoint(&self.path, &next)?;
            entries.writes += 1;
        }
        entries.file = next;
        entries.staged.clear();
        Ok(())
    }

    /// Forgets the entry of (`topic`, `partition`), rewriting the file if it had one. Restore
    /// calls this before wiping a store, so a crash during the wipe never leaves a checkpoint
    /// that vouches for a half-wiped store.
    ///
    /// # Errors
    /// `Io`; then the file entry is kept (the live and staged ones are gone).
    pub fn remove(&self, topic: &str, partition: u32) -> Result<()> {
        let key = TopicPartition::new(topic, partition);
        let mut entries = self.entries.lock();
        entries.live.remove(&key);
        entries.staged.remove(&key);
        if !entries.file.contains_key(&key) {
            return Ok(());
        }
        let mut next = entries.file.clone();
        next.remove(&key);
        write_checkpoint(&self.path, &next)?;
        entries.writes += 1;
        entries.file = next;
        Ok(())
    }
}

/// Reads the checkpoint file at `path`: `Ok(None)` when there is no file.
///
/// # Errors
/// `Corruption` for an unknown version, a count that does not match the entry lines, or a line
/// that is not `topic partition offset`; `Io` when the file cannot be read.
pub fn read_checkpoint(path: &Path) -> Result<Option<CheckpointEntries>> {
    let text = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == IoErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(Error::io(format!("reading {}", path.display()), err)),
    };
    let text = String::from_utf8(text)
        .map_err(|_| corrupt(path, "the file is not UTF-8 text".to_string()))?;
    parse_checkpoint(&text)
        .map(Some)
        .map_err(|why| corrupt(path, why))
}

/// Writes `entries` to `path` atomically: a temporary file in the same directory, fsynced,
/// renamed over `path`, then the directory fsynced.
///
/// # Errors
/// `InvalidArgument` for a topic the text format cannot hold, or `Io`.
pub fn write_checkpoint(path: &Path, entries: &CheckpointEntries) -> Result<()> {
    for key in entries.keys() {
        check_topic(&key.topic)?;
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(CHECKPOINT_TMP_FILE);
    let io = |what: &str, err| Error::io(format!("{what} {}", tmp.display()), err);
    let mut file = File::create(&tmp).map_err(|err| io("creating", err))?;
    file.write_all(format_checkpoint(entries).as_bytes())
        .map_err(|err| io("writing", err))?;
    file.sync_all().map_err(|err| io("syncing", err))?;
    drop(file);
    fs::rename(&tmp, path).map_err(|err| io("renaming", err))?;
    sync_dir(dir)
}

/// Fsyncs a directory, making a rename or a new entry in it durable.
///
/// # Errors
/// `Io`.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|err| Error::io(format!("syncing directory {}", dir.display()), err))
}

/// The text of a checkpoint holding `entries`.
pub(crate) fn format_checkpoint(entries: &CheckpointEntries) -> String {
    let mut text = format!("{VERSION}\n{}\n", entries.len());
    for (key, offset) in entries {
        text.push_str(&format!("{} {} {offset}\n", key.topic, key.partition));
    }
    text
}

/// Parses checkpoint text; the error says what is wrong, without the path.
pub(crate) fn parse_checkpoint(text: &str) -> std::result::Result<CheckpointEntries, String> {
    let mut lines = text.lines();
    let version = lines.next().ok_or("the file is empty")?;
    if version.trim() != VERSION.to_string() {
        return Err(format!(
            "unsupported version {version:?} (expected {VERSION})"
        ));
    }
    let count_line = lines.next().ok_or("the entry count is missing")?;
    let count: usize = count_line
        .trim()
        .parse()
        .map_err(|_| format!("bad entry count {count_line:?}"))?;
    let mut entries = CheckpointEntries::new();
    for line in lines.filter(|line| !line.trim().is_empty()) {
        let (key, offset) = parse_entry(line)?;
        if entries.insert(key, offset).is_some() {
            return Err(format!("duplicate entry {line:?}"));
        }
    }
    if entries.len() != count {
        return Err(format!(
            "the header announces {count} entries but {} follow",
            entries.len()
        ));
    }
    Ok(entries)
}

/// Parses one `topic partition offset` line.
fn parse_entry(line: &str) -> std::result::Result<(TopicPartition, u64), String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [topic, partition, offset] = fields[..] else {
        return Err(format!("entry {line:?} is not `topic partition offset`"));
    };
    let partition = partition
        .parse()
        .map_err(|_| format!("bad partition in entry {line:?}"))?;
    let offset = offset
        .parse()
        .map_err(|_| format!("bad offset in entry {line:?}"))?;
    Ok((TopicPartition::new(topic, partition), offset))
}

/// A topic the line format can hold: not empty, no whitespace.
fn check_topic(topic: &str) -> Result<()> {
    if topic.is_empty() || topic.chars().any(char::is_whitespace) {
        return Err(Error::invalid(format!(
            "topic {topic:?} cannot be checkpointed: it is empty or holds whitespace"
        )));
    }
    Ok(())
}

fn corrupt(path: &Path, why: String) -> Error {
    Error::Corruption(format!("checkpoint {}: {why}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_is_kafka_streams_text() {
        let mut entries = CheckpointEntries::new();
        entries.insert(TopicPartition::new("app-b-changelog", 1), 7);
        entries.insert(TopicPartition::new("app-a-changelog", 0), 41);
        let text = format_checkpoint(&entries);
        assert_eq!(text, "0\n2\napp-a-changelog 0 41\napp-b-changelog 1 7\n");
        assert_eq!(parse_checkpoint(&text), Ok(entries));
    }

    #[test]
    fn rejects_garbage() {
        for text in [
            "",
            "1\n0\n",
            "0\n",
            "0\nx\n",
            "0\n1\n",
            "0\n0\nt 0 1\n",
            "0\n1\nt 0\n",
            "0\n1\nt -1 5\n",
            "0\n1\nt 0 -5\n",
            "0\n1\nt 0 5 9\n",
            "0\n2\nt 0 5\nt 0 6\n",
            "\u{0}\u{ff}garbage",
        ] {
            assert!(parse_checkpoint(text).is_err(), "{text:?} parsed");
        }
    }
}
