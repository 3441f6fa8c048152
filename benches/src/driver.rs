//! Issues a workload's operations, one step at a time, against any [`Target`].
//!
//! The caller owns the clock: criterion times whole iterations, the CLI times each step into
//! a latency histogram. Choosing the key (a seeded RNG draw, a zipfian sample) happens inside
//! the step and so is measured too; it costs tens of nanoseconds, the same on every engine.
//!
//! Several threads issue one workload together through one [`Driver::shard`] each: the loads
//! split their batches between the shards, so together they write every record once, and the
//! other workloads draw their keys from a seed of their own per shard.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use store_api::{Error, Result};

use crate::data::{self, Chooser, Values};
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
    /// The length of every key.
    key_len: usize,
    /// The key of the operation under way, rewritten in place by each step.
    key: Vec<u8>,
    /// The keys of a load batch, back to back.
    batch_keys: Vec<u8>,
    /// This driver's shard of a run by `shards` threads, from 0.
    shard: u64,
    /// How many drivers issue the workload together.
    shards: u64,
    /// Bumped on every write so each write stores different bytes.
    version: u64,
    /// Load workloads: where this shard's next batch starts. YCSB E: records this shard
    /// inserted so far.
    done: u64,
    /// Load workloads: how many records to load.
    total: u64,
    /// `load_random`: the order records are loaded in, shared by the shards of a run.
    order: Arc<[u64]>,
}

impl Driver {
    /// A driver at the start of `workload` at `scale`, seeded with [`data::SEED`]. For
    /// `load_random` this shuffles the record order, which takes a moment at full scale.
    pub fn new(workload: Workload, scale: Scale) -> Driver {
        Driver::shard(workload, scale, 0, 1)
    }

    /// The driver of shard `shard` (from 0) of `shards` drivers that issue `workload`
    /// together, one per thread, against one store. Shard 0 of 1 is [`Driver::new`].
    ///
    /// The loads give the shards every `shards`-th batch of the same record order, so together
    /// they write each record once, with the value one driver alone would write. The other
    /// workloads seed each shard's generator differently (shard 0 with [`data::SEED`]), and
    /// YCSB E's inserts of new keys never collide between shards. `shards` below 1 is taken
    /// as 1 and `shard` is taken modulo `shards`.
    pub fn shard(workload: Workload, scale: Scale, shard: usize, shards: usize) -> Driver {
        let (order, rng) = order_and_rng(workload, scale);
        Driver::build(workload, scale, (shard, shards), order, rng)
    }

    /// The drivers of every shard of a run by `shards` threads, as [`Driver::shard`] makes
    /// them, sharing one record order (of `load_random`, 8 bytes a record).
    pub fn shards(workload: Workload, scale: Scale, shards: usize) -> Vec<Driver> {
        let (order, rng) = order_and_rng(workload, scale);
        (0..shards.max(1))
            .map(|shard| {
                let (order, rng) = (Arc::clone(&order), rng.clone());
                Driver::build(workload, scale, (shard, shards), order, rng)
            })
            .collect()
    }

