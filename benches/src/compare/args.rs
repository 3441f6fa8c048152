//! What `compare` takes: its command line, the checks that run before anything else, and the
//! engine caches that `--cache-size` sets.

use std::path::PathBuf;

use clap::Parser;
use store_api::BackendOptions;

use super::{OptionsByBackend, Requirement};
use crate::Workload;
use crate::data::{KEY_LEN, MAX_KEY_LEN, MAX_VALUE_LEN, MIN_KEY_LEN, VALUE_LEN};

/// Records of the default (quick) run: small enough that every workload on every backend
/// finishes within 5 minutes on a 2-core machine, large enough to leave the memtables and
/// caches of the engines.
pub const DEFAULT_RECORDS: u64 = 100_000;
/// Seconds each non-load workload runs per backend in the default run.
pub const DEFAULT_DURATION_SECS: f64 = 2.0;
/// The most records a run takes, whether given by `--records` or by `--state-size`.
pub const MAX_RECORDS: u64 = 100_000_000;
/// The most threads `--threads` takes.
pub const MAX_THREADS: u64 = 256;
/// The longest `--duration` accepted, so a typo does not start a run of days.
const MAX_DURATION_SECS: f64 = 3600.0;

/// The option that sizes each built-in disk engine's cache of its files, in bytes: what
/// `--cache-size` sets. The memory backend has no cache (it holds the whole state); a backend
/// not listed here gets its cache size through `--options`.
pub const CACHE_OPTIONS: [(&str, &str); 3] = [
    ("rocksdb", "block_cache_size"),
    ("redb", "cache_size_bytes"),
    ("sled", "cache_capacity_bytes"),
];

/// Arguments of `compare` that cannot run, refused before anything runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgsError {
    /// `--records` is 0 or above [`MAX_RECORDS`].
    #[error("--records must be 1 to {MAX_RECORDS}, got {0}")]
    Records(u64),
    /// `--key-size` is outside [`MIN_KEY_LEN`]..=[`MAX_KEY_LEN`].
    #[error(
        "--key-size must be {MIN_KEY_LEN} to {MAX_KEY_LEN} bytes (a key is `user` and at least \
         12 digits), got {0}"
    )]
    KeySize(u64),
    /// `--value-size` is above [`MAX_VALUE_LEN`].
    #[error("--value-size must be at most {MAX_VALUE_LEN} bytes, got {0}")]
    ValueSize(u64),
    /// `--threads` is 0 or above [`MAX_THREADS`].
    #[error("--threads must be 1 to {MAX_THREADS}, got {0}")]
    Threads(u64),
    /// `--state-size` makes no record, or more than [`MAX_RECORDS`].
    #[error(
        "--state-size {state} bytes makes {records} records of {record_bytes} bytes; it must \
         make 1 to {MAX_RECORDS}"
    )]
    StateSize {
        /// The state size asked for, in bytes.
        state: u64,
        /// The bytes of one record: its key and its value.
        record_bytes: u64,
        /// The records that makes.
        records: u64,
    },
    /// `--duration` is not above 0, or above an hour.
    #[error("--duration must be above 0 and at most {MAX_DURATION_SECS} seconds, got {0}")]
    Duration(f64),
    /// A size that is not a number of bytes.
    #[error("{0:?} is not a number of bytes (examples: 4096, 64KiB, 512MiB, 2GiB)")]
    Bytes(String),
    /// A count that is not a whole number.
    #[error("{0:?} is not a whole number")]
    Count(String),
}

