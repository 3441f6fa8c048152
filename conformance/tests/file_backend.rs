//! The suite against a naive persistent backend with weakly consistent iterators, so the
//! persistence cases and the weak-iterator checks run here too (the BYO map store is neither
//! persistent nor weak). The whole map is rewritten to one file on `flush` and `close`; a
//! lock file held with `File::try_lock` refuses a second open.
//!
//! The same store with a broken `flush`, which rewrites the data file in place instead of
//! writing a new file and renaming it, shows that the random-kill case catches that mistake.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use statestore_conformance::crash::kills::{
    Corruption, KillReport, kill_at_random_with, seed_from_env,
};
use store_api::bounds::{OwnedBound, to_owned_bound};
use store_api::limits::{check_entry, check_key};
use store_api::{BatchOp, Capabilities, Error, KeyValueStore, KvIter, KvPair, Result, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type SharedMap = Arc<Mutex<Map>>;

fn lock(map: &Mutex<Map>) -> MutexGuard<'_, Map> {
    map.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Open {
    map: SharedMap,
    dir: PathBuf,
    /// The broken flush: truncate the data file and write it again, entry by entry.
    in_place: bool,
    _lock: File,
}

/// The store; `None` once closed.
#[derive(Debug)]
struct FileStore {
    open: Mutex<Option<Open>>,
}

fn io(context: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |err| Error::io(context, err)
}

fn encode(map: &Map) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in map {
        for part in [key, value] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

fn decode(mut bytes: &[u8]) -> Result<Map> {
    let take = |bytes: &mut &[u8]| -> Result<Vec<u8>> {
        let corrupt = || Error::Corruption("truncated data file".into());
        let (len, rest) = bytes.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let len = usize::try_from(u64::from_be_bytes(*len)).map_err(|_| corrupt())?;
        let (part, rest) = rest.split_at_checked(len).ok_or_else(corrupt)?;
        *bytes = rest;
        Ok(part.to_vec())
    };
    let mut map = Map::new();
    while !bytes.is_empty() {
        let key = take(&mut bytes)?;
        map.insert(key, take(&mut bytes)?);
    }
    Ok(map)
}

impl FileStore {
    fn open(dir: &Path, in_place: bool) -> Result<Self> {
        fs::create_dir_all(dir).map_err(io("creating the directory"))?;
        let lock_file = File::create(dir.join("LOCK")).map_err(io("opening LOCK"))?;
        if let Err(err) = lock_file.try_lock() {
            return Err(Error::locked(dir, err.to_string()));
        }
        let map = match fs::read(dir.join("data")) {
            Ok(bytes) => decode(&bytes)?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(err) => return Err(Error::io("reading data", err)),
        };
        let open = Open {
            map: Arc::new(Mutex::new(map)),
            dir: dir.to_path_buf(),
            in_place,
            _lock: lock_file,
        };
        Ok(FileStore {
            open: Mutex::new(Some(open)),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&Open) -> Result<T>) -> Result<T> {
        let guard = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        f(guard.as_ref().ok_or(Error::Closed)?)
    }

    fn iter(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, reverse: bool) -> Result<KvIter> {
        let map = self.with(|open| Ok(Arc::clone(&open.map)))?;
        let (from, to) = (to_owned_bound(from), to_owned_bound(to));
        Ok(Box::new(WeakIter {
            map,
            from,
            to,
            reverse,
        }))
    }
}

/// Re-reads the live map at each step from just past the last key returned: weakly
/// consistent, never a copy of the range.
struct WeakIter {
    map: SharedMap,
    from: OwnedBound,
    to: OwnedBound,
    reverse: bool,
}

impl Iterator for WeakIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        let map = lock(&self.map);
        let (from, to) = (
            self.from.as_ref().map(Vec::as_slice),
            self.to.as_ref().map(Vec::as_slice),
        );
        if store_api::bounds::range_is_empty(from, to) {
            return None;
        }
        let mut range = map.range::<[u8], _>((from, to));
        let (key, value) = if self.reverse {
            range.next_back()?
        } else {
            range.next()?
        };
        let entry = (key.clone(), value.clone());
        drop(map);
        if self.reverse {
            self.to = Bound::Excluded(entry.0.clone());
        } else {
            self.from = Bound::Excluded(entry.0.clone());
        }
        Some(Ok(entry))
    }
}

impl KeyValueStore for FileStore {
    fn name(&self) -> &str {
        "file"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_persistent(true)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.with(|open| Ok(lock(&open.map).get(key).cloned()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.with(|open| {
            lock(&open.map).insert(key.to_vec(), value.to_vec());
            Ok(())
        })
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_entry(key, value)?;
        self.with(|open| {
            let mut map = lock(&open.map);
            if let Some(existing) = map.get(key) {
                return Ok(Some(existing.clone()));
            }
            map.insert(key.to_vec(), value.to_vec());
            Ok(None)
        })
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.with(|open| {
            lock(&open.map).remove(key);
            Ok(())
        })
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        batch.validate()?;
        self.with(|open| {
            let mut map = lock(&open.map);
            for op in batch {
                match op {
                    BatchOp::Put { key, value } => drop(map.insert(key, value)),
                    BatchOp::Delete { key } => drop(map.remove(&key)),
                }
            }
            Ok(())
        })
    }

    fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, false)
    }

    fn reverse_range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.iter(from, to, true)
    }

    fn approximate_len(&self) -> Result<u64> {
        self.with(|open| Ok(lock(&open.map).len() as u64))
    }

    fn flush(&self) -> Result<()> {
        self.with(|open| {
            if open.in_place {
                return rewrite_in_place(open);
            }
            let bytes = encode(&lock(&open.map));
            let tmp = open.dir.join("data.tmp");
            let mut file = File::create(&tmp).map_err(io("creating data.tmp"))?;
            file.write_all(&bytes).map_err(io("writing data.tmp"))?;
            file.sync_all().map_err(io("syncing data.tmp"))?;
            fs::rename(&tmp, open.dir.join("data")).map_err(io("renaming data.tmp"))?;
            File::open(&open.dir)
                .and_then(|d| d.sync_all())
                .map_err(io("syncing the directory"))
        })
    }

    fn close(&self) -> Result<()> {
        if self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
        {
            return Ok(());
        }
        self.flush()?;
        // Dropping `Open` releases the lock file.
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Ok(())
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        // Drop cannot report an error; the suite's cases close explicitly when it matters.
        let _ = self.close();
    }
}

