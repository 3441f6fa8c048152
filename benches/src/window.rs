//! The window store's `fetch` and its segment expiry on any backend, and the layouts without
//! segments they are measured against.
//!
//! Fetch: [`FetchSetup`] writes `keys` keys' `windows` one-minute windows, in segments of ten
//! minutes, into a [`WindowStore`] and the same records as `key | start` keys into a plain
//! store; [`FetchSetup::fetch`] reads one key's windows through `WindowStore::fetch` over
//! every live segment, [`FetchSetup::raw_range`] the same entries as one range, the floor any
//! layout pays.
//!
//! Expiry: [`Segmented`] keeps [`SEGMENTS`] live segments of `per_segment` records; each
//! [`Segmented::expire_one`] times the put that moves the stream time one segment on, which
//! drops the oldest segment (a range of it and one batch of deletes). [`Unsegmented`] does the
//! same for `key | start` keys without segments: a scan of every record to find the expired
//! ones and one batch of their deletes. Not timed: writing the records.

use std::hint::black_box;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use statestore_operator_stores::window::{WindowStore, WindowStoreConfig};
use store_api::{Error, KeyValueStore, Result, WriteBatch};
use tempfile::TempDir;

/// One minute, in milliseconds: the windows' size and start step.
pub const MINUTE: i64 = 60_000;
/// The window store's segment interval: ten minutes.
pub const SEGMENT: i64 = 10 * MINUTE;
/// Live segments of the expiry workload.
pub const SEGMENTS: i64 = 5;

/// The sizes of the window workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSizes {
    /// Keys of the fetch workload.
    pub keys: i64,
    /// Windows per key of the fetch workload, and the windows one fetch returns.
    pub windows: i64,
    /// Records per segment of the expiry workload, and the records one expiry drops.
    pub per_segment: i64,
}

impl WindowSizes {
    /// 1000 keys of 100 windows, 2000 records per segment.
    pub const FULL: WindowSizes = WindowSizes {
        keys: 1000,
        windows: 100,
        per_segment: 2000,
    };
    /// 50 keys of 20 windows, 200 records per segment: a run that only checks the workloads.
    pub const SMALL: WindowSizes = WindowSizes {
        keys: 50,
        windows: 20,
        per_segment: 200,
    };

    /// `default`, each size replaced by `STATESTORE_WINDOW_BENCH_KEYS`,
    /// `STATESTORE_WINDOW_BENCH_WINDOWS` or `STATESTORE_WINDOW_BENCH_PER_SEGMENT` when set to
    /// a positive number.
    pub fn from_env(default: WindowSizes) -> WindowSizes {
        let env = |name: &str, default: i64| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.parse().ok())
                .filter(|value| *value > 0)
                .unwrap_or(default)
        };
        WindowSizes {
            keys: env("STATESTORE_WINDOW_BENCH_KEYS", default.keys),
            windows: env("STATESTORE_WINDOW_BENCH_WINDOWS", default.windows),
            per_segment: env("STATESTORE_WINDOW_BENCH_PER_SEGMENT", default.per_segment),
        }
    }
}

/// A store of a backend in a directory that outlives it.
#[derive(Debug)]
struct Opened {
    // Declared before `_dir`, so the store closes before its directory is removed.
    store: Arc<dyn KeyValueStore>,
    _dir: TempDir,
}

fn open(backend: &str) -> Result<Opened> {
    let dir = tempfile::tempdir().map_err(|err| Error::io("creating a temp dir", err))?;
    let store = crate::open_store(backend, &dir.path().join("store"))?;
    Ok(Opened {
        store: Arc::from(store),
        _dir: dir,
    })
}

fn key(n: i64) -> Vec<u8> {
    format!("key-{n:06}").into_bytes()
}

/// `key | start` with the start big-endian and sign-flipped: a layout without segments.
fn raw_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut out = key.to_vec();
    out.extend_from_slice(&((start as u64) ^ (1 << 63)).to_be_bytes());
    out
}

/// The start encoded at the end of a [`raw_key`].
fn raw_start(raw: &[u8]) -> Result<i64> {
    let tail = raw
        .len()
        .checked_sub(8)
        .and_then(|at| <[u8; 8]>::try_from(&raw[at..]).ok())
        .ok_or_else(|| Error::Corruption(format!("a key of {} bytes holds no start", raw.len())))?;
    Ok((u64::from_be_bytes(tail) ^ (1 << 63)) as i64)
}

/// One key's windows, in a window store and in a plain store, ready to fetch.
#[derive(Debug)]
pub struct FetchSetup {
    store: WindowStore,
    raw: Opened,
    probe: Vec<u8>,
    windows: i64,
    _segmented: Opened,
}

impl FetchSetup {
    /// Writes `sizes.keys` keys' `sizes.windows` windows (16-byte values) into two fresh
    /// stores of `backend`: one behind a [`WindowStore`], one with `key | start` keys.
    ///
    /// # Errors
    /// Any failure of the stores.
    pub fn new(backend: &str, sizes: WindowSizes) -> Result<FetchSetup> {
        let segmented = open(backend)?;
        let config = WindowStoreConfig::new(sizes.windows * MINUTE).with_segment_interval(SEGMENT);
        let store = WindowStore::open(Arc::clone(&segmented.store), config)?;
        let raw = open(backend)?;
        let value = [7_u8; 16];
        for w in 0..sizes.windows {
            let mut batch = WriteBatch::new();
            for k in 0..sizes.keys {
                let _ = store.put(&key(k), &value, w * MINUTE)?;
                batch.put(raw_key(&key(k), w * MINUTE), value.to_vec());
            }
            raw.store.write(batch)?;
        }
        Ok(FetchSetup {
            store,
            raw,
            probe: key(sizes.keys / 2),
            windows: sizes.windows,
            _segmented: segmented,
        })
    }

