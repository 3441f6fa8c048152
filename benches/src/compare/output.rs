//! `results.json` and `results.csv`.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use store_api::{Error, Result};

use super::measure::Measurement;
use super::report::{Recommendation, bytes};
use crate::{Scale, Workload};

/// The machine a comparison ran on, as far as the OS tells.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// The CPU model (`/proc/cpuinfo`), or `unknown`.
    pub cpu: String,
    /// Logical CPUs available to the process.
    pub cores: usize,
    /// The operating system.
    pub os: &'static str,
}

impl Machine {
    /// Reads the machine's description.
    pub fn detect() -> Machine {
        let cpu = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split_once(':'))
                    .map(|(_, model)| model.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            os: std::env::consts::OS,
        }
    }
}

/// What a run varied beyond the record counts, as `results.json` records it.
#[derive(Debug, Clone, Serialize)]
pub struct RunSettings {
    /// Bytes per key.
    pub key_len: usize,
    /// Bytes per value, when `--value-size` set it (else 150, 1000 for YCSB).
    pub value_len: Option<usize>,
    /// Threads issuing each workload together.
    pub threads: usize,
    /// The disk engines' cache size, when `--cache-size` set it.
    pub cache_size: Option<u64>,
}

impl RunSettings {
    /// One line on the state each store holds after its preload, against the caches.
    pub fn describe_state(&self, scale: Scale) -> String {
        let size = |records: u64, workload: Workload| {
            let record = (self.key_len + workload.value_len_at(scale)) as u64;
            bytes(records.saturating_mul(record))
        };
        let cache = match self.cache_size {
            Some(cache) => format!(
                "disk engines' caches {} (reads past them go to the OS page cache, or the disk)",
                bytes(cache)
            ),
            None => "disk engines' caches at their defaults".to_string(),
        };
        format!(
            "state per store: {} ({} of YCSB's), keys {} bytes; {cache}",
            size(scale.records, Workload::GetHit),
            size(scale.ycsb_records, Workload::YcsbA),
            self.key_len,
        )
    }
}

/// Everything `results.json` holds.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// When the comparison finished, in seconds since the Unix epoch.
    pub finished_unix_secs: u64,
    /// The machine.
    pub machine: Machine,
    /// Records of the basic workloads.
    pub records: u64,
    /// Records of the YCSB workloads.
    pub ycsb_records: u64,
    /// Seconds each non-load workload ran per backend.
    pub duration_secs: f64,
    /// Key and value sizes, threads and cache size.
    pub settings: RunSettings,
    /// Every measurement, by workload then backend.
    pub results: &'a [Measurement],
    /// One recommendation per workload.
    pub recommendations: &'a [Recommendation],
}

/// Seconds since the Unix epoch now.
pub fn now_unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

fn write(path: &Path, contents: &[u8]) -> Result<()> {
    fs::write(path, contents).map_err(|err| Error::io(format!("writing {}", path.display()), err))
}

/// Writes `results.json` into `dir`.
///
/// # Errors
/// `Io` when the file cannot be written.
pub fn write_json(dir: &Path, report: &Report<'_>) -> Result<()> {
    let json = serde_json::to_vec_pretty(report)
        .map_err(|err| Error::invalid(format!("encoding results.json: {err}")))?;
    write(&dir.join("results.json"), &json)
}

/// Writes `results.csv` into `dir`: a header, then one row per measurement. No field can hold
/// a comma or a quote (names are identifiers, the rest numbers), so no quoting is needed.
///
/// # Errors
/// `Io` when the file cannot be written.
pub fn write_csv(dir: &Path, results: &[Measurement]) -> Result<()> {
    let mut csv = String::from(
        "workload,backend,persistent,records,operations,seconds,ops_per_sec,p50_us,p99_us,\
         bytes_on_disk,ratio_to_best\n",
    );
    for m in results {
        // Writing to a String cannot fail.
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{:.6},{:.1},{:.3},{:.3},{},{:.4}",
            m.workload,
            m.backend,
            m.persistent,
            m.records,
            m.operations,
            m.seconds,
            m.ops_per_sec,
            m.p50_us,
            m.p99_us,
            m.bytes_on_disk,
            m.ratio_to_best
        );
    }
    write(&dir.join("results.csv"), csv.as_bytes())
}
