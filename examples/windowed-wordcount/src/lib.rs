//! Word counts per one-minute window, or per session of activity, on Kafka: each window or
//! session is emitted once, when it closes (Kafka Streams' emit-final, `suppress`), by a
//! stream-time punctuator of the task that owns the word's partition.
//!
//! The counts live in a window (or session) store of the task, restored and committed with its
//! input position like every task store. The punctuator keeps the time it emitted up to in a
//! key-value store of the same task, committed with the counts, so a restart, a failover or a
//! restore resumes emitting where the committed state left off. Outputs are at least once: an
//! instance killed between sending an emission and committing it sends the same window, with
//! the same count, again.

use std::collections::BTreeMap;
use std::time::Duration;

use statestore_tasks::operator_stores::session::{SessionStore, SessionWindows};
use statestore_tasks::operator_stores::window::{TimeWindows, WindowStore};
use statestore_tasks::{Error, Result};
use statestore_tasks::{
    Processor, ProcessorContext, Punctuation, PunctuationType, StoreHandle, StoreKind, StoreSpec,
    TaskContext, TaskKv, TasksConfig,
};

/// The window size.
pub const WINDOW: i64 = 60_000;
/// The sessions' inactivity gap.
pub const GAP: i64 = 300_000;
/// Records per burst of activity; bursts are ten minutes apart, so sessions end.
pub const BURST: u64 = 500;
/// The key of a record that only moves its task's stream time (it closes what is open).
pub const CLOSER: &[u8] = b"~closer";
/// How long windows and sessions are kept.
const RETENTION: i64 = 3_600_000;
/// How often, in stream time, closed windows are looked for.
const EMIT_EVERY: Duration = Duration::from_secs(10);
/// The key of the emitted-up-to time in store `emitted`.
const UPTO: &[u8] = b"upto";

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One-minute tumbling windows.
    Windows,
    /// Sessions of activity split by a five-minute gap.
    Sessions,
}

/// The word of record `i`: 97 distinct words, each once in any 97 consecutive records.
pub fn word(i: u64) -> String {
    format!("w{}", (i * 7919) % 97)
}

/// A first timestamp for [`timestamp`]: a minute boundary two days ago. Brokers refuse
/// timestamps far ahead of their clock and delete old ones, so input is timed near now.
pub fn default_base() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    let ago = now - 2 * 86_400_000;
    ago - ago.rem_euclid(WINDOW)
}

/// The timestamp of record `i` after `base`: a second apart, with ten idle minutes after every
/// burst.
pub fn timestamp(base: i64, i: u64) -> i64 {
    let i = i64::try_from(i).unwrap_or(i64::MAX / 2_000_000);
    let burst = i64::try_from(BURST).unwrap_or(1);
    base + i * 1_000 + (i / burst) * 600_000
}

/// The stores of `mode` on `backend`.
pub fn stores(mode: Mode, backend: &str) -> Vec<StoreSpec> {
    let counts = match mode {
        Mode::Windows => StoreKind::Window {
            retention_ms: RETENTION,
            segment_interval_ms: None,
            retain_duplicates: false,
        },
        Mode::Sessions => StoreKind::Session {
            retention_ms: RETENTION,
            segment_interval_ms: None,
        },
    };
    vec![
        StoreSpec::new("counts", backend).with_kind(counts),
        StoreSpec::new("emitted", backend),
    ]
}

/// The counts of `mode`, a window or session store.
#[derive(Clone)]
enum Counts {
    Windows(StoreHandle<WindowStore>, TimeWindows),
    Sessions(StoreHandle<SessionStore>, SessionWindows),
}

/// The processor: counts each word into its window or session, and emits what closed to
/// `output` as `start,end,count` keyed by the word (`end` exclusive for windows, the last
/// record's time for sessions, as in Kafka Streams).
#[derive(Clone)]
pub struct WindowedCounts {
    counts: Counts,
    emitted: StoreHandle<TaskKv>,
    output: String,
}

impl WindowedCounts {
    /// The processor of `config` (made with [`stores`]) in `mode`, emitting to `output`.
    ///
    /// # Errors
    /// `InvalidArgument` when `config` lacks the stores of `mode`.
    pub fn new(config: &TasksConfig, mode: Mode, output: &str) -> Result<Self> {
        let counts = match mode {
            Mode::Windows => Counts::Windows(
                StoreHandle::new(config, "counts")?,
                TimeWindows::tumbling(WINDOW)?,
            ),
            Mode::Sessions => Counts::Sessions(
                StoreHandle::new(config, "counts")?,
                SessionWindows::with_gap(GAP)?,
            ),
        };
        Ok(WindowedCounts {
            counts,
            emitted: StoreHandle::new(config, "emitted")?,
            output: output.to_owned(),
        })
    }

