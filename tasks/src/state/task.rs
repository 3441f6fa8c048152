//! One task: the stores of one input partition, their input position, commit and close.
//!
//! # Exactly-once state, store by store
//! Every store of a task holds, under the reserved key [`POSITION_KEY`], the input offsets up to
//! which its content is complete (the next offset to process, of each input topic). The key is
//! written in the same `LoggedStore` commit as the state it vouches for, so a store's position
//! and its data always agree, whatever happens between commits.
//!
//! Each store has its own changelog, so a task with several stores commits them one after the
//! other, and a crash in between leaves them at different positions. The task then resumes at
//! the smallest position, and while it replays records below a store's own position it drops
//! that store's writes: every store applies every input record exactly once. The limit: during
//! that replay, a store that is ahead is read in its later state, so a processor that copies
//! values from one store into another can copy a value from the future; processors whose writes
//! to a store depend only on that store and the record (counts, aggregates) are exact.
//!
//! # Only the task commits
//! A task's stores are opened with [`CommitPolicy::Explicit`]: a full buffer, a close or a drop
//! never commits behind the task's back. The task commits all its stores at a record boundary
//! (the commit interval, a store's buffer reaching `commit_bytes`, a revocation), so every
//! changelog commit holds whole records and the position they bring the store to.
//!
//! # Fencing
//! Opening a task fences each of its changelogs ([`LoggedStore::fence`]): a writer epoch above
//! any in the log is stamped on every record this owner appends, and every reader (a restore,
//! a standby, the next owner) ignores what an older epoch appends afterwards. A previous owner
//! that wakes up after its session timeout (a long pause) can still append, but nothing it
//! appends counts, and its next commit fails with `Fenced`: its instance then drops the task
//! as lost, without touching its local files.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use statestore_changelog::{
    CommitPolicy, KafkaClients, LoggedStore, LoggedStoreConfig, RestoreListener, RestoreOutcome,
    StateDirectory, TaskDirectory, TaskId,
};
use store_api::{Error, KeyValueStore, Result};

use crate::config::{StoreSpec, TasksConfig};
use crate::metrics::TaskMetrics;
use crate::punctuation::Punctuators;
use crate::stores::StoreKind;
use crate::stores::{Backing, OpenStore, StoreView, TaskKv};

/// The key under which each store keeps its input position: with one input topic, the next
/// offset to process (8 bytes, big-endian); with several, the tag `T` and then, for each
/// topic, its name's length (2 bytes, big-endian), the name and the next offset (8 bytes,
/// big-endian). Once the task has a stream time, either form is preceded by the tag `S` and
/// the stream time (8 bytes, big-endian, two's complement). It sorts before any key that does
/// not start with NUL, and [`TaskStore`](crate::TaskStore) hides it.
pub const POSITION_KEY: &[u8] = b"\0statestore.task.position";

/// The first byte of a position that names its topics.
const NAMED_POSITIONS: u8 = b'T';

/// The first byte of a position preceded by the task's stream time.
const WITH_STREAM_TIME: u8 = b'S';

/// A store of a task, with the position its content is complete up to.
pub(crate) struct Slot {
    pub name: String,
    /// The store and the kind it was declared as.
    pub open: OpenStore,
    /// The input offset of each input topic (in the configuration's order) this store's
    /// committed content is complete up to; its writes for records below it are dropped.
    /// Always 0 for a store that is not logged: it holds no position.
    pub position: Vec<u64>,
    /// The stream time this store's committed content holds.
    pub stream_time: Option<i64>,
    pub restored: RestoreOutcome,
    /// The kind the store was declared as: its view is opened again after a rewind.
    kind: StoreKind,
}

impl Slot {
    fn logged(&self) -> Option<&LoggedStore> {
        self.open.kv.logged()
    }
}

