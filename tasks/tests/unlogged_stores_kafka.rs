//! Stores with logging off, against the real broker: an application whose only store is
//! unlogged starts and counts every record.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use statestore_tasks::{Application, ProcessorContext, Queries, ReadFrom, StoreSpec, TasksConfig};
use support::*;

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
