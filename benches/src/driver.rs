//! Issues a workload's operations, one step at a time, against any [`Target`].
//!
//! The caller owns the clock: criterion times whole iterations, the CLI times each step into
//! a latency histogram. Choosing the key (a seeded RNG draw, a zipfian sample) happens inside
//! the step and so is measured too; it costs tens of nanoseconds, the same on every engine.

use rand::Rng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use store_api::{Error, Result};

use crate::data::{self, Chooser, Key, Values};
use crate::target::Target;
use crate::workload::{LOAD_BATCH, Scale, Workload};

/// YCSB E scans between 1 and this many keys.
const YCSB_MAX_SCAN: usize = 100;

/// The state of one run of one workload: its RNG, key chooser and counters.
#[derive(Debug)]
pub struct Driver {
    workload: Workload,
    chooser: Chooser,
    rng: SmallRng,
    values: Values,
    /// The length of every value written.
    value_len: usize,
    /// Bumped on every write so each write stores different bytes.
    version: u64,
    /// Load workloads: records loaded so far. YCSB E: records inserted so far.
    done: u64,
    /// Load workloads: how many records to load.
    total: u64,
    /// `load_random`: the order records are loaded in.
    order: Vec<u64>,
}

impl Driver {
    /// A driver at the start of `workload` at `scale`, seeded with [`data::SEED`]. For
    /// `load_random` this shuffles the record order, which takes a moment at full scale.
    pub fn new(workload: Workload, scale: Scale) -> Driver {
        let space = workload.key_space(scale);
        let chooser = if workload.is_ycsb() {
            Chooser::zipfian(space)
        } else {
            Chooser::uniform(space)
        };
        let mut rng = data::rng();
        let order = if workload == Workload::LoadRandom {
            let mut order: Vec<u64> = (0..scale.records).collect();
            order.shuffle(&mut rng);
            order
        } else {
            Vec::new()
        };
        Driver {
            workload,
            chooser,
            rng,
            values: Values::with_max_len(workload.value_len_at(scale)),
            value_len: workload.value_len_at(scale),
            version: 0,
            done: 0,
            total: scale.records,
            order,
        }
    }

    /// The workload this driver runs.
    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// Runs one operation: a batch for the load workloads, a single operation (a get, put,
    /// scan or read-modify-write) for the others. Returns how many records it wrote or read
    /// as the unit of throughput (the batch size for loads, 1 otherwise), or `None` once a
    /// load workload has loaded every record; the other workloads never end.
    ///
    /// # Errors
    /// Any failure of the target, and [`Error::Corruption`] when a key the workload wrote
    /// is missing (a broken engine must not be timed as a fast one).
    pub fn step<T: Target + ?Sized>(&mut self, target: &T) -> Result<Option<u64>> {
        match self.workload {
            Workload::LoadSeq | Workload::LoadRandom => self.load_batch(target),
            Workload::PutRandom => {
                let index = self.chooser.next(&mut self.rng);
                self.put(target, index).map(|()| Some(1))
            }
            Workload::PutDurable => {
                let index = self.chooser.next(&mut self.rng);
                self.put(target, index)?;
                target.flush().map(|()| Some(1))
            }
            Workload::GetHit => self.read(target).map(|()| Some(1)),
            Workload::GetMiss => {
                let index = self.chooser.next(&mut self.rng);
                match target.get(&data::miss_key(index))? {
                    None => Ok(Some(1)),
                    Some(_) => Err(Error::Corruption(format!("get_miss found record {index}"))),
                }
            }
            Workload::Range10 => self.range(target, 10),
            Workload::Range100 => self.range(target, 100),
            _ => self.ycsb(target).map(|()| Some(1)),
        }
    }