/// The open stores of one task.
pub(crate) struct Task {
    pub id: TaskId,
    /// Declared before the directory, so the stores close before the directory is released.
    pub slots: Vec<Slot>,
    /// The input topics, in the configuration's order: the indexes of the positions below.
    pub topics: Vec<String>,
    /// The next offset to process in each input topic, once known.
    pub next_offset: Vec<Option<u64>>,
    /// The offsets last committed with the stores and to the group: a commit is due while
    /// they differ from `next_offset` (set back when the group's offsets lag the stores').
    pub committed_offset: Vec<Option<u64>>,
    /// The largest record timestamp processed (or committed before).
    pub stream_time: Option<i64>,
    /// Where a [`rewind`](Task::rewind) takes the task back to: the offsets and stream time of
    /// its last commit, or those it started processing at.
    base_offset: Vec<Option<u64>>,
    base_stream_time: Option<i64>,
    /// Records an error handler said to skip, by (topic index, offset): passed over without
    /// the processor when they come again, until a commit moves the position past them.
    skips: std::collections::BTreeSet<(usize, u64)>,
    /// The processor's punctuators of this task.
    pub punctuators: RefCell<Punctuators>,
    /// The processor's `init` ran for this task.
    pub initialized: bool,
    /// A punctuator ran since the last commit: its writes need one.
    pub punctuated: bool,
    /// A call of the processor is under way or failed: the buffered writes may hold part of
    /// its record, so they are never committed (see [`begin_call`](Task::begin_call)).
    pub poisoned: bool,
    pub metrics: TaskMetrics,
    /// Unique among the tasks this process opened: a task closed and opened again is a new
    /// generation, which gets a new processor from a [`ProcessorPool`](crate::ProcessorPool).
    pub generation: u64,
    dir: TaskDirectory,
}