/// Arguments of `compare`. Backend names are checked against [`Registry::global`] when the
/// command line is parsed, and against the registry [`run`](super::run) is given when it
/// runs; every other value is checked by [`CompareArgs::check`] before anything runs.
///
/// [`Registry::global`]: statestore::Registry::global
#[derive(Debug, Clone, Parser)]
#[command(
    name = "compare",
    after_help = "Workloads: load_seq, load_random, put_random, put_durable, get_hit, \
get_miss, range_10, range_100, ycsb_a, ycsb_b, ycsb_c, ycsb_e, ycsb_f.\n\
Full scale is --records 1000000 (YCSB uses half). Load workloads always load every record; \
the others run for --duration on each backend.\n\
Sizes take a number of bytes or binary units: 4096, 64KiB, 512MiB, 2GiB (K, M, G as well)."
)]
pub struct CompareArgs {
    /// Workloads to run, comma-separated [default: all].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_parser = parse_workload)]
    pub workloads: Vec<Workload>,
    /// Backends to compare, comma-separated [default: every registered backend].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_parser = parse_backend)]
    pub backends: Vec<String>,
    /// Records loaded by load_* and preloaded for gets and ranges; YCSB preloads half.
    #[arg(long, default_value_t = DEFAULT_RECORDS, value_parser = parse_records)]
    pub records: u64,
    /// The state of one store, in bytes, instead of --records: records of --key-size plus
    /// --value-size bytes (150 unless given) that add up to it. Make it larger than
    /// --cache-size to measure reads that miss the engine's cache.
    #[arg(long, conflicts_with = "records", value_parser = parse_bytes)]
    pub state_size: Option<u64>,
    /// Seconds each non-load workload runs on each backend.
    #[arg(long, default_value_t = DEFAULT_DURATION_SECS, value_parser = parse_duration)]
    pub duration: f64,
    /// Bytes per key, 16 to 4096 [default: 24].
    #[arg(long, value_parser = parse_key_size)]
    pub key_size: Option<u64>,
    /// Bytes per value [default: 150, 1000 for YCSB].
    #[arg(long, value_parser = parse_value_size)]
    pub value_size: Option<u64>,
    /// Threads issuing each workload together against one store. Loads split the records
    /// between them; the other workloads run on every thread for --duration.
    #[arg(long, default_value_t = 1, value_parser = parse_threads)]
    pub threads: u64,
    /// The cache of each disk engine, in bytes: RocksDB's block cache, redb's and sled's page
    /// caches. Other backends take theirs through --options; options given there win.
    #[arg(long, value_parser = parse_bytes)]
    pub cache_size: Option<u64>,
    /// Backend options as JSON, by backend name, or `@FILE` to read them from a file (TOML
    /// when it ends in `.toml`, with a table per backend, else JSON):
    /// '{"rocksdb": {"block_cache_size": 67108864}, "redb": {"cache_size_bytes": 67108864}}'.
    /// Backends not named get their defaults.
    #[arg(long, value_parser = parse_options)]
    pub options: Option<OptionsByBackend>,
    /// Recommend only engines that meet these, comma-separated: `durable` (state survives a
    /// restart without replaying the changelog), `larger-than-memory` (state may outgrow RAM).
    #[arg(long, value_delimiter = ',', num_args = 1.., value_parser = parse_requirement)]
    pub require: Vec<Requirement>,
    /// Directory for results.json, results.csv and the SVG charts (created if missing).
    #[arg(long, default_value = "compare-results")]
    pub out: PathBuf,
    /// Directory the stores are created in, one fresh subdirectory per run [default: the
    /// system temp dir]. Put it on the disk you mean to deploy on.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

impl Default for CompareArgs {
    /// The defaults of the command line: every workload on every registered backend.
    fn default() -> Self {
        CompareArgs {
            workloads: Vec::new(),
            backends: Vec::new(),
            records: DEFAULT_RECORDS,
            state_size: None,
            duration: DEFAULT_DURATION_SECS,
            key_size: None,
            value_size: None,
            threads: 1,
            cache_size: None,
            options: None,
            require: Vec::new(),
            out: PathBuf::from("compare-results"),
            data_dir: None,
        }
    }
}

/// The sizes a run uses, from checked arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Checked {
    /// Records of the basic workloads (YCSB preloads half).
    pub records: u64,
    /// Bytes per key.
    pub key_len: usize,
    /// Bytes per value, when given.
    pub value_len: Option<usize>,
    /// Threads per run.
    pub threads: usize,
}

impl CompareArgs {
    /// Checks every value that does not need the registry, and works out the records of
    /// `--state-size` (which wins over `records` when both are set in code).
    ///
    /// # Errors
    /// The first value out of range, as an [`ArgsError`].
    pub fn check(&self) -> Result<Checked, ArgsError> {
        check_duration(self.duration)?;
        let key_len = check_key_size(self.key_size.unwrap_or(KEY_LEN as u64))?;
        let value_len = self.value_size.map(check_value_size).transpose()?;
        let threads = check_threads(self.threads)?;
        let records = match self.state_size {
            Some(state) => {
                let record_bytes = (key_len + value_len.unwrap_or(VALUE_LEN)) as u64;
                let records = state / record_bytes.max(1);
                check_records(records).map_err(|_| ArgsError::StateSize {
                    state,
                    record_bytes,
                    records,
                })?
            }
            None => check_records(self.records)?,
        };
        Ok(Checked {
            records,
            key_len,
            value_len,
            threads,
        })
    }
}