    /// Sends every window or session that closed by stream time `now` and was not sent yet.
    fn emit_closed(&self, ctx: &TaskContext<'_>, now: i64) -> Result<()> {
        let emitted = ctx.store_of(&self.emitted)?;
        let from = match emitted.get(UPTO)? {
            Some(bytes) => i64::from_be_bytes(
                bytes
                    .try_into()
                    .map_err(|_| Error::Corruption("an emitted-up-to time of bad size".into()))?,
            ),
            None => i64::MIN,
        };
        let upto = match &self.counts {
            Counts::Windows(handle, _) => {
                // A window closes when the stream time reaches its end (no grace period).
                let last_closed = (now - WINDOW).div_euclid(WINDOW) * WINDOW;
                if last_closed < from {
                    return Ok(());
                }
                for entry in ctx.store_of(handle)?.fetch_all(from, last_closed)? {
                    let entry = entry?;
                    let value = format!(
                        "{},{},{}",
                        entry.start,
                        entry.start + WINDOW,
                        decode(&entry.value)?
                    );
                    ctx.send(&self.output, Some(&entry.key), Some(value.as_bytes()));
                }
                last_closed
            }
            Counts::Sessions(handle, _) => {
                // A session closes once the stream time is past its end by more than the gap.
                let last_closed = now - GAP - 1;
                if last_closed < from {
                    return Ok(());
                }
                for found in ctx
                    .store_of(handle)?
                    .find_sessions_ending(from, last_closed)?
                {
                    let (session, count) = found?;
                    let value = format!("{},{},{}", session.start, session.end, decode(&count)?);
                    ctx.send(&self.output, Some(&session.key), Some(value.as_bytes()));
                }
                last_closed
            }
        };
        emitted.put(UPTO, &(upto + 1).to_be_bytes())
    }
}

impl Processor for WindowedCounts {
    fn init(&mut self, ctx: &mut TaskContext<'_>) -> Result<()> {
        ctx.schedule("emit-closed", EMIT_EVERY, PunctuationType::StreamTime)?;
        Ok(())
    }

    fn process(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        let (Some(word), Some(ts)) = (ctx.key(), ctx.timestamp()) else {
            return Ok(());
        };
        if word == CLOSER {
            return Ok(());
        }
        let plus_one = |old: Option<&[u8]>| {
            let count = old.map_or(Ok(0), decode).unwrap_or(0);
            (count + 1).to_be_bytes().to_vec()
        };
        match &self.counts {
            Counts::Windows(handle, windows) => {
                let _ = ctx
                    .store_of(handle)?
                    .aggregate(word, ts, windows, plus_one)?;
            }
            Counts::Sessions(handle, sessions) => {
                let one = 1u64.to_be_bytes();
                let sum = |a: &[u8], b: &[u8]| {
                    let total = decode(a).unwrap_or(0) + decode(b).unwrap_or(0);
                    total.to_be_bytes().to_vec()
                };
                let _ = ctx
                    .store_of(handle)?
                    .merge_record(word, ts, sessions, &one, sum)?;
            }
        }
        Ok(())
    }

    fn punctuate(
        &mut self,
        ctx: &mut TaskContext<'_>,
        punctuation: &Punctuation<'_>,
    ) -> Result<()> {
        self.emit_closed(ctx, punctuation.time)
    }
}

/// A count as stored: 8 bytes, big-endian.
///
/// # Errors
/// `Corruption` for another size.
pub fn decode(bytes: &[u8]) -> Result<u64> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| Error::Corruption(format!("a count of {} bytes", bytes.len())))
}

/// What records `0..records` timed from `base` must emit in `mode` once everything closed:
/// (word, start, end) to count.
pub fn expected(mode: Mode, base: i64, records: u64) -> BTreeMap<(String, i64, i64), u64> {
    let mut times: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for i in 0..records {
        times.entry(word(i)).or_default().push(timestamp(base, i));
    }
    let mut out = BTreeMap::new();
    for (word, times) in times {
        match mode {
            Mode::Windows => {
                for ts in times {
                    let start = ts - ts.rem_euclid(WINDOW);
                    *out.entry((word.clone(), start, start + WINDOW))
                        .or_insert(0) += 1;
                }
            }
            Mode::Sessions => {
                let mut start = times[0];
                let mut last = times[0];
                let mut count = 0;
                for ts in times {
                    if ts - last > GAP {
                        out.insert((word.clone(), start, last), count);
                        (start, count) = (ts, 0);
                    }
                    last = ts;
                    count += 1;
                }
                out.insert((word.clone(), start, last), count);
            }
        }
    }
    out
}

/// Reads an emitted value, `start,end,count`.
pub fn parse_emitted(value: &str) -> Option<(i64, i64, u64)> {
    let mut parts = value.split(',');
    let start = parts.next()?.parse().ok()?;
    let end = parts.next()?.parse().ok()?;
    let count = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((start, end, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_splits_sessions_at_bursts_and_windows_at_minutes() {
        let base = default_base();
        let sessions = expected(Mode::Sessions, base, 2 * BURST);
        // Every word is active in both bursts, once per 97 records.
        assert_eq!(sessions.len(), 2 * 97);
        assert_eq!(sessions.values().sum::<u64>(), 2 * BURST);
        let windows = expected(Mode::Windows, base, 2 * BURST);
        assert_eq!(windows.values().sum::<u64>(), 2 * BURST);
        assert!(
            windows
                .keys()
                .all(|(_, start, end)| start % WINDOW == 0 && end - start == WINDOW)
        );
        assert_eq!(parse_emitted("1,2,3"), Some((1, 2, 3)));
        assert_eq!(parse_emitted("1,2"), None);
        assert_eq!(parse_emitted("1,2,3,4"), None);
    }
}
