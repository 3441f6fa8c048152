//! Keys, values and key choosers: the data every workload uses, generated from a fixed seed.
//!
//! Keys are 24 bytes by default, `user` followed by 20 decimal digits, so byte order equals
//! numeric order and a range scan from a key returns its numeric successors. Other lengths
//! (`compare --key-size`, [`push_key`]) keep the shape: `user` and as many digits as fill the
//! key, zero-padded. Record `i` is stored at the
//! even number `2 * i`; the odd number `2 * i + 1` is a key that lies between two stored keys
//! and is never written, which makes `get_miss` probe the middle of the key space instead of
//! falling off either end (where an engine could answer from its bounds alone).

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// The default length of every key, in bytes.
pub const KEY_LEN: usize = 24;
/// The shortest key length the workloads take: `user` and 12 digits, room for record numbers
/// up to 10^12 (twice the record index, see the module docs), far past any run's.
pub const MIN_KEY_LEN: usize = 16;
/// The longest key length the workloads take, in bytes.
pub const MAX_KEY_LEN: usize = 4096;
/// The value length of the load, put, get and range workloads, in bytes.
pub const VALUE_LEN: usize = 150;
/// The value length of the YCSB workloads, in bytes.
pub const YCSB_VALUE_LEN: usize = 1000;
/// The longest value the workloads write (`compare --value-size`), in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 20;
/// The seed of every random choice, so two runs issue the same operations.
pub const SEED: u64 = 0x5747_4154_4553_544f;
/// The zipfian constant of the YCSB workloads (YCSB's default).
pub const ZIPF_CONSTANT: f64 = 0.99;

/// A key of the default length: `user` and 20 decimal digits.
pub type Key = [u8; KEY_LEN];

const KEY_PREFIX: &[u8; 4] = b"user";
/// Random bytes that values are cut from. Longer than the longest value, so each record gets
/// a different slice without generating bytes on the measured path.
const POOL_LEN: usize = 64 * 1024;
/// A large prime: multiplying a zipfian rank by it modulo the record count is a bijection
/// (for counts below it) that scatters the hot keys over the key space, as YCSB's "scrambled
/// zipfian" does. Without it the hottest keys would share a few blocks of every engine.
const SCRAMBLE_PRIME: u128 = 2_654_435_761;

/// The key of record `index`.
pub fn key(index: u64) -> Key {
    numbered_key(index.saturating_mul(2))
}

/// A key that is never written, between the keys of records `index` and `index + 1`.
pub fn miss_key(index: u64) -> Key {
    numbered_key(index.saturating_mul(2).saturating_add(1))
}

fn numbered_key(number: u64) -> Key {
    let mut out = [b'0'; KEY_LEN];
    write_numbered(&mut out, number);
    out
}

/// Appends the `len`-byte key of record `index` to `out`; at [`KEY_LEN`] it is [`key`].
/// Lengths below [`MIN_KEY_LEN`] are taken as it, above [`MAX_KEY_LEN`] as that.
pub fn push_key(out: &mut Vec<u8>, index: u64, len: usize) {
    push_numbered(out, index.saturating_mul(2), len);
}

/// Appends the `len`-byte key that lies between records `index` and `index + 1` and is never
/// written; at [`KEY_LEN`] it is [`miss_key`].
pub fn push_miss_key(out: &mut Vec<u8>, index: u64, len: usize) {
    push_numbered(out, index.saturating_mul(2).saturating_add(1), len);
}

fn push_numbered(out: &mut Vec<u8>, number: u64, len: usize) {
    let start = out.len();
    out.resize(start + len.clamp(MIN_KEY_LEN, MAX_KEY_LEN), b'0');
    write_numbered(&mut out[start..], number);
}

/// Writes `user` and `number` in decimal, zero-padded to fill `out` (at least 4 + 20 bytes
/// hold every `u64`; shorter keys keep the low digits, see [`MIN_KEY_LEN`]).
fn write_numbered(out: &mut [u8], mut number: u64) {
    out[..KEY_PREFIX.len()].copy_from_slice(KEY_PREFIX);
    for slot in out[KEY_PREFIX.len()..].iter_mut().rev() {
        // `number % 10` is below 10, so the cast cannot truncate.
        *slot = b'0' + (number % 10) as u8;
        number /= 10;
    }
}

/// The source of value bytes: a seeded pool that values are sliced from.
#[derive(Debug, Clone)]
pub struct Values {
    pool: Vec<u8>,
}

impl Default for Values {
    fn default() -> Self {
        Values::new()
    }
}

impl Values {
    /// A pool filled from [`SEED`], for values up to [`YCSB_VALUE_LEN`] bytes.
    pub fn new() -> Self {
        Values::with_max_len(YCSB_VALUE_LEN)
    }