/// `options` with `--cache-size` set for each backend of `backends` that [`CACHE_OPTIONS`]
/// names and whose options do not set it already, and a note for each backend it could not
/// set.
pub(super) fn with_cache_size(
    options: &OptionsByBackend,
    backends: &[String],
    cache_size: Option<u64>,
) -> (OptionsByBackend, Vec<String>) {
    let mut options = options.clone();
    let mut notes = Vec::new();
    let Some(bytes) = cache_size else {
        return (options, notes);
    };
    for backend in backends {
        let Some((_, key)) = CACHE_OPTIONS.iter().find(|(name, _)| name == backend) else {
            notes.push(if backend == "memory" {
                "--cache-size: memory holds the whole state in memory, it has no cache".into()
            } else {
                format!(
                    "--cache-size: compare does not know {backend}'s cache option; give it \
                     with --options"
                )
            });
            continue;
        };
        let entry = options
            .entry(backend.clone())
            .or_insert(BackendOptions::Null);
        if entry.is_null() {
            *entry = BackendOptions::Object(Default::default());
        }
        match entry.as_object_mut() {
            Some(table) if table.contains_key(*key) => notes.push(format!(
                "--cache-size: {backend} keeps the {key} of --options"
            )),
            Some(table) => {
                table.insert((*key).to_string(), bytes.into());
            }
            // Not a table: the backend refuses it when it opens, with its own message.
            None => {}
        }
    }
    (options, notes)
}

fn check_records(records: u64) -> Result<u64, ArgsError> {
    if (1..=MAX_RECORDS).contains(&records) {
        Ok(records)
    } else {
        Err(ArgsError::Records(records))
    }
}

fn check_key_size(len: u64) -> Result<usize, ArgsError> {
    match usize::try_from(len) {
        Ok(len) if (MIN_KEY_LEN..=MAX_KEY_LEN).contains(&len) => Ok(len),
        _ => Err(ArgsError::KeySize(len)),
    }
}

fn check_value_size(len: u64) -> Result<usize, ArgsError> {
    match usize::try_from(len) {
        Ok(len) if len <= MAX_VALUE_LEN => Ok(len),
        _ => Err(ArgsError::ValueSize(len)),
    }
}

fn check_threads(threads: u64) -> Result<usize, ArgsError> {
    match usize::try_from(threads) {
        Ok(n) if (1..=MAX_THREADS).contains(&threads) => Ok(n),
        _ => Err(ArgsError::Threads(threads)),
    }
}

fn check_duration(secs: f64) -> Result<f64, ArgsError> {
    if secs.is_finite() && secs > 0.0 && secs <= MAX_DURATION_SECS {
        Ok(secs)
    } else {
        Err(ArgsError::Duration(secs))
    }
}

fn parse_count(text: &str) -> Result<u64, ArgsError> {
    text.trim()
        .parse()
        .map_err(|_| ArgsError::Count(text.to_string()))
}

/// A number of bytes: digits, optionally followed by `K`/`KiB`, `M`/`MiB` or `G`/`GiB`
/// (binary units, any case, `B` optional).
pub fn parse_size(text: &str) -> Result<u64, ArgsError> {
    let bad = || ArgsError::Bytes(text.to_string());
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(bad()),
    };
    number.checked_mul(1 << shift).ok_or_else(bad)
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|err| err.to_string())
}

fn parse_records(text: &str) -> Result<u64, String> {
    parse_count(text)
        .and_then(check_records)
        .map_err(|err| err.to_string())
}

fn parse_key_size(text: &str) -> Result<u64, String> {
    let len = parse_size(text).map_err(|err| err.to_string())?;
    check_key_size(len).map_err(|err| err.to_string())?;
    Ok(len)
}

fn parse_value_size(text: &str) -> Result<u64, String> {
    let len = parse_size(text).map_err(|err| err.to_string())?;
    check_value_size(len).map_err(|err| err.to_string())?;
    Ok(len)
}

fn parse_threads(text: &str) -> Result<u64, String> {
    let threads = parse_count(text).map_err(|err| err.to_string())?;
    check_threads(threads).map_err(|err| err.to_string())?;
    Ok(threads)
}

fn parse_duration(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    check_duration(secs).map_err(|err| err.to_string())
}

fn parse_workload(name: &str) -> Result<Workload, String> {
    name.parse()
        .map_err(|err: crate::UnknownWorkload| err.to_string())
}

fn parse_backend(name: &str) -> Result<String, String> {
    statestore::resolve(name)
        .map(|_| name.to_string())
        .map_err(|err| err.to_string())
}

fn parse_requirement(name: &str) -> Result<Requirement, String> {
    name.parse()
}

fn parse_options(text: &str) -> Result<OptionsByBackend, String> {
    let Some(path) = text.strip_prefix('@') else {
        return parse_json_options(text);
    };
    let contents = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read the options file {path}: {err}"))?;
    if path.ends_with(".toml") {
        toml::from_str(&contents).map_err(|err| {
            format!("options in {path} must be TOML, a table of options per backend name: {err}")
        })
    } else {
        parse_json_options(&contents)
    }
}