    /// Shard `shard` of `shards`, with the record order and the generator that drew it.
    fn build(
        workload: Workload,
        scale: Scale,
        (shard, shards): (usize, usize),
        order: Arc<[u64]>,
        mut rng: SmallRng,
    ) -> Driver {
        let shards = shards.max(1) as u64;
        let shard = shard as u64 % shards;
        let space = workload.key_space(scale);
        let chooser = if workload.is_ycsb() {
            Chooser::zipfian(space)
        } else {
            Chooser::uniform(space)
        };
        if shard > 0 {
            // Any odd multiplier spreads the shards' seeds apart; this one is 2^64 / phi.
            rng = SmallRng::seed_from_u64(data::SEED ^ shard.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        let first_batch = if workload.is_load() {
            shard * LOAD_BATCH as u64
        } else {
            0
        };
        Driver {
            workload,
            chooser,
            rng,
            values: Values::with_max_len(workload.value_len_at(scale)),
            value_len: workload.value_len_at(scale),
            key_len: scale.key_len,
            key: Vec::with_capacity(scale.key_len),
            batch_keys: Vec::new(),
            shard,
            shards,
            version: 0,
            done: first_batch,
            total: scale.records,
            order,
        }
    }

    /// The key of record `index`, in the driver's key buffer.
    fn key(&mut self, index: u64) -> &[u8] {
        self.key.clear();
        data::push_key(&mut self.key, index, self.key_len);
        &self.key
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
                self.key.clear();
                data::push_miss_key(&mut self.key, index, self.key_len);
                match target.get(&self.key)? {
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
                let index = self.chooser_space() + self.done * self.shards + self.shard;
                self.done += 1;
                self.put(target, index)
            }
            Workload::YcsbE => {
                let len = self.rng.random_range(1..=YCSB_MAX_SCAN);
                let index = self.chooser.next(&mut self.rng);
                target.scan(self.key(index), len).map(drop)
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

    fn expect_present<T: Target + ?Sized>(&mut self, target: &T, index: u64) -> Result<()> {
        match target.get(self.key(index))? {
            Some(_) => Ok(()),
            None => Err(Error::Corruption(format!(
                "{}: record {index} is missing",
                self.workload
            ))),
        }
    }

    fn put<T: Target + ?Sized>(&mut self, target: &T, index: u64) -> Result<()> {
        self.version += 1;
        self.key.clear();
        data::push_key(&mut self.key, index, self.key_len);
        let value = self.values.value(self.version, self.value_len);
        target.put(&self.key, value)
    }

    fn range<T: Target + ?Sized>(&mut self, target: &T, len: usize) -> Result<Option<u64>> {
        let index = self.chooser.next(&mut self.rng);
        // Start early enough that a full scan of `len` keys exists; tiny scales just read
        // fewer keys.
        let start = index.min(self.chooser_space().saturating_sub(len as u64));
        let read = target.scan(self.key(start), len)?;
        Ok(Some(read as u64))
    }

    fn load_batch<T: Target + ?Sized>(&mut self, target: &T) -> Result<Option<u64>> {
        if self.done >= self.total {
            return Ok(None);
        }
        let end = (self.done + LOAD_BATCH as u64).min(self.total);
        let indexes = (self.done..end).map(|position| {
            self.order
                .get(position as usize)
                .copied()
                .unwrap_or(position)
        });
        write_records(
            target,
            &mut self.batch_keys,
            indexes,
            (self.key_len, self.value_len),
            &self.values,
        )?;
        let written = end - self.done;
        // The batches between are the other shards'.
        self.done = self.done.saturating_add(self.shards * LOAD_BATCH as u64);
        Ok(Some(written))
    }
}

/// `load_random`'s record order (empty for the other workloads), and the seeded generator
/// that drew it, to go on from.
fn order_and_rng(workload: Workload, scale: Scale) -> (Arc<[u64]>, SmallRng) {
    let mut rng = data::rng();
    let order = if workload == Workload::LoadRandom {
        let mut order: Vec<u64> = (0..scale.records).collect();
        order.shuffle(&mut rng);
        order
    } else {
        Vec::new()
    };
    (order.into(), rng)
}

/// Writes the records `indexes` as one batch: `lens` are the key and value lengths, `keys` a
/// buffer for the keys. Record `i`'s value is version `i` of [`Values`].
fn write_records<T: Target + ?Sized>(
    target: &T,
    keys: &mut Vec<u8>,
    indexes: impl Iterator<Item = u64> + Clone,
    (key_len, value_len): (usize, usize),
    values: &Values,
) -> Result<()> {
    keys.clear();
    for index in indexes.clone() {
        data::push_key(keys, index, key_len);
    }
    // `push_key` keeps lengths within the limits; the chunks must match what it wrote.
    let key_len = key_len.clamp(data::MIN_KEY_LEN, data::MAX_KEY_LEN);
    let entries: Vec<(&[u8], &[u8])> = keys
        .chunks_exact(key_len)
        .zip(indexes)
        .map(|(key, index)| (key, values.value(index, value_len)))
        .collect();
    target.write_batch(&entries)
}

/// Loads records `0..records` with [`KEY_LEN`](data::KEY_LEN)-byte keys and `value_len`-byte
/// values in ascending batches of [`LOAD_BATCH`], then flushes: the untimed setup of the read
/// and YCSB workloads. `progress` is called with the number of records loaded so far after
/// every batch.
///
/// # Errors
/// Any failure of the target.
pub fn preload<T: Target + ?Sized>(
    target: &T,
    records: u64,
    value_len: usize,
    progress: impl FnMut(u64),
) -> Result<()> {
    preload_records(target, records, (data::KEY_LEN, value_len), progress)
}

fn preload_records<T: Target + ?Sized>(
    target: &T,
    records: u64,
    lens: (usize, usize),
    mut progress: impl FnMut(u64),
) -> Result<()> {
    let values = Values::with_max_len(lens.1);
    let mut keys = Vec::new();
    let mut start = 0;
    while start < records {
        let end = (start + LOAD_BATCH as u64).min(records);
        write_records(target, &mut keys, start..end, lens, &values)?;
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
    preload_records(
        target,
        workload.preload(scale),
        (scale.key_len, workload.value_len_at(scale)),
        progress,
    )
}
