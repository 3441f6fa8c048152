//! Every operator-store suite on every backend of the workspace, plain and logged, and the
//! byte-store contract on the wrappers that are byte stores themselves.

mod memory {
    statestore_operator_stores::operator_suite!(statestore_conformance::backend(
        statestore_memory::MemoryFactory,
        serde_json::Value::Null
    ));
}

mod rocksdb {
    statestore_operator_stores::operator_suite!(statestore_conformance::backend(
        statestore_rocksdb::RocksDbFactory,
        serde_json::Value::Null
    ));
}

mod sled {
    statestore_operator_stores::operator_suite!(statestore_conformance::backend(
        statestore_sled::SledFactory,
        serde_json::Value::Null
    ));
}

mod redb {
    statestore_operator_stores::operator_suite!(statestore_conformance::backend(
        statestore_redb::RedbFactory,
        serde_json::Value::Null
    ));
}

/// The byte wrappers meet the whole `KeyValueStore` contract themselves (an LRU store whose
/// capacity is never reached loses nothing), so they work wherever a store does.
mod wrappers {
    use std::path::Path;
    use std::sync::Arc;

    use statestore_operator_stores::{LruStore, MeteredStore};
    use store_api::{BackendFactory, KeyValueStore, Result};

    fn memory(dir: &Path) -> Result<Arc<dyn KeyValueStore>> {
        let store = statestore_memory::MemoryFactory.open(dir, &serde_json::Value::Null)?;
        Ok(Arc::from(store))
    }

    mod lru {
        use super::*;

        fn open(dir: &Path) -> Result<Box<dyn KeyValueStore>> {
            Ok(Box::new(LruStore::new(memory(dir)?, 1 << 20)?))
        }

        statestore_conformance::store_suite!(open);
    }

    mod metered {
        use super::*;

        fn open(dir: &Path) -> Result<Box<dyn KeyValueStore>> {
            Ok(Box::new(MeteredStore::new(memory(dir)?, "contract")))
        }

        statestore_conformance::store_suite!(open);
    }
}

/// A metered store's calls and a metered restore, as a Prometheus exporter renders them.
mod metrics_through_prometheus {
    use std::sync::Arc;

    use metrics_exporter_prometheus::PrometheusBuilder;
    use statestore_changelog::{Checkpoint, LoggedStore, LoggedStoreConfig, MemoryLog};
    use statestore_memory::{Config, MemoryStore};
    use statestore_operator_stores::metered::DEFAULT_LATENCY_SAMPLE;
    use statestore_operator_stores::{MeteredRestoreListener, MeteredStore, RecordingLevel};
    use store_api::{KeyValueStore, WriteBatch};

    fn memory() -> Arc<dyn KeyValueStore> {
        Arc::new(MemoryStore::new(Config::default()))
    }

    fn line_value(rendered: &str, prefix: &str) -> f64 {
        find_value(rendered, prefix).unwrap_or_else(|| panic!("no line {prefix} in:\n{rendered}"))
    }

    fn find_value(rendered: &str, prefix: &str) -> Option<f64> {
        let line = rendered.lines().find(|line| line.starts_with(prefix))?;
        let value = line.rsplit(' ').next().expect("a value");
        Some(value.parse().expect("a number"))
    }

    /// Runs `calls` gets on a store made under a fresh recorder at `level` (the default when
    /// `None`), returning (calls counted, calls timed).
    fn gets_counted_and_timed(level: Option<RecordingLevel>, calls: usize) -> (f64, f64) {
        let recorder = PrometheusBuilder::new().build_recorder();
        let store = metrics::with_local_recorder(&recorder, || MeteredStore::new(memory(), "s"));
        let store = match level {
            Some(level) => store.with_recording_level(level),
            None => store,
        };
        for _ in 0..calls {
            store.get(b"k").expect("get");
        }
        let rendered = recorder.handle().render();
        let labels = "{store=\"s\",backend=\"memory\",operation=\"get\"}";
        let counted = line_value(&rendered, &format!("statestore_operations_total{labels}"));
        let timed = find_value(
            &rendered,
            &format!("statestore_operation_seconds_count{labels}"),
        );
        (counted, timed.unwrap_or(0.0))
    }

    #[test]
    fn counts_and_latencies_per_operation() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let store = metrics::with_local_recorder(&recorder, || {
            MeteredStore::new(memory(), "t").with_recording_level(RecordingLevel::EveryLatency)
        });
        store.put(b"a", b"1").unwrap();
        store.put(b"b", b"2").unwrap();
        for key in [b"a", b"b", b"c"] {
            store.get(key).unwrap();
        }
        let mut batch = WriteBatch::new();
        batch
            .put(b"c".to_vec(), b"3".to_vec())
            .delete(b"a".to_vec());
        store.write(batch).unwrap();
        assert_eq!(store.prefix_scan(b"").unwrap().count(), 2);
        store.flush().unwrap();

