//! Punctuation: a processor's callbacks scheduled on a task's stream time or on the wall
//! clock, as Kafka Streams' `ProcessorContext::schedule`.
//!
//! - **Stream time** is the largest record timestamp the task has processed. It is committed
//!   with the task's stores, so after a restart, a restore or a failover the task resumes from
//!   its committed stream time. A stream-time punctuator is aligned to 0 and first fires as soon
//!   as the task has a stream time, then every `interval` of stream time; it fires only when a
//!   record moves the stream time, once per record even when the record skips several
//!   intervals (the time it is called with says how far).
//! - **Wall-clock time** punctuators first fire `interval` after they are scheduled, then every
//!   `interval`, checked at every poll of the application; a poll that is late by several
//!   intervals calls once.
//!
//! Punctuators run on the processing thread between records, with the task's stores, and their
//! writes are committed with the task. Schedules are not stored: the processor schedules them
//! again in [`Processor::init`](crate::Processor::init) when the task opens, so a punctuation
//! may run again after a crash; punctuators should, like Kafka Streams' emit-final, keep what
//! they emitted in a store.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use store_api::{Error, Result};

/// What drives a punctuator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PunctuationType {
    /// The task's stream time: the largest record timestamp processed.
    StreamTime,
    /// The system clock.
    WallClockTime,
}

/// A punctuator scheduled on one task, for [`cancel`](crate::TaskContext::cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PunctuatorId(u64);

/// One call of a punctuator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Punctuation<'a> {
    /// The punctuator.
    pub id: PunctuatorId,
    /// The name it was scheduled with.
    pub name: &'a str,
    /// What drives it.
    pub kind: PunctuationType,
    /// The time it is called at, in milliseconds since the epoch: the task's stream time or
    /// the system time.
    pub time: i64,
}

/// One scheduled punctuator.
#[derive(Debug)]
struct Schedule {
    id: PunctuatorId,
    name: String,
    kind: PunctuationType,
    interval: i64,
    /// The earliest time of its next call.
    next: i64,
}

/// The punctuators of one task.
#[derive(Debug, Default)]
pub(crate) struct Punctuators {
    schedules: Vec<Schedule>,
    last_id: u64,
    /// The wall clock, when the task's driver keeps its own (the test driver's); the
    /// system's otherwise.
    wall_clock: Option<i64>,
}

impl Punctuators {
    /// Schedules `name` every `interval`.
    ///
    /// # Errors
    /// `InvalidArgument` for an interval under one millisecond.
    pub fn schedule(
        &mut self,
        name: &str,
        interval: Duration,
        kind: PunctuationType,
    ) -> Result<PunctuatorId> {
        let interval = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        if interval < 1 {
            return Err(Error::invalid(format!(
                "punctuator {name:?}: the interval must be at least 1 ms"
            )));
        }
        let next = match kind {
            PunctuationType::StreamTime => 0,
            PunctuationType::WallClockTime => self
                .wall_clock
                .unwrap_or_else(wall_clock_ms)
                .saturating_add(interval),
        };
        self.last_id += 1;
        let id = PunctuatorId(self.last_id);
        self.schedules.push(Schedule {
            id,
            name: name.to_owned(),
            kind,
            interval,
            next,
        });
        Ok(id)
    }

    /// From now on, wall-clock punctuators are scheduled from `now` rather than from the
    /// system's clock.
    pub fn set_wall_clock(&mut self, now: i64) {
        self.wall_clock = Some(now);
    }

    /// Cancels `id`; returns whether it was scheduled.
    pub fn cancel(&mut self, id: PunctuatorId) -> bool {
        let before = self.schedules.len();
        self.schedules.retain(|schedule| schedule.id != id);
        self.schedules.len() != before
    }

    /// The punctuator of `kind` due at `time` with the earliest next call, moved to its
    /// following call (Kafka Streams' `PunctuationSchedule::next`: missed calls are skipped):
    /// returns its id and name.
    pub fn take_due(&mut self, kind: PunctuationType, time: i64) -> Option<(PunctuatorId, String)> {
        let schedule = self
            .schedules
            .iter_mut()
            .filter(|schedule| schedule.kind == kind && schedule.next <= time)
            .min_by_key(|schedule| (schedule.next, schedule.id))?;
        let missed = (time - schedule.next) / schedule.interval;
        schedule.next = schedule
            .next
            .saturating_add((missed + 1).saturating_mul(schedule.interval));
        Some((schedule.id, schedule.name.clone()))
    }

    /// Whether any punctuator of `kind` is scheduled.
    pub fn any(&self, kind: PunctuationType) -> bool {
        self.schedules.iter().any(|schedule| schedule.kind == kind)
    }
}

/// The system time in milliseconds since the epoch.
pub(crate) fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(punctuators: &mut Punctuators, time: i64) -> Vec<String> {
        let mut names = Vec::new();
        while let Some((_, name)) = punctuators.take_due(PunctuationType::StreamTime, time) {
            names.push(name);
        }
        names
    }

    #[test]
    fn stream_time_punctuators_fire_once_per_call_and_skip_missed_intervals() {
        let mut punctuators = Punctuators::default();
        let every_10 = Duration::from_millis(10);
        punctuators
            .schedule("a", every_10, PunctuationType::StreamTime)
            .expect("schedule");
        // Aligned to 0: fires as soon as there is a stream time.
        assert_eq!(due(&mut punctuators, 3), ["a"]);
        assert!(due(&mut punctuators, 9).is_empty());
        assert_eq!(due(&mut punctuators, 10), ["a"]);
        // A jump over several intervals calls once, and the next call is the next multiple.
        assert_eq!(due(&mut punctuators, 57), ["a"]);
        assert!(due(&mut punctuators, 59).is_empty());
        assert_eq!(due(&mut punctuators, 60), ["a"]);
    }

    #[test]
    fn punctuators_are_called_in_time_order_and_cancel_stops_one() {
        let mut punctuators = Punctuators::default();
        let a = punctuators
            .schedule("a", Duration::from_millis(10), PunctuationType::StreamTime)
            .expect("a");
        punctuators
            .schedule("b", Duration::from_millis(4), PunctuationType::StreamTime)
            .expect("b");
        assert_eq!(due(&mut punctuators, 0), ["a", "b"]);
        assert_eq!(due(&mut punctuators, 4), ["b"]);
        assert_eq!(due(&mut punctuators, 10), ["b", "a"]);
        assert!(punctuators.cancel(a));
        assert!(!punctuators.cancel(a), "cancelled twice");
        assert_eq!(due(&mut punctuators, 20), ["b"]);
    }

    #[test]
    fn wall_clock_punctuators_wait_one_interval_and_bad_intervals_are_refused() {
        let mut punctuators = Punctuators::default();
        punctuators
            .schedule("w", Duration::from_secs(60), PunctuationType::WallClockTime)
            .expect("schedule");
        let now = wall_clock_ms();
        assert!(
            punctuators
                .take_due(PunctuationType::WallClockTime, now)
                .is_none()
        );
        assert!(
            punctuators
                .take_due(PunctuationType::StreamTime, now + 60_000)
                .is_none()
        );
        assert!(
            punctuators
                .take_due(PunctuationType::WallClockTime, now + 60_000)
                .is_some()
        );
        let err = punctuators
            .schedule("zero", Duration::ZERO, PunctuationType::StreamTime)
            .expect_err("0 ms");
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
    }
}
