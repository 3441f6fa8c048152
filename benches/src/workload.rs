//! The workloads, by name, and the scale they run at.

use std::fmt;
use std::str::FromStr;

use crate::data::{KEY_LEN, MAX_KEY_LEN, MIN_KEY_LEN, VALUE_LEN, YCSB_VALUE_LEN};

/// Records loaded by the load workloads and preloaded for gets and ranges at full scale.
pub const FULL_RECORDS: u64 = 1_000_000;
/// Records preloaded for the YCSB workloads at full scale.
pub const FULL_YCSB_RECORDS: u64 = 500_000;
/// Records written by one batch of the load workloads.
pub const LOAD_BATCH: usize = 1000;

/// How many records a run works over. [`Scale::FULL`] is the specified size; smaller scales
/// keep the same shape for quick runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Records loaded by `load_seq`/`load_random`, preloaded for gets and ranges, and the key
    /// space of the put workloads.
    pub records: u64,
    /// Records preloaded for the YCSB workloads, the key space of their zipfian chooser.
    pub ycsb_records: u64,
    /// Bytes per value of every workload; `None` for each workload's own
    /// ([`Workload::value_len`]).
    pub value_len: Option<usize>,
    /// Bytes per key, [`KEY_LEN`] unless set (see [`crate::data::push_key`]).
    pub key_len: usize,
}

impl Scale {
    /// 1M records, 500k for YCSB.
    pub const FULL: Scale = Scale {
        records: FULL_RECORDS,
        ycsb_records: FULL_YCSB_RECORDS,
        value_len: None,
        key_len: KEY_LEN,
    };

    /// `records` records, half as many for YCSB (as at full scale); at least one of each.
    pub fn with_records(records: u64) -> Scale {
        let records = records.max(1);
        Scale {
            records,
            ycsb_records: (records / 2).max(1),
            value_len: None,
            key_len: KEY_LEN,
        }
    }

    /// The same scale with every key `len` bytes long, kept within
    /// [`MIN_KEY_LEN`]..=[`MAX_KEY_LEN`].
    pub fn with_key_len(mut self, len: usize) -> Scale {
        self.key_len = len.clamp(MIN_KEY_LEN, MAX_KEY_LEN);
        self
    }

    /// The same scale with every value `len` bytes long, cut to
    /// [`MAX_VALUE_LEN`](crate::data::MAX_VALUE_LEN).
    pub fn with_value_len(mut self, len: usize) -> Scale {
        self.value_len = Some(len.min(crate::data::MAX_VALUE_LEN));
        self
    }
}