        let rendered = handle.render();
        let count = |op: &str| {
            let prefix = format!(
                "statestore_operations_total{{store=\"t\",backend=\"memory\",operation=\"{op}\"}}"
            );
            line_value(&rendered, &prefix)
        };
        assert_eq!(count("get"), 3.0);
        assert_eq!(count("put"), 2.0);
        assert_eq!(count("write"), 1.0);
        assert_eq!(count("range"), 1.0);
        assert_eq!(count("flush"), 1.0);
        assert_eq!(count("delete"), 0.0);
        let records = "statestore_batch_records_total{store=\"t\",backend=\"memory\"}";
        assert_eq!(line_value(&rendered, records), 2.0);
        // Latencies are summaries by default: one observation per timed call.
        let gets =
            "statestore_operation_seconds_count{store=\"t\",backend=\"memory\",operation=\"get\"}";
        assert_eq!(line_value(&rendered, gets), 3.0);
        let scans = "statestore_operation_seconds_count{store=\"t\",backend=\"memory\",operation=\"range\"}";
        assert_eq!(
            line_value(&rendered, scans),
            1.0,
            "a scan is timed when its iterator drops"
        );
    }

    /// Whether `timed` of `calls` is a plausible binomial count for one call in `every`:
    /// within six standard deviations of the mean.
    fn about_one_in(every: f64, timed: f64, calls: f64) -> bool {
        let p = 1.0 / every;
        let sigma = (calls * p * (1.0 - p)).sqrt();
        (timed - calls * p).abs() <= 6.0 * sigma
    }

    #[test]
    fn sampling_keeps_counts_exact() {
        let (counted, timed) =
            gets_counted_and_timed(Some(RecordingLevel::SampledLatency(4)), 4096);
        assert_eq!(counted, 4096.0);
        assert!(
            about_one_in(4.0, timed, 4096.0),
            "{timed} of 4096 timed, want about 1 in 4"
        );
    }

    #[test]
    fn default_level_counts_all_and_times_a_sample() {
        let calls = 64.0 * f64::from(DEFAULT_LATENCY_SAMPLE);
        let (counted, timed) = gets_counted_and_timed(None, calls as usize);
        assert_eq!(counted, calls);
        assert!(
            about_one_in(f64::from(DEFAULT_LATENCY_SAMPLE), timed, calls),
            "{timed} of {calls} timed, want about 1 in {DEFAULT_LATENCY_SAMPLE}"
        );
        assert_eq!(
            RecordingLevel::default(),
            RecordingLevel::SampledLatency(DEFAULT_LATENCY_SAMPLE)
        );
    }

    /// Sampling does not fall in step with the workload: alternating gets and puts, both are
    /// timed about one in four.
    #[test]
    fn sampling_times_every_operation_of_a_periodic_workload() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let store = metrics::with_local_recorder(&recorder, || {
            MeteredStore::new(memory(), "p").with_recording_level(RecordingLevel::SampledLatency(4))
        });
        for _ in 0..2048 {
            store.get(b"k").unwrap();
            store.put(b"k", b"v").unwrap();
        }
        let rendered = recorder.handle().render();
        for op in ["get", "put"] {
            let labels = format!("{{store=\"p\",backend=\"memory\",operation=\"{op}\"}}");
            let timed = find_value(
                &rendered,
                &format!("statestore_operation_seconds_count{labels}"),
            );
            let timed = timed.unwrap_or(0.0);
            assert!(
                about_one_in(4.0, timed, 2048.0),
                "{op}: {timed} of 2048 timed"
            );
        }
    }

    #[test]
    fn counts_level_times_nothing() {
        assert_eq!(
            gets_counted_and_timed(Some(RecordingLevel::Counts), 100),
            (100.0, 0.0)
        );
        assert_eq!(
            gets_counted_and_timed(Some(RecordingLevel::SampledLatency(0)), 100),
            (100.0, 0.0)
        );
    }

    #[test]
    fn without_a_recorder_nothing_is_recorded() {
        let unrecorded = MeteredStore::new(memory(), "none");
        assert_eq!(unrecorded.recording_level(), None);
        let under_noop = metrics::with_local_recorder(&metrics::NoopRecorder, || {
            MeteredStore::new(memory(), "noop")
        });
        assert_eq!(under_noop.recording_level(), None);
        let recorder = PrometheusBuilder::new().build_recorder();
        let recorded = metrics::with_local_recorder(&recorder, || MeteredStore::new(memory(), "p"));
        assert_eq!(recorded.recording_level(), Some(RecordingLevel::default()));
        // A level set explicitly holds without a detected recorder (a zero-sized one of the
        // program's own goes undetected).
        let forced = unrecorded.with_recording_level(RecordingLevel::Counts);
        assert_eq!(forced.recording_level(), Some(RecordingLevel::Counts));
        forced.put(b"k", b"v").unwrap();
        assert_eq!(forced.get(b"k").unwrap(), Some(b"v".to_vec()));
    }

    #[test]
    fn restore_records_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let log = MemoryLog::new("metered-restore-changelog", 0);
        let open = |name: &str| {
            Checkpoint::open(dir.path().join(name))
                .map(Arc::new)
                .unwrap()
        };
        let first = LoggedStore::open(
            memory(),
            Arc::new(log.clone()),
            open("a"),
            LoggedStoreConfig::default(),
        )
        .unwrap();
        for key in [b"x", b"y", b"z"] {
            first.put(key, b"v").unwrap();
        }
        first.commit().unwrap();
        drop(first);

        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let mut listener =
            metrics::with_local_recorder(&recorder, || MeteredRestoreListener::new("restored"));
        let restored = LoggedStore::open_with_listener(
            memory(),
            Arc::new(log),
            open("b"),
            LoggedStoreConfig::default(),
            &mut listener,
        )
        .unwrap();
        assert_eq!(restored.get(b"y").unwrap(), Some(b"v".to_vec()));
        let rendered = handle.render();
        let records = "statestore_restore_records_total{store=\"restored\"}";
        assert_eq!(line_value(&rendered, records), 3.0);
        assert_eq!(
            line_value(
                &rendered,
                "statestore_restore_seconds_count{store=\"restored\"}"
            ),
            1.0
        );
    }
}