/// The generation of the next task opened.
static NEXT_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Task {
    /// Opens and restores every store of task `id`, logged to partition `id.partition` of
    /// their changelog topics (which have `partitions` partitions).
    pub fn open(
        state: &StateDirectory,
        config: &TasksConfig,
        clients: &KafkaClients,
        id: TaskId,
        partitions: u32,
        listener: &mut dyn RestoreListener,
    ) -> Result<Task> {
        let _span = tracing::info_span!("restore", task = %id).entered();
        let started = Instant::now();
        let dir = state.task(id)?;
        let mut slots = Vec::with_capacity(config.stores.len());
        for spec in &config.stores {
            slots.push(open_slot(
                &dir, config, spec, clients, id, partitions, listener,
            )?);
        }
        let resume: Vec<Option<u64>> = (0..config.input_topics.len())
            .map(|topic| {
                let at = slots
                    .iter()
                    .filter(|slot| slot.logged().is_some())
                    .map(|slot| slot.position[topic])
                    .min();
                at.filter(|&at| at > 0)
            })
            .collect();
        let stream_time = slots.iter().filter_map(|slot| slot.stream_time).max();
        let metrics = TaskMetrics::new(&config.application_id, id);
        for slot in &slots {
            metrics.restored(&slot.name, slot.restored.records);
        }
        metrics.opened_in(started.elapsed().as_secs_f64());
        Ok(Task {
            id,
            slots,
            topics: config.input_topics.clone(),
            next_offset: resume.clone(),
            committed_offset: resume.clone(),
            base_offset: resume,
            base_stream_time: stream_time,
            skips: std::collections::BTreeSet::new(),
            stream_time,
            punctuators: RefCell::new(Punctuators::default()),
            initialized: false,
            punctuated: false,
            poisoned: false,
            metrics,
            generation: NEXT_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            dir,
        })
    }

    /// Marks each store as replaying or not for the record at `offset` of input `topic`: a
    /// store whose committed content already covers it drops its writes.
    pub fn replay_record(&self, topic: usize, offset: u64) {
        for slot in &self.slots {
            let ahead = slot.logged().is_some() && offset < slot.position[topic];
            slot.open.kv.set_replaying(ahead);
        }
    }

    /// Marks each store as replaying or not between records (for punctuators): a store whose
    /// committed content is ahead of the task's position on some input drops its writes.
    pub fn replay_between_records(&self) {
        for slot in &self.slots {
            let ahead = slot.logged().is_some()
                && slot
                    .position
                    .iter()
                    .zip(&self.next_offset)
                    .any(|(&held, next)| next.unwrap_or(0) < held);
            slot.open.kv.set_replaying(ahead);
        }
    }

    /// Starts a call of user code: until [`finish_call`](Task::finish_call), the task is
    /// poisoned, so a call that fails or panics leaves it uncommittable whatever its caller
    /// does next.
    pub fn begin_call(&mut self) {
        self.poisoned = true;
    }

    /// Ends a call of user code that returned normally.
    pub fn finish_call(&mut self) {
        self.poisoned = false;
    }

    /// Sets where processing starts, once the task's first offsets are known: what a
    /// [`rewind`](Task::rewind) before the first commit goes back to.
    pub fn start_at(&mut self, next_offset: Vec<Option<u64>>) {
        self.base_offset.clone_from(&next_offset);
        self.next_offset = next_offset;
    }

    /// Takes the task back to its last commit: every logged store drops the writes it buffered
    /// since (a store with logging off keeps them) and its view is opened again over what is
    /// committed; the offsets and the stream time go back too, and the task is no longer
    /// poisoned. The records since that commit must then be fed to it again.
    ///
    /// # Errors
    /// A store that cannot drop its writes (its last commit failed: only a restore brings it
    /// back) or reopen its view; the task stays poisoned.
    pub fn rewind(&mut self) -> Result<()> {
        for slot in &mut self.slots {
            if let Some(store) = slot.logged() {
                store.discard_uncommitted()?;
            }
            slot.open.kv.set_replaying(false);
            slot.open.view = StoreView::open(&slot.open.kv, &slot.kind)?;
        }
        self.next_offset.clone_from(&self.base_offset);
        self.stream_time = self.base_stream_time;
        self.punctuated = false;
        self.poisoned = false;
        Ok(())
    }

    /// Marks the record at `offset` of input `topic` to be passed over when it comes again.
    pub fn skip(&mut self, topic: usize, offset: u64) {
        self.skips.insert((topic, offset));
    }

    /// Whether the record at `offset` of input `topic` is one to pass over.
    pub fn skips(&self, topic: usize, offset: u64) -> bool {
        !self.skips.is_empty() && self.skips.contains(&(topic, offset))
    }

    /// Moves the stream time up to `timestamp`, if that is later.
    pub fn advance_stream_time(&mut self, timestamp: i64) {
        if self.stream_time.is_none_or(|time| time < timestamp) {
            self.stream_time = Some(timestamp);
        }
    }

    /// True when a store's buffer reached its `commit_bytes` or a punctuator wrote since the
    /// last commit: the task should commit now, at this record boundary.
    pub fn needs_commit(&self) -> bool {
        self.punctuated
            || self
                .slots
                .iter()
                .filter_map(Slot::logged)
                .any(LoggedStore::needs_commit)
    }

    /// The outcome of each store's restore.
    pub fn restored(&self) -> Vec<(String, RestoreOutcome)> {
        self.slots
            .iter()
            .map(|slot| (slot.name.clone(), slot.restored))
            .collect()
    }

    /// Commits every store with the positions `next_offset` (where they advanced) and the
    /// stream time, one store after the other, then writes the task's checkpoint file once
    /// for the stores whose commit checkpointed (see
    /// [`CheckpointPolicy`](statestore_changelog::CheckpointPolicy)). Returns the offset now committed in every
    /// store, by topic index, for the topics that have one.
    pub fn commit(&mut self) -> Result<Vec<(usize, u64)>> {
        if self.poisoned {
            return Err(Error::invalid(format!(
                "task {} is not committed: its processor failed in the middle of a record",
                self.id
            )));
        }
        let _span = tracing::info_span!("commit", task = %self.id).entered();
        let started = Instant::now();
        let stores = self.slots.len();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Backing::Logged(store) = &slot.open.kv.backing else {
                if let Backing::Local(store) = &slot.open.kv.backing {
                    store.flush()?;
                }
                continue;
            };
            let position: Vec<u64> = slot
                .position
                .iter()
                .zip(&self.next_offset)
                .map(|(&held, next)| held.max(next.unwrap_or(0)))
                .collect();
            let stream_time = slot.stream_time.max(self.stream_time);
            if position != slot.position || stream_time != slot.stream_time {
                let bytes = encode_task_position(&self.topics, &position, stream_time);
                store.put(POSITION_KEY, &bytes)?;
            }
            // The task's checkpoint file is written once, after every store committed.
            store.commit_staged()?;
            slot.position = position;
            slot.stream_time = stream_time;
            if index + 1 < stores {
                fail::fail_point!("task-between-store-commits");
            }
        }
        self.dir.checkpoint().write_staged()?;
        self.punctuated = false;
        self.committed_offset.clone_from(&self.next_offset);
        self.base_offset.clone_from(&self.next_offset);
        self.base_stream_time = self.stream_time;
        let next = &self.next_offset;
        self.skips
            .retain(|&(topic, offset)| next[topic].is_none_or(|next| offset >= next));
        self.metrics
            .commit_seconds
            .record(started.elapsed().as_secs_f64());
        Ok(self
            .next_offset
            .iter()
            .enumerate()
            .filter_map(|(topic, next)| Some((topic, (*next)?)))
            .collect())
    }

    /// Commits, flushes and checkpoints every store (one checkpoint file write), then closes
    /// them, keeping their files: the next owner on this machine replays nothing.
    pub fn close(mut self) -> Result<Vec<(usize, u64)>> {
        let committed = self.commit().and_then(|committed| {
            for slot in &self.slots {
                if let Some(store) = slot.logged() {
                    store.stage_checkpoint()?;
                }
            }
            self.dir.checkpoint().write_staged()?;
            Ok(committed)
        });
        if committed.is_err() {
            self.abandon();
            return committed;
        }
        for slot in &self.slots {
            match &slot.open.kv.backing {
                Backing::Logged(store) => store.close()?,
                Backing::Local(store) => store.close()?,
            }
        }
        committed
    }

    /// Closes every store without committing: a logged store's buffered writes are dropped.
    /// For a task lost to another instance, which may already be writing to the changelog.
    pub fn abandon(&self) {
        for slot in &self.slots {
            let closed = match &slot.open.kv.backing {
                Backing::Logged(store) => store.abandon(),
                Backing::Local(store) => store.close(),
            };
            if let Err(err) = closed {
                tracing::warn!(task = %self.id, store = slot.name, %err, "abandoning a store");
            }
        }
    }
}

