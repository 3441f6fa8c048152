//! Key -> partition: which input partition, and so which task, a key's records are in.
//!
//! The input's producer decides where a key goes, so a query must hash keys as that producer
//! did. Two hashes cover the usual producers:
//! - [`KeyPartitioner::Murmur2`]: Kafka's Java producer's default partitioner (and so Kafka
//!   Streams'), librdkafka's `murmur2_random` and `murmur2`:
//!   `(murmur2(key) & 0x7fffffff) % partitions`.
//! - [`KeyPartitioner::Crc32`]: librdkafka's own default, `consistent_random`:
//!   `crc32(key) % partitions`, where an empty key goes to a random partition.
//!
//! A producer with another partitioner (or one that names partitions itself) is queried by
//! partition: [`Queries::metadata_for_partition`](crate::Queries::metadata_for_partition).

use serde::{Deserialize, Serialize};

/// How the input's producers map a key to a partition (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyPartitioner {
    /// Kafka's Java default (and Kafka Streams'); librdkafka's `murmur2_random`. The default.
    #[default]
    Murmur2,
    /// librdkafka's default, `consistent_random` (CRC-32 of the key); an empty key has no
    /// partition of its own.
    Crc32,
}

impl KeyPartitioner {
    /// The partition of `key` among `partitions`, as the producer computes it; `None` when
    /// the producer places the key at random (an empty key under
    /// [`Crc32`](KeyPartitioner::Crc32)) or there are no partitions.
    pub fn partition(self, key: &[u8], partitions: u32) -> Option<u32> {
        if partitions == 0 {
            return None;
        }
        let hash = match self {
            KeyPartitioner::Murmur2 => murmur2(key) & 0x7fff_ffff,
            KeyPartitioner::Crc32 if key.is_empty() => return None,
            KeyPartitioner::Crc32 => crc32fast::hash(key),
        };
        Some(hash % partitions)
    }

    /// The name of the matching librdkafka `partitioner` setting.
    pub fn librdkafka_name(self) -> &'static str {
        match self {
            KeyPartitioner::Murmur2 => "murmur2_random",
            KeyPartitioner::Crc32 => "consistent_random",
        }
    }
}

/// Kafka's `Utils.murmur2`: MurmurHash2 with seed `0x9747b28c` over 4-byte little-endian
/// words, as Java's producer and librdkafka compute it (Java reads the result as an `i32`).
///
/// No crate is used: the one on crates.io that has it (`murmur2`) saw a single release, and
/// the function is these few lines, pinned by Kafka's own test vectors below.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    // Kafka hashes the length as an i32; a key is far below 2^31 bytes.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "Kafka truncates the same way"
    )]
    let mut h = SEED ^ (data.len() as u32);
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, &byte) in tail.iter().enumerate() {
            h ^= u32::from(byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `UtilsTest.testMurmur2` (clients/src/test/java/org/apache/kafka/common/utils).
    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, expected) in cases {
            assert_eq!(
                murmur2(key).cast_signed(),
                expected,
                "{}",
                String::from_utf8_lossy(key)
            );
        }
    }

    #[test]
    fn partitions_follow_the_producers_formulas() {
        // Java: Utils.toPositive(murmur2("foobar")) % n, toPositive = & 0x7fffffff; a count
        // that is not a power of two tells the sign bit's masking from none.
        for partitions in [4, 7] {
            let foobar = (-790_332_482i32 & 0x7fff_ffff).cast_unsigned() % partitions;
            assert_eq!(
                KeyPartitioner::Murmur2.partition(b"foobar", partitions),
                Some(foobar)
            );
        }
        // CRC-32's check value: crc32("123456789") = 0xCBF43926.
        assert_eq!(crc32fast::hash(b"123456789"), 0xcbf4_3926);
        assert_eq!(
            KeyPartitioner::Crc32.partition(b"123456789", 7),
            Some(0xcbf4_3926 % 7)
        );
        assert_eq!(KeyPartitioner::Crc32.partition(b"", 4), None);
        assert!(KeyPartitioner::Murmur2.partition(b"", 4).is_some());
        assert_eq!(KeyPartitioner::Murmur2.partition(b"x", 0), None);
    }
}