/// The broken flush: a kill between the truncation and the last write leaves a data file
/// that is cut short, losing flushed entries or failing to decode.
fn rewrite_in_place(open: &Open) -> Result<()> {
    let map = lock(&open.map);
    let mut file = File::create(open.dir.join("data")).map_err(io("truncating data"))?;
    for (key, value) in map.iter() {
        for part in [key, value] {
            file.write_all(&(part.len() as u64).to_be_bytes())
                .and_then(|()| file.write_all(part))
                .map_err(io("rewriting data"))?;
        }
    }
    file.sync_all().map_err(io("syncing data"))
}

fn open_file_store(dir: &Path) -> Result<Box<dyn KeyValueStore>> {
    Ok(Box::new(FileStore::open(dir, false)?))
}

fn open_in_place_store(dir: &Path) -> Result<Box<dyn KeyValueStore>> {
    Ok(Box::new(FileStore::open(dir, true)?))
}

statestore_conformance::store_suite!(open_file_store);

#[test]
#[ignore = "run as a child process by random_kills_catch_a_flush_that_rewrites_in_place"]
fn in_place_crash_child() {
    statestore_conformance::crash::child(|dir, _scenario| open_in_place_store(dir));
}

/// 200 random kills of the child looping on the in-place store in a new directory.
fn kill_in_place(corruption: Corruption) -> std::result::Result<KillReport, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    kill_at_random_with(
        "in_place_crash_child",
        dir.path(),
        "in_place",
        &open_in_place_store,
        200,
        seed_from_env(),
        corruption,
    )
}

/// The random-kill case cannot pass by accident: on the store whose `flush` rewrites its file
/// in place it finds lost flushed batches or a file that no longer opens, well within the
/// kills the run allows.
#[test]
fn random_kills_catch_a_flush_that_rewrites_in_place() {
    let why = kill_in_place(Corruption::Violation)
        .expect_err("200 random kills found nothing wrong with an in-place rewrite");
    let _ = writeln!(std::io::stderr(), "in-place rewrite caught: {why}");
    assert!(
        why.contains("missing") || why.contains("reopening") || why.contains("in part"),
        "an unexpected failure: {why}"
    );
}

/// With `Corruption::Tolerated` (a store that declares `crash_may_corrupt`), a reopen that
/// fails with `Corruption` is counted and the run goes on in an emptied directory, while lost
/// flushed batches still fail it: the in-place store's torn files (a kill in the middle of its
/// rewrite) never end the run as a failed reopen, and it is caught for what it loses, or
/// reports the corruption it met.
#[test]
fn tolerated_corruption_is_counted_and_lost_batches_still_fail() {
    let outcome = kill_in_place(Corruption::Tolerated);
    let _ = writeln!(
        std::io::stderr(),
        "in-place rewrite, corruption tolerated: {outcome:?}"
    );
    match outcome {
        Ok(report) => assert!(
            report.corrupted > 0,
            "200 kills of an in-place rewrite met no corruption and lost nothing: {report:?}"
        ),
        Err(why) => assert!(
            !why.contains("reopening") && (why.contains("missing") || why.contains("in part")),
            "a failure other than lost or partial batches: {why}"
        ),
    }
}