/// One workload, issued by one thread or by several against one store (see
/// [`Driver::shard`](crate::Driver::shard)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// Loads `records` records in ascending key order, in batches of [`LOAD_BATCH`].
    LoadSeq,
    /// Loads `records` records in a seeded random order, in batches of [`LOAD_BATCH`].
    LoadRandom,
    /// Single puts of uniformly chosen keys, never flushed.
    PutRandom,
    /// One put then one `flush`, repeated.
    PutDurable,
    /// Gets of uniformly chosen present keys.
    GetHit,
    /// Gets of uniformly chosen absent keys that lie between present ones.
    GetMiss,
    /// Scans of 10 keys from a uniformly chosen key.
    Range10,
    /// Scans of 100 keys from a uniformly chosen key.
    Range100,
    /// YCSB A: 50% reads, 50% updates, zipfian.
    YcsbA,
    /// YCSB B: 95% reads, 5% updates, zipfian.
    YcsbB,
    /// YCSB C: reads only, zipfian.
    YcsbC,
    /// YCSB E: 95% scans of 1 to 100 keys from a zipfian key, 5% inserts of new keys.
    YcsbE,
    /// YCSB F: 50% reads, 50% read-modify-writes, zipfian.
    YcsbF,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 13] = [
        Workload::LoadSeq,
        Workload::LoadRandom,
        Workload::PutRandom,
        Workload::PutDurable,
        Workload::GetHit,
        Workload::GetMiss,
        Workload::Range10,
        Workload::Range100,
        Workload::YcsbA,
        Workload::YcsbB,
        Workload::YcsbC,
        Workload::YcsbE,
        Workload::YcsbF,
    ];

    /// The workload's name, as the CLI and the bench groups spell it.
    pub fn name(self) -> &'static str {
        match self {
            Workload::LoadSeq => "load_seq",
            Workload::LoadRandom => "load_random",
            Workload::PutRandom => "put_random",
            Workload::PutDurable => "put_durable",
            Workload::GetHit => "get_hit",
            Workload::GetMiss => "get_miss",
            Workload::Range10 => "range_10",
            Workload::Range100 => "range_100",
            Workload::YcsbA => "ycsb_a",
            Workload::YcsbB => "ycsb_b",
            Workload::YcsbC => "ycsb_c",
            Workload::YcsbE => "ycsb_e",
            Workload::YcsbF => "ycsb_f",
        }
    }

    /// A one-line description, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Workload::LoadSeq => "bulk load in key order, batches of 1000",
            Workload::LoadRandom => "bulk load in random order, batches of 1000",
            Workload::PutRandom => "single puts of random keys, no sync",
            Workload::PutDurable => "put then flush",
            Workload::GetHit => "gets of present keys, uniform",
            Workload::GetMiss => "gets of absent keys, uniform",
            Workload::Range10 => "scans of 10 keys",
            Workload::Range100 => "scans of 100 keys",
            Workload::YcsbA => "YCSB A: 50% reads, 50% updates, zipfian",
            Workload::YcsbB => "YCSB B: 95% reads, 5% updates, zipfian",
            Workload::YcsbC => "YCSB C: reads only, zipfian",
            Workload::YcsbE => "YCSB E: 95% scans of 1-100 keys, 5% inserts",
            Workload::YcsbF => "YCSB F: 50% reads, 50% read-modify-writes",
        }
    }

    /// True for the YCSB workloads.
    pub fn is_ycsb(self) -> bool {
        matches!(
            self,
            Workload::YcsbA | Workload::YcsbB | Workload::YcsbC | Workload::YcsbE | Workload::YcsbF
        )
    }

    /// True for the workloads that end once every record is loaded; the others run until
    /// stopped.
    pub fn is_load(self) -> bool {
        matches!(self, Workload::LoadSeq | Workload::LoadRandom)
    }

    /// The length of the values the workload writes and preloads.
    pub fn value_len(self) -> usize {
        if self.is_ycsb() {
            YCSB_VALUE_LEN
        } else {
            VALUE_LEN
        }
    }

    /// The value length of this workload at `scale`: the scale's when it sets one, else
    /// [`value_len`](Workload::value_len).
    pub fn value_len_at(self, scale: Scale) -> usize {
        scale.value_len.unwrap_or_else(|| self.value_len())
    }

    /// How many records are loaded, untimed, before the workload starts.
    pub fn preload(self, scale: Scale) -> u64 {
        match self {
            Workload::LoadSeq
            | Workload::LoadRandom
            | Workload::PutRandom
            | Workload::PutDurable => 0,
            Workload::GetHit | Workload::GetMiss | Workload::Range10 | Workload::Range100 => {
                scale.records
            }
            _ => scale.ycsb_records,
        }
    }

    /// The key space operations choose from: `records` for the basic workloads,
    /// `ycsb_records` for YCSB.
    pub fn key_space(self, scale: Scale) -> u64 {
        if self.is_ycsb() {
            scale.ycsb_records
        } else {
            scale.records
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing an unknown workload name; it lists the known ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWorkload(pub String);

impl fmt::Display for UnknownWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        write!(
            f,
            "unknown workload {:?}; known workloads: {}",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownWorkload {}

impl FromStr for Workload {
    type Err = UnknownWorkload;

    /// Accepts the name with `-` or `_` (`ycsb-a`, `ycsb_a`), in any case.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let wanted = name.trim().to_ascii_lowercase().replace('-', "_");
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == wanted)
            .ok_or_else(|| UnknownWorkload(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for workload in Workload::ALL {
            assert_eq!(workload.name().parse::<Workload>(), Ok(workload));
        }
        assert_eq!("YCSB-A".parse::<Workload>(), Ok(Workload::YcsbA));
        let err = "ycsb_z".parse::<Workload>().unwrap_err().to_string();
        assert!(err.contains("ycsb_z") && err.contains("load_seq"), "{err}");
    }

    #[test]
    fn small_scales_keep_the_shape() {
        assert_eq!(Scale::with_records(0), Scale::with_records(1));
        assert_eq!(Scale::with_records(1000).ycsb_records, 500);
        assert_eq!(Workload::YcsbA.preload(Scale::FULL), FULL_YCSB_RECORDS);
        assert_eq!(Workload::PutRandom.preload(Scale::FULL), 0);
    }
}
