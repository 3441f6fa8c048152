//! SVG bar charts of the measurements (plotters, SVG backend).
//!
//! Bars are laid out in pixels on the root drawing area rather than through a chart
//! coordinate system: horizontal bars with a name on the left and the value at the end read
//! well at any number of backends, and grouped bars need fractional positions that plotters'
//! segmented axes do not offer.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::measure::Measurement;
use super::report::{latency, thousands};

const WIDTH: u32 = 760;
const LEFT: i32 = 110;
const BAR_SPACE: i32 = 420;
const FONT: &str = "sans-serif";

/// A colour per backend, stable across charts.
fn colour(backend: &str) -> RGBColor {
    match backend {
        "memory" => RGBColor(120, 120, 120),
        "rocksdb" => RGBColor(31, 119, 180),
        "sled" => RGBColor(255, 127, 14),
        "redb" => RGBColor(214, 39, 40),
        _ => RGBColor(44, 160, 44),
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type ChartResult = Result<(), String>;

fn text(area: &Area<'_>, label: &str, at: (i32, i32), size: u32, anchor: Pos) -> ChartResult {
    let style = TextStyle::from((FONT, size).into_font())
        .color(&BLACK)
        .pos(anchor);
    area.draw(&Text::new(label.to_string(), at, style))
        .map_err(|err| err.to_string())
}

fn bar(area: &Area<'_>, top: i32, height: i32, len: f64, fill: RGBColor) -> ChartResult {
    // At least one pixel, so a tiny but nonzero result is still visible.
    let width = ((len * f64::from(BAR_SPACE)) as i32).max(1);
    area.draw(&Rectangle::new(
        [(LEFT, top), (LEFT + width, top + height)],
        fill.filled(),
    ))
    .map_err(|err| err.to_string())
}

/// Draws one workload's throughput per backend into `path`, fastest first.
///
/// # Errors
/// The message of a drawing or file error.
pub fn workload_chart(path: &Path, title: &str, results: &[Measurement]) -> ChartResult {
    let mut rows: Vec<&Measurement> = results.iter().collect();
    rows.sort_by(|a, b| b.ops_per_sec.total_cmp(&a.ops_per_sec));
    let row_height = 34;
    let height = 70 + row_height * rows.len() as i32 + 20;
    let area = SVGBackend::new(path, (WIDTH, height.max(0) as u32)).into_drawing_area();
    area.fill(&WHITE).map_err(|err| err.to_string())?;
    let left_mid = Pos::new(HPos::Left, VPos::Center);
    text(
        &area,
        title,
        (12, 22),
        18,
        Pos::new(HPos::Left, VPos::Center),
    )?;
    text(
        &area,
        "operations/s (load_*: records/s), higher is better",
        (12, 46),
        12,
        left_mid,
    )?;
    let best = rows.first().map_or(0.0, |m| m.ops_per_sec);
    for (i, m) in rows.iter().enumerate() {
        let top = 70 + row_height * i as i32;
        let mid = top + row_height / 2 - 2;
        text(
            &area,
            &m.backend,
            (LEFT - 8, mid),
            14,
            Pos::new(HPos::Right, VPos::Center),
        )?;
        let len = if best > 0.0 {
            m.ops_per_sec / best
        } else {
            0.0
        };
        bar(&area, top + 4, row_height - 12, len, colour(&m.backend))?;
        let label = format!("{} (p99 {})", thousands(m.ops_per_sec), latency(m.p99_us));
        let end = LEFT + (len * f64::from(BAR_SPACE)) as i32 + 6;
        text(&area, &label, (end, mid), 12, left_mid)?;
    }
    area.present().map_err(|err| err.to_string())
}

/// Which backends a summary chart compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary {
    /// Every backend, each relative to the workload's fastest. `put_durable` leaves out the
    /// backends that are not persistent: their `flush` does nothing, so their bar would only
    /// flatten the others.
    All,
    /// The persistent backends only, each relative to the fastest of them, so the disk
    /// engines' differences are not shrunk to slivers by the memory backend.
    Disk,
}

impl Summary {
    /// The chart's title.
    fn title(self) -> &'static str {
        match self {
            Summary::All => "statestore compare: throughput relative to the best backend",
            Summary::Disk => "statestore compare: disk engines relative to the best disk engine",
        }
    }
}

/// One bar of a summary chart.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryBar {
    /// The backend's name.
    pub backend: String,
    /// Its throughput.
    pub ops_per_sec: f64,
    /// Its throughput over the best of the bars drawn for the workload.
    pub ratio: f64,
}

