//! Turning measurements into tables, ratios and recommendations.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::Workload;

use super::measure::Measurement;

/// Runs whose throughput is within this fraction of the best count as a tie on speed.
const TIE: f64 = 0.05;

/// The backend recommended for one workload, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    /// The workload's name.
    pub workload: String,
    /// The recommended backend.
    pub backend: String,
    /// The reason, drawn from the measured numbers.
    pub reason: String,
}

/// What an engine must offer to be recommended (`compare --require`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Requirement {
    /// The store's own files survive a restart: reopening does not replay the changelog.
    /// Met by the backends that declare
    /// [`Capabilities::persistent`](store_api::Capabilities::persistent).
    Durable,
    /// The state may outgrow RAM: the engine keeps it on disk and caches part of it. The store
    /// API has no capability for it yet; every persistent backend of the workspace pages from
    /// disk and the memory backend does not, so it is met by the persistent backends too, and
    /// kept apart from [`Durable`](Requirement::Durable) because it is a different question
    /// (an engine could persist by snapshotting a heap that must fit in RAM).
    LargerThanMemory,
}

impl Requirement {
    /// The name `--require` takes.
    pub fn name(self) -> &'static str {
        match self {
            Requirement::Durable => "durable",
            Requirement::LargerThanMemory => "larger-than-memory",
        }
    }

    /// Whether the measured backend meets it.
    fn met_by(self, m: &Measurement) -> bool {
        match self {
            Requirement::Durable | Requirement::LargerThanMemory => m.persistent,
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Requirement {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "durable" => Ok(Requirement::Durable),
            "larger-than-memory" => Ok(Requirement::LargerThanMemory),
            _ => Err(format!(
                "unknown requirement {name:?}: use durable or larger-than-memory"
            )),
        }
    }
}

/// Sets every measurement's `ratio_to_best` within its workload.
pub fn set_ratios(results: &mut [Measurement]) {
    let best = results.iter().map(|m| m.ops_per_sec).fold(0.0, f64::max);
    for m in results {
        m.ratio_to_best = if best > 0.0 {
            m.ops_per_sec / best
        } else {
            0.0
        };
    }
}

/// The table of one workload's measurements, fastest first. Loads count records per second
/// and the latency of a 1000-record batch.
pub fn table(workload: Workload, results: &[Measurement]) -> String {
    let mut rows: Vec<&Measurement> = results.iter().collect();
    rows.sort_by(|a, b| b.ops_per_sec.total_cmp(&a.ops_per_sec));
    let mut out = format!("\n== {workload}: {} ==\n", workload.describe());
    let (rate, p50, p99) = if workload.is_load() {
        ("records/s", "batch p50", "batch p99")
    } else {
        ("ops/s", "p50", "p99")
    };
    out.push_str(&format!(
        "{:<10} {:>14} {:>10} {:>10} {:>11} {:>8}\n",
        "backend", rate, p50, p99, "on disk", "vs best"
    ));
    for m in rows {
        out.push_str(&format!(
            "{:<10} {:>14} {:>10} {:>10} {:>11} {:>7.2}x\n",
            m.backend,
            thousands(m.ops_per_sec),
            latency(m.p50_us),
            latency(m.p99_us),
            disk(m),
            m.ratio_to_best
        ));
    }
    out
}

/// Picks a backend for one workload's measurements among those that meet every one of
/// `require`; `None` when none does.
///
/// The fastest wins, unless others are within [`TIE`] of it: then the smallest on disk among
/// those ties wins. A non-persistent winner is named with the best persistent alternative;
/// for `put_durable` only persistent backends compete.
pub fn recommend(
    workload: &str,
    results: &[Measurement],
    require: &[Requirement],
) -> Option<Recommendation> {
    // Durability is the point of put_durable: a store that keeps nothing cannot win it.
    let durable_only = workload == Workload::PutDurable.name();
    let mut ranked: Vec<&Measurement> = results
        .iter()
        .filter(|m| m.persistent || !durable_only)
        .filter(|m| require.iter().all(|r| r.met_by(m)))
        .collect();
    ranked.sort_by(|a, b| b.ops_per_sec.total_cmp(&a.ops_per_sec));
    let fastest = *ranked.first()?;
    let ties: Vec<&Measurement> = ranked
        .iter()
        .copied()
        .filter(|m| m.ops_per_sec >= fastest.ops_per_sec * (1.0 - TIE))
        .collect();
    let pick = ties
        .iter()
        .copied()
        .filter(|m| m.persistent)
        .min_by_key(|m| m.bytes_on_disk)
        .filter(|_| ties.len() > 1)
        .unwrap_or(fastest);
    let mut reasons = vec![speed_reason(pick, &ranked)];
    reasons.extend(disk_reason(pick, results));
    if !pick.persistent {
        reasons.push(memory_caveat(pick, &ranked));
    }
    Some(Recommendation {
        workload: workload.to_string(),
        backend: pick.backend.clone(),
        reason: reasons.join("; "),
    })
}

