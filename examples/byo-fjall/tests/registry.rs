//! fjall, registered at run time, is opened by name wherever a built-in is: the facade,
//! `compare` (beside the four built-ins, at a tiny scale) and the bench harness.

use statestore::{BackendOptions, Registry, RegistryError};
use statestore_benches::compare::{self, CompareArgs, Requirement};
use statestore_benches::{Driver, Fixture, Scale, Workload, prepare};

/// Registers fjall in this test process, unless another test did.
fn registered() {
    statestore_benches::harness::register(&byo_fjall::FjallFactory);
}

#[test]
fn the_facade_opens_fjall_by_name_once_registered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let private = Registry::with_builtins();
    let err = private
        .open("fjall", dir.path(), &BackendOptions::Null)
        .expect_err("not in this registry");
    assert!(
        err.to_string()
            .contains("unknown backend \"fjall\"; registered: memory"),
        "{err}"
    );

    registered();
    assert!(statestore::backend_names().contains(&"fjall"));
    let options = serde_json::json!({ "cache_mb": 8 });
    let store = statestore::open("fjall", dir.path(), &options).expect("open by name");
    assert_eq!(store.name(), "fjall");
    store.put(b"", b"").expect("put the empty key and value");
    assert_eq!(store.get(b"").expect("get"), Some(Vec::new()));
    store.close().expect("close");

    let err = byo_fjall::register().expect_err("registered twice");
    assert_eq!(
        err,
        RegistryError::Duplicate {
            name: "fjall".into()
        }
    );
    let bad = serde_json::json!({ "cache_megabytes": 8 });
    let err = statestore::open("fjall", dir.path(), &bad).expect_err("unknown option");
    assert_eq!(err.kind(), statestore::ErrorKind::InvalidArgument);
}

#[test]
fn compare_runs_fjall_beside_the_builtins() {
    registered();
    let out = tempfile::tempdir().expect("tempdir");
    let args = CompareArgs {
        workloads: vec![Workload::LoadSeq, Workload::GetHit],
        records: 300,
        duration: 0.02,
        require: vec![Requirement::Durable],
        options: Some(
            [("fjall".to_string(), serde_json::json!({ "cache_mb": 8 }))]
                .into_iter()
                .collect(),
        ),
        out: out.path().join("results"),
        ..CompareArgs::default()
    };
    compare::run(&args, Registry::global()).expect("compare");
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.path().join("results/results.json")).expect("results.json"),
    )
    .expect("json");
    let results = json["results"].as_array().expect("results");
    for backend in ["fjall", "memory", "rocksdb", "sled", "redb"] {
        let runs = results.iter().filter(|r| r["backend"] == backend).count();
        assert_eq!(runs, 2, "{backend} ran both workloads");
    }
    for rec in json["recommendations"].as_array().expect("recommendations") {
        assert_ne!(rec["backend"], "memory", "memory is not durable: {rec}");
    }
}

#[test]
fn compare_refuses_an_unknown_name_before_running() {
    let out = tempfile::tempdir().expect("tempdir");
    let args = CompareArgs {
        backends: vec!["leveldb".into()],
        out: out.path().join("results"),
        ..CompareArgs::default()
    };
    let err = compare::run(&args, &Registry::with_builtins()).expect_err("unknown");
    assert!(
        err.to_string().contains("unknown backend \"leveldb\""),
        "{err}"
    );
    assert!(!out.path().join("results").exists(), "nothing ran");
}

#[test]
fn the_bench_harness_runs_workloads_on_fjall() {
    let name = statestore_benches::harness::register(&byo_fjall::FjallFactory);
    assert_eq!(name, "fjall");
    registered();
    let scale = Scale::with_records(500);
    for workload in [Workload::LoadRandom, Workload::YcsbE, Workload::Range10] {
        let fixture = Fixture::open(name).expect("a fixture by name");
        prepare(&fixture.target(), workload, scale, |_| {}).expect("preload");
        let mut driver = Driver::new(workload, scale);
        for _ in 0..50 {
            driver.step(&fixture.target()).expect("step");
        }
    }
}

#[test]
fn the_harness_restores_and_runs_the_window_store_on_fjall() {
    use statestore_benches::restore::{RestoreLog, replay};
    use statestore_benches::window::{FetchSetup, SEGMENT, Segmented, WindowSizes};

    registered();
    let log = RestoreLog::write(Scale::with_records(2_500)).expect("log");
    assert_eq!(log.records().expect("records"), 2_500);
    // A replay that misses records is an error: the replay's own check.
    replay("fjall", &log, 1000).expect("restore into fjall");

    let sizes = WindowSizes::SMALL;
    let setup = FetchSetup::new("fjall", sizes).expect("windows");
    setup.fetch().expect("a fetch of every window");
    setup.raw_range().expect("a range of every window");

    let mut segmented = Segmented::new("fjall", sizes.per_segment).expect("segments");
    let oldest = |segmented: &Segmented| {
        let store = segmented.window_store();
        store
            .fetch(b"key-000000", 0, SEGMENT - 1)
            .expect("fetch")
            .count()
    };
    assert_eq!(oldest(&segmented), 1, "the oldest segment is live");
    segmented.expire_one().expect("expire");
    assert_eq!(oldest(&segmented), 0, "the oldest segment expired");
    segmented.fill().expect("refill");
}