    /// A pool filled from [`SEED`], for values up to `max_len` bytes (at least
    /// [`YCSB_VALUE_LEN`], at most [`MAX_VALUE_LEN`]). The first bytes are those of
    /// [`Values::new`], so a value fits either pool the same.
    pub fn with_max_len(max_len: usize) -> Self {
        let max_len = max_len.clamp(YCSB_VALUE_LEN, MAX_VALUE_LEN);
        let mut pool = vec![0; POOL_LEN + max_len];
        SmallRng::seed_from_u64(SEED ^ 0xff).fill_bytes(&mut pool);
        Values { pool }
    }

    /// The `len`-byte value of version `version` of a record. Different versions give different
    /// bytes, so an update really changes the stored value. `len` is at most the pool's
    /// maximum ([`YCSB_VALUE_LEN`] for [`Values::new`]); longer requests are cut to it.
    pub fn value(&self, version: u64, len: usize) -> &[u8] {
        let len = len.min(self.pool.len() - POOL_LEN);
        // 7919 is prime, so consecutive versions start far apart in the pool.
        let start = (version.wrapping_mul(7919) % POOL_LEN as u64) as usize;
        &self.pool[start..start + len]
    }
}

/// How a workload picks the record an operation touches.
#[derive(Debug, Clone)]
pub enum Chooser {
    /// Every one of `records` records equally likely.
    Uniform {
        /// The number of records.
        records: u64,
    },
    /// Zipfian with constant [`ZIPF_CONSTANT`] over `records` records, ranks scrambled over the
    /// key space.
    Zipfian {
        /// The number of records.
        records: u64,
        /// The rank distribution, 1 to `records`.
        zipf: Zipf<f64>,
    },
}

impl Chooser {
    /// A uniform chooser over `records` records (at least one).
    pub fn uniform(records: u64) -> Self {
        Chooser::Uniform {
            records: records.max(1),
        }
    }

    /// A scrambled-zipfian chooser over `records` records (at least one).
    pub fn zipfian(records: u64) -> Self {
        let records = records.max(1);
        // `records >= 1` and the constant is positive, the two conditions `Zipf::new` checks.
        let zipf = Zipf::new(records as f64, ZIPF_CONSTANT).expect("n >= 1 and s >= 0 hold");
        Chooser::Zipfian { records, zipf }
    }

    /// The next record index, below the chooser's record count.
    pub fn next(&self, rng: &mut SmallRng) -> u64 {
        match self {
            Chooser::Uniform { records } => rng.random_range(0..*records),
            Chooser::Zipfian { records, zipf } => {
                // Ranks are 1..=records as floats; the cast floors them.
                let rank = (zipf.sample(rng) as u64).clamp(1, *records) - 1;
                let scrambled = (u128::from(rank) * SCRAMBLE_PRIME) % u128::from(*records);
                // The remainder is below `records`, a u64, so it fits.
                scrambled as u64
            }
        }
    }
}

/// The seeded generator of one workload run.
pub fn rng() -> SmallRng {
    SmallRng::seed_from_u64(SEED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically_and_misses_interleave() {
        assert_eq!(&key(3), b"user00000000000000000006");
        assert!(key(9) < miss_key(9) && miss_key(9) < key(10));
        assert_eq!(key(u64::MAX).len(), KEY_LEN);
    }

    #[test]
    fn keys_of_any_length_keep_the_order_and_the_default_bytes() {
        let of = |index: u64, len: usize| {
            let mut out = Vec::new();
            push_key(&mut out, index, len);
            out
        };
        assert_eq!(of(3, KEY_LEN), key(3).to_vec());
        let mut miss = Vec::new();
        push_miss_key(&mut miss, 3, KEY_LEN);
        assert_eq!(miss, miss_key(3).to_vec());
        for len in [MIN_KEY_LEN, 100, MAX_KEY_LEN] {
            assert_eq!(of(7, len).len(), len);
            assert!(
                of(9, len) < of(10, len) && of(10, len) < of(11, len),
                "{len}"
            );
        }
        assert_eq!(of(1, 1).len(), MIN_KEY_LEN);
        assert_eq!(of(1, usize::MAX).len(), MAX_KEY_LEN);
    }

    #[test]
    fn values_differ_by_version() {
        let values = Values::new();
        assert_eq!(values.value(1, VALUE_LEN).len(), VALUE_LEN);
        assert_ne!(values.value(1, VALUE_LEN), values.value(2, VALUE_LEN));
        assert_eq!(values.value(1, 5000).len(), YCSB_VALUE_LEN);
    }

    #[test]
    fn zipfian_stays_in_range_and_is_skewed() {
        let chooser = Chooser::zipfian(1000);
        let mut rng = rng();
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[chooser.next(&mut rng) as usize] += 1;
        }
        let hottest = counts.iter().max().copied().unwrap_or(0);
        // Uniform would give about 100 per key; the top zipfian rank gets far more.
        assert!(hottest > 5_000, "hottest key drew {hottest}");
        assert!(counts[0] == hottest, "rank 1 maps to record 0");
    }
}