/// The bars `scope` draws for one workload's measurements, in the measurements' order.
pub fn summary_bars(workload: &str, rows: &[Measurement], scope: Summary) -> Vec<SummaryBar> {
    let durable_only = scope == Summary::Disk || workload == "put_durable";
    let kept: Vec<&Measurement> = rows
        .iter()
        .filter(|m| m.persistent || !durable_only)
        .collect();
    let best = kept.iter().map(|m| m.ops_per_sec).fold(0.0, f64::max);
    kept.iter()
        .map(|m| SummaryBar {
            backend: m.backend.clone(),
            ops_per_sec: m.ops_per_sec,
            ratio: if best > 0.0 {
                m.ops_per_sec / best
            } else {
                0.0
            },
        })
        .collect()
}

/// Draws every workload in one chart: per workload, one bar per backend of `scope`, its
/// throughput relative to the best of them (see [`summary_bars`]).
///
/// # Errors
/// The message of a drawing or file error.
pub fn summary_chart(
    path: &Path,
    workloads: &[(&str, Vec<Measurement>)],
    subtitle: &str,
    scope: Summary,
) -> ChartResult {
    let groups: Vec<(&str, Vec<SummaryBar>)> = workloads
        .iter()
        .map(|(workload, rows)| (*workload, summary_bars(workload, rows, scope)))
        .collect();
    let mut backends: Vec<&str> = Vec::new();
    for bar in groups.iter().flat_map(|(_, bars)| bars) {
        if !backends.contains(&bar.backend.as_str()) {
            backends.push(&bar.backend);
        }
    }
    let bar_height = 11;
    let group = bar_height * backends.len().max(1) as i32 + 14;
    let top = 90;
    let height = top + group * groups.len() as i32 + 16;
    let area = SVGBackend::new(path, (WIDTH, height.max(0) as u32)).into_drawing_area();
    area.fill(&WHITE).map_err(|err| err.to_string())?;
    let left_mid = Pos::new(HPos::Left, VPos::Center);
    text(&area, scope.title(), (12, 20), 17, left_mid)?;
    text(&area, subtitle, (12, 42), 12, left_mid)?;
    for (i, backend) in backends.iter().enumerate() {
        let x = LEFT + 110 * i as i32;
        area.draw(&Rectangle::new(
            [(x, 60), (x + 14, 72)],
            colour(backend).filled(),
        ))
        .map_err(|err| err.to_string())?;
        text(&area, backend, (x + 20, 66), 13, left_mid)?;
    }
    for (g, (workload, bars)) in groups.iter().enumerate() {
        let group_top = top + group * g as i32;
        let mid = group_top + (group - 14) / 2;
        text(
            &area,
            workload,
            (LEFT - 8, mid),
            13,
            Pos::new(HPos::Right, VPos::Center),
        )?;
        for (i, b) in bars.iter().enumerate() {
            let bar_top = group_top + bar_height * i as i32;
            bar(&area, bar_top, bar_height - 2, b.ratio, colour(&b.backend))?;
            let end = LEFT + (b.ratio * f64::from(BAR_SPACE)) as i32 + 5;
            let label = format!("{:.2}x  {} /s", b.ratio, thousands(b.ops_per_sec));
            text(
                &area,
                &label,
                (end, bar_top + bar_height / 2 - 1),
                10,
                left_mid,
            )?;
        }
    }
    area.present().map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(backend: &str, ops: f64, persistent: bool) -> Measurement {
        Measurement::sample("x", backend, ops, 1, persistent)
    }

    fn ratios(bars: &[SummaryBar]) -> Vec<(&str, f64)> {
        bars.iter().map(|b| (b.backend.as_str(), b.ratio)).collect()
    }

    #[test]
    fn disk_engines_are_measured_against_the_best_disk_engine() {
        let rows = [
            run("memory", 1000.0, false),
            run("rocksdb", 200.0, true),
            run("redb", 100.0, true),
        ];
        let all = summary_bars("get_hit", &rows, Summary::All);
        assert_eq!(
            ratios(&all),
            [("memory", 1.0), ("rocksdb", 0.2), ("redb", 0.1)]
        );
        let disk = summary_bars("get_hit", &rows, Summary::Disk);
        assert_eq!(ratios(&disk), [("rocksdb", 1.0), ("redb", 0.5)]);
    }

    #[test]
    fn put_durable_leaves_out_stores_that_keep_nothing() {
        let rows = [run("memory", 900.0, false), run("sled", 30.0, true)];
        let all = summary_bars("put_durable", &rows, Summary::All);
        assert_eq!(ratios(&all), [("sled", 1.0)]);
    }
}
