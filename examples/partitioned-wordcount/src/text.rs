//! The input: line `n` depends only on the seed and `n`, so the expected counts of any run are
//! computed without Kafka.

/// The vocabulary; the generator favours early words, so counts are skewed.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "it",
    "stream",
    "state",
    "store",
    "log",
    "partition",
    "task",
    "record",
    "offset",
    "commit",
    "restore",
    "checkpoint",
    "kafka",
    "rust",
    "key",
    "value",
    "batch",
    "write",
    "read",
    "group",
    "member",
    "standby",
    "replica",
    "crash",
    "failover",
];

/// Words per line.
const WORDS_PER_LINE: u64 = 8;

/// The words of line `line`.
pub fn line(seed: u64, line: u64) -> Vec<&'static str> {
    (0..WORDS_PER_LINE)
        .map(|i| {
            let h = mix(seed ^ mix(line.wrapping_mul(WORDS_PER_LINE).wrapping_add(i)));
            let len = WORDS.len() as u64;
            // The smaller of two uniform picks: early words are more frequent.
            let pick = (h % len).min((h >> 32) % len);
            WORDS[usize::try_from(pick).unwrap_or(0)]
        })
        .collect()
}

/// splitmix64's finalizer.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