/// Opens store `spec` of task `id`: a logged one restored from its changelog and fenced, then
/// opened as its declared kind.
fn open_slot(
    dir: &TaskDirectory,
    config: &TasksConfig,
    spec: &StoreSpec,
    clients: &KafkaClients,
    id: TaskId,
    partitions: u32,
    listener: &mut dyn RestoreListener,
) -> Result<Slot> {
    let factory = statestore::resolve(&spec.backend)?;
    let (inner, _) = dir.open_logged_store(factory, &spec.name, &spec.options)?;
    let topics = &config.input_topics;
    let (backing, position, stream_time, restored) = if spec.logging {
        let log = clients.open(config.changelog_config(spec, partitions), id.partition)?;
        let checkpoint = Arc::clone(dir.checkpoint());
        // The task alone decides when its stores commit: at a record boundary, with its
        // position in every commit.
        let logged = LoggedStoreConfig {
            commit_policy: CommitPolicy::Explicit,
            ..spec.logged.clone()
        };
        let store =
            LoggedStore::open_with_listener(inner, Arc::new(log), checkpoint, logged, listener)?;
        // From here on nothing a previous owner of the task appends counts.
        store.fence()?;
        let (position, stream_time) = read_position(&store, topics)?;
        let restored = store.restored();
        (
            Backing::Logged(Box::new(store)),
            position,
            stream_time,
            restored,
        )
    } else {
        // Nothing to restore from: the store is whatever this machine kept.
        let restored = RestoreOutcome::default();
        (Backing::Local(inner), vec![0; topics.len()], None, restored)
    };
    let kv = Arc::new(TaskKv::new(spec.name.clone(), backing));
    let view = StoreView::open(&kv, &spec.kind)?;
    Ok(Slot {
        name: spec.name.clone(),
        open: OpenStore { kv, view },
        position,
        stream_time,
        restored,
        kind: spec.kind,
    })
}

/// The position `store` holds for each of `topics` (0 for a topic it holds none for).
///
/// # Errors
/// `Corruption` for a position that cannot be decoded; `InvalidArgument` for a one-topic
/// position under several input topics: which topic it belongs to is not recorded.
fn read_position(store: &LoggedStore, topics: &[String]) -> Result<(Vec<u64>, Option<i64>)> {
    match store.get(POSITION_KEY)? {
        None => Ok((vec![0; topics.len()], None)),
        Some(bytes) => decode_task_position(&bytes, topics).map_err(|err| match err {
            Error::Corruption(why) => Error::Corruption(format!("store {store:?}: {why}")),
            Error::InvalidArgument(why) => {
                Error::InvalidArgument(format!("store {store:?}: {why}"))
            }
            other => other,
        }),
    }
}