fn speed_reason(pick: &Measurement, ranked: &[&Measurement]) -> String {
    let load = pick
        .workload
        .parse::<Workload>()
        .is_ok_and(Workload::is_load);
    let (unit, op) = if load {
        ("records/s", "batch ")
    } else {
        ("ops/s", "")
    };
    let rate = format!(
        "{} {unit}, {op}p99 {}",
        thousands(pick.ops_per_sec),
        latency(pick.p99_us)
    );
    let Some(next) = ranked.iter().find(|m| m.backend != pick.backend) else {
        return format!("the only backend measured ({rate})");
    };
    let lead = pick.ops_per_sec / next.ops_per_sec.max(f64::MIN_POSITIVE);
    if lead >= 1.0 + TIE {
        format!("{lead:.1}x the next ({}) at {rate}", next.backend)
    } else if lead >= 1.0 {
        format!(
            "ties with {} within {:.0}% at {rate}",
            next.backend,
            (lead - 1.0) * 100.0
        )
    } else {
        format!(
            "within {:.0}% of the fastest ({}) at {rate}",
            (1.0 - lead) * 100.0,
            next.backend
        )
    }
}

fn disk_reason(pick: &Measurement, results: &[Measurement]) -> Option<String> {
    if !pick.persistent {
        return None;
    }
    let smallest = results
        .iter()
        .filter(|m| m.persistent)
        .min_by_key(|m| m.bytes_on_disk)?;
    let others = results.iter().filter(|m| m.persistent).count();
    if others < 2 {
        return None;
    }
    Some(if smallest.backend == pick.backend {
        format!("smallest on disk ({})", bytes(pick.bytes_on_disk))
    } else {
        let times = pick.bytes_on_disk as f64 / (smallest.bytes_on_disk.max(1)) as f64;
        format!(
            "{times:.1}x the disk of {} ({} vs {})",
            smallest.backend,
            bytes(pick.bytes_on_disk),
            bytes(smallest.bytes_on_disk)
        )
    })
}

fn memory_caveat(pick: &Measurement, ranked: &[&Measurement]) -> String {
    match ranked.iter().find(|m| m.persistent) {
        Some(disk) => format!(
            "it keeps state in RAM only, rebuilt from the changelog on restart; on disk, {} \
             reaches {:.2}x its throughput",
            disk.backend,
            disk.ops_per_sec / pick.ops_per_sec.max(f64::MIN_POSITIVE)
        ),
        None => "it keeps state in RAM only, rebuilt from the changelog on restart".to_string(),
    }
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A latency in microseconds, in the unit that reads best.
pub fn latency(micros: f64) -> String {
    if micros < 1.0 {
        format!("{:.0} ns", micros * 1000.0)
    } else if micros < 1000.0 {
        format!("{micros:.1} µs")
    } else {
        format!("{:.2} ms", micros / 1000.0)
    }
}

/// A size in bytes, in binary units.
pub fn bytes(value: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut size = value as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

fn disk(m: &Measurement) -> String {
    if m.persistent {
        bytes(m.bytes_on_disk)
    } else {
        "-".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(backend: &str, ops: f64, disk: u64, persistent: bool) -> Measurement {
        Measurement::sample("ycsb_a", backend, ops, disk, persistent)
    }

    #[test]
    fn fastest_wins_with_its_lead_and_disk() {
        let results = [
            run("rocksdb", 230.0, 10, true),
            run("redb", 100.0, 20, true),
        ];
        let rec = recommend("ycsb_a", &results, &[]).expect("a pick");
        assert_eq!(rec.backend, "rocksdb");
        assert!(
            rec.reason.contains("2.3x the next (redb)"),
            "{}",
            rec.reason
        );
        assert!(rec.reason.contains("smallest on disk"), "{}", rec.reason);
    }

    #[test]
    fn a_tie_goes_to_the_smaller_on_disk() {
        let results = [run("rocksdb", 100.0, 50, true), run("redb", 98.0, 10, true)];
        let rec = recommend("get_hit", &results, &[]).expect("a pick");
        assert_eq!(rec.backend, "redb");
        assert!(
            rec.reason.contains("within 2% of the fastest (rocksdb)"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn memory_is_named_with_its_caveat() {
        let results = [run("memory", 400.0, 0, false), run("sled", 100.0, 10, true)];
        let rec = recommend("get_hit", &results, &[]).expect("a pick");
        assert_eq!(rec.backend, "memory");
        assert!(rec.reason.contains("RAM only") && rec.reason.contains("sled reaches 0.25x"));
    }

    #[test]
    fn a_requirement_rules_out_the_engines_that_miss_it() {
        let results = [
            run("memory", 400.0, 0, false),
            run("sled", 100.0, 30, true),
            run("fjall", 150.0, 10, true),
        ];
        for require in [Requirement::Durable, Requirement::LargerThanMemory] {
            let rec = recommend("get_hit", &results, &[require]).expect("a pick");
            assert_eq!(rec.backend, "fjall", "{require}");
            assert!(
                rec.reason.contains("1.5x the next (sled)"),
                "{}",
                rec.reason
            );
        }
        let only_memory = [run("memory", 400.0, 0, false)];
        assert!(recommend("get_hit", &only_memory, &[Requirement::Durable]).is_none());
        assert_eq!(
            "larger-than-memory".parse(),
            Ok(Requirement::LargerThanMemory)
        );
        assert!("fast".parse::<Requirement>().is_err());
    }

    #[test]
    fn put_durable_needs_a_persistent_store() {
        let results = [run("memory", 400.0, 0, false), run("redb", 10.0, 10, true)];
        let rec = recommend("put_durable", &results, &[]).expect("a pick");
        assert_eq!(rec.backend, "redb");
        assert!(
            rec.reason.contains("the only backend measured"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn formats_numbers() {
        assert_eq!(thousands(1_234_567.8), "1,234,568");
        assert_eq!(thousands(12.0), "12");
        assert_eq!(latency(0.25), "250 ns");
        assert_eq!(latency(1500.0), "1.50 ms");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert!(recommend("x", &[], &[]).is_none());
    }
}