fn parse_json_options(json: &str) -> Result<OptionsByBackend, String> {
    serde_json::from_str(json).map_err(|err| {
        format!("options must be a JSON object of backend name to options object: {err}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> CompareArgs {
        CompareArgs::default()
    }

    #[test]
    fn sizes_take_binary_units_and_refuse_the_rest() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size(" 8 MB "), Ok(8 << 20));
        for bad in ["", "MiB", "1.5GiB", "-1", "12TiB", "99999999999999999999G"] {
            assert_eq!(parse_size(bad), Err(ArgsError::Bytes(bad.into())), "{bad}");
        }
    }

    #[test]
    fn every_value_out_of_range_is_a_typed_error() {
        let cases: [(CompareArgs, ArgsError); 7] = [
            (
                CompareArgs {
                    records: 0,
                    ..args()
                },
                ArgsError::Records(0),
            ),
            (
                CompareArgs {
                    key_size: Some(15),
                    ..args()
                },
                ArgsError::KeySize(15),
            ),
            (
                CompareArgs {
                    key_size: Some(4097),
                    ..args()
                },
                ArgsError::KeySize(4097),
            ),
            (
                CompareArgs {
                    value_size: Some(u64::MAX),
                    ..args()
                },
                ArgsError::ValueSize(u64::MAX),
            ),
            (
                CompareArgs {
                    threads: 0,
                    ..args()
                },
                ArgsError::Threads(0),
            ),
            (
                CompareArgs {
                    duration: f64::INFINITY,
                    ..args()
                },
                ArgsError::Duration(f64::INFINITY),
            ),
            (
                CompareArgs {
                    state_size: Some(100),
                    ..args()
                },
                ArgsError::StateSize {
                    state: 100,
                    record_bytes: 174,
                    records: 0,
                },
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(args.check(), Err(expected));
        }
        assert!(matches!(
            CompareArgs {
                duration: f64::NAN,
                ..args()
            }
            .check(),
            Err(ArgsError::Duration(_))
        ));
    }

    #[test]
    fn options_come_as_json_or_from_a_json_or_toml_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let expected: OptionsByBackend = [
            (
                "rocksdb".to_string(),
                serde_json::json!({ "block_cache_size": 4096, "compression": "zstd" }),
            ),
            (
                "redb".to_string(),
                serde_json::json!({ "durability": "immediate" }),
            ),
        ]
        .into();
        let json = r#"{"rocksdb": {"block_cache_size": 4096, "compression": "zstd"},
                       "redb": {"durability": "immediate"}}"#;
        let toml = "[rocksdb]\nblock_cache_size = 4096\ncompression = \"zstd\"\n\n\
                    [redb]\ndurability = \"immediate\"\n";
        let (json_file, toml_file) = (dir.path().join("o.json"), dir.path().join("o.toml"));
        std::fs::write(&json_file, json).expect("write");
        std::fs::write(&toml_file, toml).expect("write");
        let at = |path: &std::path::Path| format!("@{}", path.display());
        assert_eq!(parse_options(json), Ok(expected.clone()));
        assert_eq!(parse_options(&at(&json_file)), Ok(expected.clone()));
        assert_eq!(parse_options(&at(&toml_file)), Ok(expected));

        std::fs::write(&toml_file, "rocksdb = 3\n[redb").expect("write");
        let err = parse_options(&at(&toml_file)).expect_err("bad TOML");
        assert!(err.contains("must be TOML"), "{err}");
        let err = parse_options("@/no/such/options.toml").expect_err("missing");
        assert!(err.contains("cannot read the options file"), "{err}");
    }

    #[test]
    fn state_size_sets_the_records_from_the_record_size() {
        let args = CompareArgs {
            state_size: Some(1 << 20),
            key_size: Some(24),
            value_size: Some(1000),
            ..args()
        };
        let checked = args.check().expect("valid");
        assert_eq!(checked.records, (1 << 20) / 1024);
        assert_eq!((checked.key_len, checked.value_len), (24, Some(1000)));
    }

    #[test]
    fn cache_size_sets_the_known_caches_and_keeps_explicit_options() {
        let given: OptionsByBackend = [(
            "redb".to_string(),
            serde_json::json!({ "cache_size_bytes": 7 }),
        )]
        .into();
        let backends: Vec<String> = ["rocksdb", "redb", "sled", "memory", "fjall"]
            .map(String::from)
            .into();
        let (options, notes) = with_cache_size(&given, &backends, Some(4096));
        assert_eq!(
            options["rocksdb"],
            serde_json::json!({ "block_cache_size": 4096 })
        );
        assert_eq!(
            options["sled"],
            serde_json::json!({ "cache_capacity_bytes": 4096 })
        );
        assert_eq!(
            options["redb"],
            serde_json::json!({ "cache_size_bytes": 7 })
        );
        assert!(!options.contains_key("fjall") && !options.contains_key("memory"));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes.iter().any(|note| note.contains("fjall")), "{notes:?}");
        let (unchanged, notes) = with_cache_size(&given, &backends, None);
        assert_eq!((unchanged, notes.len()), (given, 0));
    }
}