/// The bytes of `position` and `stream_time`, as [`POSITION_KEY`] holds them.
fn encode_task_position(topics: &[String], position: &[u64], stream_time: Option<i64>) -> Vec<u8> {
    let Some(time) = stream_time else {
        return encode_position(topics, position);
    };
    let mut bytes = vec![WITH_STREAM_TIME];
    bytes.extend_from_slice(&time.to_be_bytes());
    bytes.extend_from_slice(&encode_position(topics, position));
    bytes
}

/// The input position of each of `topics` (0 for a topic it names none for) and the stream
/// time held in `bytes`, a value of [`POSITION_KEY`]: for tools that read a task's changelog.
///
/// # Errors
/// `Corruption` for bytes that cannot be decoded; `InvalidArgument` for a one-topic position
/// under several `topics` (which topic it belongs to is not recorded).
pub fn decode_task_position(bytes: &[u8], topics: &[String]) -> Result<(Vec<u64>, Option<i64>)> {
    // An 8-byte value is a one-topic position, whatever its first byte.
    if bytes.len() != 8
        && let Some((&WITH_STREAM_TIME, rest)) = bytes.split_first()
    {
        let (time, rest) = rest.split_at_checked(8).ok_or_else(|| {
            Error::Corruption(format!(
                "the task position of {} bytes cannot be decoded",
                bytes.len()
            ))
        })?;
        let time = i64::from_be_bytes(time.try_into().unwrap_or_default());
        return Ok((decode_position(rest, topics)?, Some(time)));
    }
    Ok((decode_position(bytes, topics)?, None))
}

/// The bytes of `position` (one offset per topic of `topics`).
fn encode_position(topics: &[String], position: &[u64]) -> Vec<u8> {
    if let [next] = position {
        return next.to_be_bytes().to_vec();
    }
    let mut bytes = vec![NAMED_POSITIONS];
    for (topic, next) in topics.iter().zip(position) {
        // Kafka topic names have at most 249 bytes (validated).
        let len = u16::try_from(topic.len()).unwrap_or(u16::MAX);
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(&topic.as_bytes()[..usize::from(len)]);
        bytes.extend_from_slice(&next.to_be_bytes());
    }
    bytes
}

