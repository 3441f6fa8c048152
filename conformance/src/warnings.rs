//! Checks of what a store logs, outside the contract's cases: a store built on store-api
//! may log differently and still meet the contract, so these are not in
//! [`STORE_CASES`](crate::STORE_CASES); the backends of this workspace call them from their
//! test files.

use std::fmt::{self, Write as _};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use crate::{StoreFactory, StoreFixture};

/// A subscriber that keeps the fields of every warning, written here so the suite needs
/// `tracing` alone and no subscriber crate.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

/// Writes an event's fields as `name=value` pairs.
struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            let mut text = String::new();
            event.record(&mut Fields(&mut text));
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(text);
        }
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// The warnings `tracing` receives on this thread while `body` runs.
fn warnings_while(body: impl FnOnce()) -> Vec<String> {
    let warnings = Warnings::default();
    tracing::subscriber::with_default(warnings.clone(), body);
    let lines = warnings.0.lock().unwrap_or_else(PoisonError::into_inner);
    lines.clone()
}

/// An inverted range (`from` after `to`) is logged as one warning per store, however many
/// inverted ranges, forward or reverse, the store serves; ranges that are empty for another
/// reason (`[a, a)`) and ordinary ranges log nothing. Each of two stores warns once.
///
/// # Panics
/// When a store logs a different number of warnings, or a range fails.
pub fn inverted_range_warns_once(factory: &dyn StoreFactory) {
    let (high, low): (&[u8], &[u8]) = (b"d", b"b");
    let mut names = Vec::new();
    let lines = warnings_while(|| {
        for _ in 0..2 {
            let fx = StoreFixture::new(factory);
            fx.store().put(b"c", b"1").expect("put");
            for (from, to, inverted) in [
                (Included(high), Included(low), true),
                (Excluded(high), Excluded(low), true),
                (Included(low), Excluded(low), false),
                (Unbounded, Included(low), false),
            ] {
                count(&fx, from, to, inverted);
            }
            names.push(fx.store().name().to_owned());
        }
    });
    assert_eq!(
        lines.len(),
        2,
        "{:?}: expected one warning per store for inverted ranges, got {lines:#?}",
        names.first()
    );
}

/// Runs `range` and `reverse_range`; an inverted range must yield nothing.
fn count(fx: &StoreFixture<'_>, from: Bound<&[u8]>, to: Bound<&[u8]>, inverted: bool) {
    for reverse in [false, true] {
        let iter = if reverse {
            fx.store().reverse_range(from, to)
        } else {
            fx.store().range(from, to)
        };
        let found = iter
            .unwrap_or_else(|err| panic!("range({from:?}, {to:?}) failed: {err}"))
            .count();
        if inverted {
            assert_eq!(found, 0, "an inverted range yielded entries");
        }
    }
}
