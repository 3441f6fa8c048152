//! Stores with logging off, against the real broker: an application whose only store is
//! unlogged starts and counts every record, and a standby copy pairs its stores by name when an
//! unlogged store is declared before a logged one.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use statestore_tasks::{
    Application, ProcessorContext, Queries, QueryError, ReadFrom, ReadSource, StoreSpec,
    TasksConfig,
};
use support::*;

const PARTITIONS: u32 = 4;

/// Counts the record's key in store `counts` and marks it seen in store `scratch`.
fn count_and_mark(ctx: &mut ProcessorContext<'_>) -> store_api::Result<()> {
    let word = ctx.key().unwrap_or_default().to_vec();
    ctx.store("scratch")?.put(&word, b"seen")?;
    count_word(ctx)
}

/// A processor of these tests.
type ProcessFn = fn(&mut ProcessorContext<'_>) -> store_api::Result<()>;

/// An application on a thread of its own, counting the records it processed.
struct Instance {
    stop: Arc<AtomicBool>,
    processed: Arc<AtomicU64>,
    queries: Queries,
    handle: JoinHandle<store_api::Result<()>>,
}

impl Instance {
    fn start(config: TasksConfig, mut processor: ProcessFn) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let processed = Arc::new(AtomicU64::new(0));
        let (sender, receiver) = mpsc::channel();
        let (stop2, processed2) = (Arc::clone(&stop), Arc::clone(&processed));
        let handle = thread::spawn(move || {
            let mut app = Application::new(config)?;
            let _ = sender.send(app.queries());
            while !stop2.load(Ordering::Relaxed) {
                if app.poll(Duration::from_millis(50), &mut processor)? {
                    processed2.fetch_add(1, Ordering::Relaxed);
                }
            }
            app.close()
        });
        let queries = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("the application started");
        Instance {
            stop,
            processed,
            queries,
            handle,
        }
    }

    /// Waits until `records` are processed; panics with the application's error if it stopped.
    fn wait_processed(self, records: u64, timeout: Duration) -> Instance {
        let deadline = Instant::now() + timeout;
        while self.processed.load(Ordering::Relaxed) < records && Instant::now() < deadline {
            if self.handle.is_finished() {
                let stopped = self.handle.join().expect("no panic");
                panic!("the application stopped by itself: {stopped:?}");
            }
            thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(self.processed.load(Ordering::Relaxed), records);
        self
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("no panic").expect("clean stop");
    }
}

/// `[scratch (logging off), counts (logged)]`, in that order.
fn unlogged_first(bootstrap: &str, app: &str, input: &str, dir: &Path) -> TasksConfig {
    TasksConfig {
        stores: vec![
            StoreSpec::new("scratch", "redb").with_logging(false),
            StoreSpec::new("counts", "redb"),
        ],
        ..config(bootstrap, app, input, dir)
    }
}

/// The count of every word in `counts`, read from the active tasks of an input of
/// `partitions` partitions.
fn read_counts(
    queries: &Queries,
    partitions: u32,
    expected: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    expected
        .keys()
        .map(|word| {
            let partition = partition_of(word, partitions).cast_unsigned();
            let read = queries
                .get_in_partition("counts", partition, word.as_bytes(), ReadFrom::Active)
                .expect("the active task answers");
            (word.clone(), read.value.as_deref().map_or(0, decode))
        })
        .collect()
}

/// Fresh starts of an application whose one store has logging off (in memory, on one input
/// partition: its task opens at once, before librdkafka has read the group's offset and
/// started fetching the partition): each starts and counts every record once.
#[test]
fn an_application_whose_only_store_is_unlogged_starts_and_counts() {
    let Some(bootstrap) =
        bootstrap("an_application_whose_only_store_is_unlogged_starts_and_counts")
    else {
        return;
    };
    for start in 0..3 {
        let (app, input) = (unique("unlogged-app"), unique("unlogged-input"));
        create_topic(&bootstrap, &input, 1);
        let expected = produce(&bootstrap, &input, 1, 0..500);
        let dir = tempfile::tempdir().expect("dir");
        let config = TasksConfig {
            stores: vec![StoreSpec::new("counts", "memory").with_logging(false)],
            ..config(&bootstrap, &app, &input, dir.path())
        };
        let instance =
            Instance::start(config, count_word).wait_processed(500, Duration::from_secs(60));
        assert_eq!(
            read_counts(&instance.queries, 1, &expected),
            expected,
            "start {start}"
        );
        instance.stop();
    }
}

/// With `[scratch (logging off), counts]` and one standby replica over two instances, each
/// partition's standby copy answers for `counts` with the owner's committed counts, and has no
/// copy of `scratch` (only the owner answers for it).
#[test]
fn a_standby_pairs_stores_by_name_when_an_unlogged_store_comes_first() {
    let Some(bootstrap) =
        bootstrap("a_standby_pairs_stores_by_name_when_an_unlogged_store_comes_first")
    else {
        return;
    };
    let (app, input) = (unique("unlogged-sb-app"), unique("unlogged-sb-input"));
    create_topic(&bootstrap, &input, PARTITIONS as i32);
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    // Advertised only, so that the group is described and both hold tasks before reading.
    let endpoints = ["127.0.0.1:7001", "127.0.0.1:7002"];
    let instances: Vec<Instance> = dirs
        .iter()
        .zip(endpoints)
        .map(|(dir, endpoint)| {
            let config = TasksConfig {
                num_standby_replicas: 1,
                application_server: Some(endpoint.to_owned()),
                ..unlogged_first(&bootstrap, &app, &input, dir.path())
            };
            Instance::start(config, count_and_mark)
        })
        .collect();
    let all_processed = || {
        instances
            .iter()
            .map(|i| i.processed.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let both_active = wait_until(Duration::from_secs(120), || {
        instances[0].queries.all_metadata().is_ok_and(|all| {
            all.len() == 2 && all.iter().all(|instance| !instance.active.is_empty())
        })
    });
    assert!(both_active, "both instances hold tasks");
    // Produced once both hold their tasks: a record processed before the second joined would
    // leave its scratch mark with an instance that may no longer own its task.
    let expected = produce(&bootstrap, &input, PARTITIONS, 0..1_000);
    let settled = wait_until(Duration::from_secs(120), || all_processed() >= 1_000);
    assert!(settled, "processed {}", all_processed());
    for (word, &count) in &expected {
        let partition = partition_of(word, PARTITIONS).cast_unsigned();
        let key = word.as_bytes();
        let owner = instances
            .iter()
            .position(|i| {
                i.queries
                    .get_in_partition("scratch", partition, key, ReadFrom::Active)
                    .is_ok()
            })
            .expect("an owner");
        let other = &instances[1 - owner];
        let read = |store| {
            other
                .queries
                .get_in_partition(store, partition, key, ReadFrom::ActiveOrStandby)
        };
        // The copy catches up within about a second of the owner's commit.
        let mut copied = None;
        let found = wait_until(Duration::from_secs(30), || {
            copied = Some(read("counts"));
            matches!(
                copied,
                Some(Ok(ref copy)) if matches!(copy.source, ReadSource::Standby(_))
                    && copy.value.as_deref().map(decode) == Some(count)
            )
        });
        assert!(found, "{word}: standby read of counts: {copied:?}");
        assert!(
            matches!(read("scratch"), Err(QueryError::NotLocal { partition: p }) if p == partition),
            "{word}: standby read of scratch: {:?}",
            read("scratch")
        );
        let marked = instances[owner]
            .queries
            .get_in_partition("scratch", partition, key, ReadFrom::Active)
            .expect("the owner answers for scratch");
        assert_eq!(marked.value.as_deref(), Some(&b"seen"[..]), "{word}");
    }
    for instance in instances {
        instance.stop();
    }
}