/// The offset of each of `topics` in `bytes`; 0 for a topic they do not name. Topics they name
/// and `topics` does not (an input topic removed from the configuration) are ignored.
fn decode_position(bytes: &[u8], topics: &[String]) -> Result<Vec<u64>> {
    let offset = |raw: &[u8]| raw.try_into().map(u64::from_be_bytes).ok();
    if bytes.len() == 8 {
        return match (topics, offset(bytes)) {
            ([_], Some(next)) => Ok(vec![next]),
            _ => Err(Error::invalid(format!(
                "the task position was written by an application with one input topic, and \
                 {} are configured now; which topic it belongs to is not recorded (run the new \
                 topology under a new application_id)",
                topics.len()
            ))),
        };
    }
    let corrupt = || {
        Error::Corruption(format!(
            "the task position of {} bytes cannot be decoded",
            bytes.len()
        ))
    };
    let Some((&NAMED_POSITIONS, mut rest)) = bytes.split_first() else {
        return Err(corrupt());
    };
    if rest.is_empty() {
        return Err(corrupt());
    }
    let mut position = vec![0; topics.len()];
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(2).ok_or_else(corrupt)?;
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let (name, tail) = tail.split_at_checked(len).ok_or_else(corrupt)?;
        let (next, tail) = tail.split_at_checked(8).ok_or_else(corrupt)?;
        let next = offset(next).ok_or_else(corrupt)?;
        if let Some(index) = topics.iter().position(|t| t.as_bytes() == name) {
            position[index] = next;
        }
        rest = tail;
    }
    Ok(position)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{decode_position, decode_task_position, encode_position, encode_task_position};

    use statestore::memory::{Config, MemoryStore};
    use statestore_changelog::{Changelog, Checkpoint, LoggedStore, LoggedStoreConfig, MemoryLog};
    use store_api::{ErrorKind, KeyValueStore};

    /// A lost task's buffered writes must never reach the changelog: another instance may
    /// already be writing to it.
    #[test]
    fn abandoning_a_store_drops_its_buffered_writes() {
        let dir = tempfile::tempdir().expect("dir");
        let log = MemoryLog::new("app-counts-changelog", 0);
        let checkpoint = Arc::new(Checkpoint::open(dir.path().join(".checkpoint")).expect("cp"));
        let store = LoggedStore::open(
            Arc::new(MemoryStore::new(Config::default())),
            Arc::new(log.clone()),
            checkpoint,
            LoggedStoreConfig::default(),
        )
        .expect("open");
        store.put(b"kept", b"1").expect("put");
        store.commit().expect("commit");
        store.put(b"dropped", b"2").expect("put");
        store.abandon().expect("abandon");
        assert_eq!(
            store.get(b"kept").expect_err("closed").kind(),
            ErrorKind::Closed
        );
        store.abandon().expect("abandoning twice");
        drop(store);
        let logged: Vec<Vec<u8>> = log
            .read(0, 100)
            .expect("read")
            .into_iter()
            .map(|record| record.op.key().to_vec())
            .collect();
        assert!(logged.contains(&b"kept".to_vec()), "{logged:?}");
        assert!(!logged.contains(&b"dropped".to_vec()), "{logged:?}");
    }

    fn topics(names: &[&str]) -> Vec<String> {
        names.iter().map(|&name| name.to_owned()).collect()
    }

    #[test]
    fn positions_round_trip_by_topic_name() {
        let one = topics(&["in"]);
        let bytes = encode_position(&one, &[42]);
        assert_eq!(
            bytes,
            42u64.to_be_bytes(),
            "one topic keeps the 8-byte form"
        );
        assert_eq!(decode_position(&bytes, &one).expect("decode"), [42]);

        let two = topics(&["clicks", "views"]);
        let bytes = encode_position(&two, &[7, u64::MAX]);
        assert_eq!(
            decode_position(&bytes, &two).expect("decode"),
            [7, u64::MAX]
        );
        // Reordered, extended or shrunk configurations find each topic by name.
        let reordered = topics(&["views", "new", "clicks"]);
        assert_eq!(
            decode_position(&bytes, &reordered).expect("decode"),
            [u64::MAX, 0, 7]
        );
        assert_eq!(
            decode_position(&bytes, &topics(&["clicks"])).expect("decode"),
            [7]
        );
    }

    #[test]
    fn the_stream_time_rides_with_the_position() {
        for names in [&["in"][..], &["clicks", "views"][..]] {
            let topics = topics(names);
            let position: Vec<u64> = (0..names.len() as u64).map(|i| 40 + i).collect();
            for time in [
                None,
                Some(0),
                Some(-5),
                Some(1_800_000_000_000),
                Some(i64::MIN),
            ] {
                let bytes = encode_task_position(&topics, &position, time);
                assert_eq!(
                    decode_task_position(&bytes, &topics).expect("decode"),
                    (position.clone(), time)
                );
            }
        }
        // A one-topic position that happens to start with the tag is still a position.
        let one = topics(&["in"]);
        let bytes = (u64::from(b'S') << 56).to_be_bytes();
        assert_eq!(
            decode_task_position(&bytes, &one).expect("decode"),
            (vec![u64::from(b'S') << 56], None)
        );
        let err = decode_task_position(b"S1234", &one).expect_err("cut stream time");
        assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    }

    #[test]
    fn a_bad_position_is_a_typed_error() {
        let two = topics(&["a", "b"]);
        let one_topic = 5u64.to_be_bytes();
        let err = decode_position(&one_topic, &two).expect_err("whose offset is it?");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("one input topic"), "{err}");

        let good = encode_position(&two, &[1, 2]);
        assert_eq!(good.len(), 23);
        // Every cut but 12, which ends after the first topic's whole entry.
        for cut in [0, 1, 2, 5, 11, 13, 22] {
            let err = decode_position(&good[..cut], &two).expect_err("truncated");
            assert_eq!(err.kind(), ErrorKind::Corruption, "cut at {cut}: {err}");
        }
        let err = decode_position(b"garbage!!", &two).expect_err("garbage");
        assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    }
}
