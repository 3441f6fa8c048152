//! Backends registered at run time run in `compare` and the bench harness by name, and names
//! that are not registered are refused before anything runs.

use std::path::Path;

use statestore::{BackendFactory, BackendOptions, KeyValueStore, Registry, Result};
use statestore_benches::compare::{self, CompareArgs, Requirement};
use statestore_benches::{Driver, Fixture, Scale, Workload, prepare};

/// A backend from outside the workspace: the memory store under another name.
#[derive(Debug)]
struct Mine;

impl BackendFactory for Mine {
    fn name(&self) -> &'static str {
        "mine"
    }

    fn open(&self, dir: &Path, options: &BackendOptions) -> Result<Box<dyn KeyValueStore>> {
        Registry::with_builtins().open("memory", dir, options)
    }
}

fn results(dir: &Path) -> serde_json::Value {
    let bytes = std::fs::read(dir.join("results.json")).expect("results.json");
    serde_json::from_slice(&bytes).expect("json")
}

#[test]
fn compare_runs_a_backend_of_its_registry() {
    let registry = Registry::with_builtins();
    registry.register(&Mine).expect("register");
    let out = tempfile::tempdir().expect("tempdir");
    let args = CompareArgs {
        workloads: vec![Workload::PutRandom, Workload::GetHit],
        backends: vec!["mine".into(), "redb".into()],
        records: 200,
        duration: 0.02,
        value_size: Some(4000),
        options: Some(
            [(
                "mine".to_string(),
                serde_json::json!({ "iterator_batch": 16 }),
            )]
            .into_iter()
            .collect(),
        ),
        require: vec![Requirement::Durable],
        out: out.path().to_path_buf(),
        ..CompareArgs::default()
    };
    compare::run(&args, &registry).expect("compare");
    let json = results(out.path());
    let rows = json["results"].as_array().expect("results");
    assert_eq!(rows.len(), 4);
    assert_eq!(rows.iter().filter(|r| r["backend"] == "mine").count(), 2);
    let recs = json["recommendations"].as_array().expect("recommendations");
    assert_eq!(recs.len(), 2);
    assert!(recs.iter().all(|r| r["backend"] == "redb"), "{recs:?}");
}

#[test]
fn compare_refuses_unknown_names_and_options_before_running() {
    let out = tempfile::tempdir().expect("tempdir");
    let unknown = CompareArgs {
        backends: vec!["leveldb".into()],
        out: out.path().join("a"),
        ..CompareArgs::default()
    };
    let err = compare::run(&unknown, &Registry::with_builtins()).expect_err("unknown");
    assert!(
        err.to_string()
            .starts_with("unknown backend \"leveldb\"; registered: memory"),
        "{err}"
    );
    let options_for_unknown = CompareArgs {
        backends: vec!["memory".into()],
        options: Some([("leveldb".to_string(), serde_json::Value::Null)].into()),
        out: out.path().join("b"),
        ..CompareArgs::default()
    };
    let err = compare::run(&options_for_unknown, &Registry::with_builtins()).expect_err("options");
    assert!(err.to_string().contains("leveldb"), "{err}");
    assert!(!out.path().join("a").exists() && !out.path().join("b").exists());
}

#[test]
fn the_harness_opens_a_registered_backend_by_name() {
    assert_eq!(statestore_benches::harness::register(&Mine), "mine");
    // Setting up twice (a second bench group, another test) is not an error.
    assert_eq!(statestore_benches::harness::register(&Mine), "mine");
    let scale = Scale::with_records(300).with_value_len(2000);
    let fixture = Fixture::open("mine").expect("by name");
    prepare(&fixture.target(), Workload::GetHit, scale, |_| {}).expect("preload");
    let mut driver = Driver::new(Workload::YcsbA, scale);
    for _ in 0..100 {
        driver.step(&fixture.target()).expect("step");
    }
    let mut longest = 0;
    fixture
        .store()
        .scan(
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            false,
            &mut |_, value| {
                longest = longest.max(value.len());
                std::ops::ControlFlow::Continue(())
            },
        )
        .expect("scan");
    assert_eq!(longest, 2000, "--value-size reaches the stored values");
}