    fn ycsb<T: Target + ?Sized>(&mut self, target: &T) -> Result<()> {
        let roll: f64 = self.rng.random();
        match self.workload {
            Workload::YcsbA | Workload::YcsbB => {
                let read_share = if self.workload == Workload::YcsbA {
                    0.5
                } else {
                    0.95
                };
                if roll < read_share {
                    self.read(target)
                } else {
                    let index = self.chooser.next(&mut self.rng);
                    self.put(target, index)
                }
            }
            Workload::YcsbE if roll >= 0.95 => {
                let index = self.chooser_space() + self.done;
                self.done += 1;
                self.put(target, index)
            }
            Workload::YcsbE => {
                let len = self.rng.random_range(1..=YCSB_MAX_SCAN);
                let index = self.chooser.next(&mut self.rng);
                target.scan(&data::key(index), len).map(drop)
            }
            Workload::YcsbF if roll >= 0.5 => {
                let index = self.chooser.next(&mut self.rng);
                self.expect_present(target, index)?;
                self.put(target, index)
            }
            _ => self.read(target),
        }
    }

    fn chooser_space(&self) -> u64 {
        match &self.chooser {
            Chooser::Uniform { records } | Chooser::Zipfian { records, .. } => *records,
        }
    }

    fn read<T: Target + ?Sized>(&mut self, target: &T) -> Result<()> {
        let index = self.chooser.next(&mut self.rng);
        self.expect_present(target, index)
    }

    fn expect_present<T: Target + ?Sized>(&self, target: &T, index: u64) -> Result<()> {
        match target.get(&data::key(index))? {
            Some(_) => Ok(()),
            None => Err(Error::Corruption(format!(
                "{}: record {index} is missing",
                self.workload
            ))),
        }
    }

    fn put<T: Target + ?Sized>(&mut self, target: &T, index: u64) -> Result<()> {
        self.version += 1;
        let value = self.values.value(self.version, self.value_len);
        target.put(&data::key(index), value)
    }

    fn range<T: Target + ?Sized>(&mut self, target: &T, len: usize) -> Result<Option<u64>> {
        let index = self.chooser.next(&mut self.rng);
        // Start early enough that a full scan of `len` keys exists; tiny scales just read
        // fewer keys.
        let start = index.min(self.chooser_space().saturating_sub(len as u64));
        let read = target.scan(&data::key(start), len)?;
        Ok(Some(read as u64))
    }

    fn load_batch<T: Target + ?Sized>(&mut self, target: &T) -> Result<Option<u64>> {
        if self.done >= self.total {
            return Ok(None);
        }
        let end = (self.done + LOAD_BATCH as u64).min(self.total);
        let value_len = self.value_len;
        let entries: Vec<(Key, &[u8])> = (self.done..end)
            .map(|position| {
                let index = self
                    .order
                    .get(position as usize)
                    .copied()
                    .unwrap_or(position);
                (data::key(index), self.values.value(index, value_len))
            })
            .collect();
        target.write_batch(&entries)?;
        let written = end - self.done;
        self.done = end;
        Ok(Some(written))
    }
}

/// Loads records `0..records` with `value_len`-byte values in ascending batches of
/// [`LOAD_BATCH`], then flushes: the untimed setup of the read and YCSB workloads.
/// `progress` is called with the number of records loaded so far after every batch.
///
/// # Errors
/// Any failure of the target.
pub fn preload<T: Target + ?Sized>(
    target: &T,
    records: u64,
    value_len: usize,
    mut progress: impl FnMut(u64),
) -> Result<()> {
    let values = Values::with_max_len(value_len);
    let mut start = 0;
    while start < records {
        let end = (start + LOAD_BATCH as u64).min(records);
        let entries: Vec<(Key, &[u8])> = (start..end)
            .map(|index| (data::key(index), values.value(index, value_len)))
            .collect();
        target.write_batch(&entries)?;
        start = end;
        progress(start);
    }
    target.flush()
}

/// Preloads what `workload` needs at `scale` (nothing for loads and puts).
///
/// # Errors
/// Any failure of the target.
pub fn prepare<T: Target + ?Sized>(
    target: &T,
    workload: Workload,
    scale: Scale,
    progress: impl FnMut(u64),
) -> Result<()> {
    preload(
        target,
        workload.preload(scale),
        workload.value_len_at(scale),
        progress,
    )
}