    /// The windows one fetch returns.
    pub fn windows(&self) -> u64 {
        self.windows as u64
    }

    /// Fetches every window of the probed key through the window store.
    ///
    /// # Errors
    /// Any failure of the store, and [`Error::Corruption`] when it returns another number of
    /// windows than were written.
    pub fn fetch(&self) -> Result<()> {
        let mut found = 0;
        for window in self.store.fetch(&self.probe, 0, i64::MAX)? {
            black_box(window?);
            found += 1;
        }
        self.expect(found, "fetch")
    }

    /// Reads the same entries as one range of the plain store.
    ///
    /// # Errors
    /// As [`FetchSetup::fetch`].
    pub fn raw_range(&self) -> Result<()> {
        let (from, to) = (raw_key(&self.probe, 0), raw_key(&self.probe, i64::MAX));
        let mut found = 0;
        let range = self
            .raw
            .store
            .range(Bound::Included(&from), Bound::Included(&to))?;
        for entry in range {
            black_box(entry?);
            found += 1;
        }
        self.expect(found, "range")
    }

    fn expect(&self, found: i64, what: &str) -> Result<()> {
        if found == self.windows {
            Ok(())
        } else {
            Err(Error::Corruption(format!(
                "{what} returned {found} windows of {}",
                self.windows
            )))
        }
    }
}

/// A window store kept at [`SEGMENTS`] live segments of records.
#[derive(Debug)]
pub struct Segmented {
    store: WindowStore,
    next_segment: i64,
    per_segment: i64,
    _opened: Opened,
}

impl Segmented {
    /// A window store over a fresh store of `backend`, filled with [`SEGMENTS`] segments of
    /// `per_segment` records each.
    ///
    /// # Errors
    /// Any failure of the store.
    pub fn new(backend: &str, per_segment: i64) -> Result<Segmented> {
        let opened = open(backend)?;
        let config = WindowStoreConfig::new(SEGMENTS * SEGMENT).with_segment_interval(SEGMENT);
        let store = WindowStore::open(Arc::clone(&opened.store), config)?;
        let mut this = Segmented {
            store,
            next_segment: 0,
            per_segment,
            _opened: opened,
        };
        for _ in 0..SEGMENTS {
            this.fill()?;
        }
        Ok(this)
    }

    /// The window store.
    pub fn window_store(&self) -> &WindowStore {
        &self.store
    }

    /// Writes a segment's records at one-minute starts, without moving the stream time past
    /// the segment (the last put is its first minute).
    ///
    /// # Errors
    /// Any failure of the store.
    pub fn fill(&mut self) -> Result<()> {
        let base = self.next_segment * SEGMENT;
        for n in (0..self.per_segment).rev() {
            let _ = self.store.put(&key(n), b"v", base + (n % 10) * MINUTE)?;
        }
        self.next_segment += 1;
        Ok(())
    }

    /// Moves the stream time one segment on, which expires the oldest segment; the time the
    /// put took. Call [`Segmented::fill`] after it to keep the segments live.
    ///
    /// # Errors
    /// Any failure of the store.
    pub fn expire_one(&self) -> Result<Duration> {
        let start = Instant::now();
        // The last millisecond of the next segment moves the stream time one segment on.
        let tick = self.next_segment * SEGMENT + SEGMENT - 1;
        let _ = black_box(self.store.put(b"tick", b"", tick)?);
        Ok(start.elapsed())
    }
}

/// The records of [`Segmented`] as `key | start` keys without segments: expiry scans them all.
#[derive(Debug)]
pub struct Unsegmented {
    opened: Opened,
    next_segment: i64,
    per_segment: i64,
}

impl Unsegmented {
    /// A fresh store of `backend` with [`SEGMENTS`] segments' worth of records.
    ///
    /// # Errors
    /// Any failure of the store.
    pub fn new(backend: &str, per_segment: i64) -> Result<Unsegmented> {
        let mut this = Unsegmented {
            opened: open(backend)?,
            next_segment: 0,
            per_segment,
        };
        for _ in 0..SEGMENTS {
            this.fill()?;
        }
        Ok(this)
    }

    /// Writes the next segment's records as one batch.
    ///
    /// # Errors
    /// Any failure of the store.
    pub fn fill(&mut self) -> Result<()> {
        let base = self.next_segment * SEGMENT;
        let mut batch = WriteBatch::new();
        for n in 0..self.per_segment {
            batch.put(raw_key(&key(n), base + (n % 10) * MINUTE), b"v".to_vec());
        }
        self.opened.store.write(batch)?;
        self.next_segment += 1;
        Ok(())
    }

    /// Deletes, as the window store's tick would, every record of the oldest segment found by
    /// a scan of them all; the time taken.
    ///
    /// # Errors
    /// Any failure of the store.
    pub fn expire_one(&self) -> Result<Duration> {
        let start = Instant::now();
        let cutoff = (self.next_segment - SEGMENTS + 1) * SEGMENT;
        let mut batch = WriteBatch::new();
        for entry in self
            .opened
            .store
            .range(Bound::Unbounded, Bound::Unbounded)?
        {
            let (raw, _) = entry?;
            if raw_start(&raw)? < cutoff {
                batch.delete(raw);
            }
        }
        self.opened.store.write(batch)?;
        Ok(start.elapsed())
    }
}
