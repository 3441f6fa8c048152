//! The input: sentences generated from a seed, line by line. Line `n` depends only on the seed
//! and `n`, so a run that resumes at line `n` reads exactly what an uninterrupted run would.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The vocabulary, roughly most frequent first: the generator favours early words, so the
/// counts follow a skewed, natural-looking distribution.
pub const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "it",
    "that",
    "was",
    "for",
    "on",
    "with",
    "as",
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
    "range",
    "scan",
    "prefix",
    "crash",
    "replay",
    "durable",
    "buffer",
    "segment",
    "compaction",
    "broker",
    "topic",
    "consumer",
    "producer",
    "window",
    "join",
    "aggregate",
    "count",
    "word",
    "table",
    "event",
    "time",
    "processor",
    "topology",
    "rocksdb",
    "sled",
    "redb",
    "memory",
    "engine",
    "fast",
    "local",
    "embedded",
    "fault",
    "tolerant",
    "machine",
    "rebalance",
    "assignment",
    "standby",
    "replica",
    "latency",
    "throughput",
    "disk",
    "fsync",
    "page",
    "cache",
    "tombstone",
    "snapshot",
    "iterator",
    "lock",
    "directory",
    "backend",
    "factory",
    "option",
    "config",
    "benchmark",
    "workload",
    "zipfian",
    "uniform",
    "random",
    "sequential",
    "recovery",
    "torn",
    "tail",
    "checksum",
    "header",
    "index",
    "sparse",
    "retention",
    "cleanup",
    "delay",
    "owner",
];

/// Milliseconds of event time between two lines, on average.
pub const LINE_INTERVAL_MS: i64 = 250;

/// How far behind its place in the input a line's event time may be: lines arrive out of
/// order by up to this much, as events do from real sources.
pub const MAX_DISORDER_MS: i64 = 15_000;

/// The event time of line `line` of the text generated from `seed`, in milliseconds: the
/// line's place in the input, minus a pseudo-random delay of up to [`MAX_DISORDER_MS`].
pub fn event_time(seed: u64, line: u64) -> i64 {
    let mut rng = StdRng::seed_from_u64(seed ^ line.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 1);
    let place = i64::try_from(line).unwrap_or(i64::MAX / LINE_INTERVAL_MS) * LINE_INTERVAL_MS;
    place - rng.random_range(0..MAX_DISORDER_MS)
}

/// Line `line` of the text generated from `seed`: 3 to 14 lowercase words.
pub fn line(seed: u64, line: u64) -> String {
    let mut rng = StdRng::seed_from_u64(seed ^ line.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let words = rng.random_range(3..=14);
    let mut text = String::new();
    for i in 0..words {
        // Squaring a uniform number favours small indexes: a skewed vocabulary.
        let pick: f64 = rng.random();
        let index = ((pick * pick) * WORDS.len() as f64) as usize;
        if i > 0 {
            text.push(' ');
        }
        text.push_str(WORDS[index.min(WORDS.len() - 1)]);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_depend_only_on_seed_and_number() {
        assert_eq!(line(7, 123), line(7, 123));
        assert_ne!(line(7, 123), line(7, 124));
        assert_ne!(line(7, 123), line(8, 123));
        let count = line(1, 5).split(' ').count();
        assert!((3..=14).contains(&count));
        assert_eq!(event_time(7, 123), event_time(7, 123));
        let late = 123 * LINE_INTERVAL_MS - event_time(7, 123);
        assert!((0..MAX_DISORDER_MS).contains(&late));
    }
}
