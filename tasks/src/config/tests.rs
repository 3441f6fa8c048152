//! The configuration's checks and defaults.

use std::collections::BTreeMap;

use super::validate::{MIN_INSYNC, validate_group_instance_id};
use super::*;

fn valid() -> TasksConfig {
    TasksConfig {
        application_id: "app".into(),
        input_topics: vec!["input".into()],
        stores: vec![StoreSpec::new("counts", "memory")],
        ..TasksConfig::default()
    }
}

#[test]
fn debug_hides_secret_properties() {
    let config = TasksConfig {
        properties: BTreeMap::from([
            ("sasl.password".to_owned(), "hunter2".to_owned()),
            ("sasl.username".to_owned(), "alice".to_owned()),
        ]),
        ..valid()
    };
    let printed = format!("{config:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(printed.contains("alice"), "{printed}");
    assert!(printed.contains("max_poll_records"), "{printed}");
}

#[test]
fn dead_letters_need_a_topic_that_is_not_an_input() {
    let err = TasksConfig {
        processing_error: ErrorAction::DeadLetter,
        ..valid()
    }
    .validate()
    .expect_err("no topic");
    assert!(err.to_string().contains("dead_letter_topic"), "{err}");
    let err = TasksConfig {
        deserialization_error: ErrorAction::DeadLetter,
        dead_letter_topic: Some("input".into()),
        ..valid()
    }
    .validate()
    .expect_err("an input topic");
    assert!(err.to_string().contains("input topic"), "{err}");
    TasksConfig {
        deserialization_error: ErrorAction::DeadLetter,
        dead_letter_topic: Some("failed".into()),
        ..valid()
    }
    .validate()
    .expect("a topic of its own");
}

#[test]
fn application_ids_follow_kafka_streams() {
    for good in ["a", "word-count_v1.2", "A9"] {
        validate_application_id(good).expect(good);
    }
    for bad in ["", ".", "..", "a b", "a/b", "wörd", "a:b", "a\0"] {
        let err = validate_application_id(bad).expect_err(bad);
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("application_id"), "{err}");
    }
}

#[test]
fn validation_names_the_bad_option() {
    valid().validate().expect("valid");
    TasksConfig {
        input_topics: vec!["clicks".into(), "views".into()],
        ..valid()
    }
    .validate()
    .expect("co-partitioned topics under range assignment");
    let cases: Vec<(TasksConfig, &str)> = vec![
        (
            TasksConfig {
                input_topics: vec![],
                ..valid()
            },
            "no input topic",
        ),
        (
            TasksConfig {
                input_topics: vec!["a".into(), "b".into()],
                assignment_strategy: AssignmentStrategy::CooperativeSticky,
                ..valid()
            },
            "2 input topics are configured with assignment_strategy \"cooperative-sticky\"",
        ),
        (
            TasksConfig {
                input_topics: vec!["a".into(), "b".into(), "a".into()],
                ..valid()
            },
            "input topic \"a\" is configured twice",
        ),
        (
            TasksConfig {
                input_topics: vec!["a".into(), "b/c".into()],
                ..valid()
            },
            "\"b/c\" is not a Kafka topic name",
        ),
        (
            TasksConfig {
                input_topics: vec!["input".into(), "app-counts-changelog".into()],
                ..valid()
            },
            "\"app-counts-changelog\" is the changelog topic of store \"counts\"",
        ),
        (
            TasksConfig {
                stores: vec![StoreSpec::new("s", "nope")],
                ..valid()
            },
            "unknown backend",
        ),
        (
            TasksConfig {
                stores: vec![StoreSpec::new("s", "memory"), StoreSpec::new("s", "memory")],
                ..valid()
            },
            "configured twice",
        ),
        (
            TasksConfig {
                heartbeat_interval_ms: 50_000,
                ..valid()
            },
            "heartbeat_interval_ms",
        ),
        (
            TasksConfig {
                commit_interval_ms: 0,
                ..valid()
            },
            "commit_interval_ms",
        ),
        (
            TasksConfig {
                restore_parallelism: 0,
                ..valid()
            },
            "restore_parallelism",
        ),
        (
            TasksConfig {
                transaction_timeout_ms: 999,
                ..valid()
            },
            "transaction_timeout_ms must be between 1000 and 900000",
        ),
    ];
    for (config, expected) in cases {
        let err = config.validate().expect_err(expected);
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
        assert!(err.to_string().contains(expected), "{err}");
    }
}

#[test]
fn defaults_are_kafka_streams_defaults() {
    let config = TasksConfig::default();
    assert_eq!(config.commit_interval(), Duration::from_secs(30));
    assert_eq!(config.num_standby_replicas, 0);
    assert_eq!(config.state_cleanup_delay(), Duration::from_secs(600));
}

#[test]
fn group_instance_ids_follow_kafka() {
    for good in ["host-1", "a", "web_3.eu-west", &"i".repeat(249)] {
        validate_group_instance_id(good).expect(good);
    }
    for bad in ["", "a b", "host/1", "wörd", "a:b", &"i".repeat(250)] {
        let err = validate_group_instance_id(bad).expect_err(bad);
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("group_instance_id"), "{err}");
    }
}

#[test]
fn client_ids_are_set_through_client_id_with_kafkas_characters() {
    TasksConfig {
        client_id: Some("shop.eu-1".into()),
        ..valid()
    }
    .validate()
    .expect("a good client id");
    let err = TasksConfig {
        client_id: Some("shop 1".into()),
        ..valid()
    }
    .validate()
    .expect_err("a space");
    assert!(err.to_string().contains("client_id"), "{err}");
    let err = TasksConfig {
        properties: BTreeMap::from([("client.id".to_owned(), "x".to_owned())]),
        ..valid()
    }
    .validate()
    .expect_err("client.id as a property");
    assert!(err.to_string().contains("client_id field"), "{err}");
}

#[test]
fn changelogs_take_the_applications_min_insync_unless_the_store_names_one() {
    let mut own = StoreSpec::new("own", "memory");
    own.topic_properties.insert(MIN_INSYNC.into(), "1".into());
    let config = TasksConfig {
        min_insync_replicas: Some(2),
        stores: vec![StoreSpec::new("counts", "memory"), own],
        ..valid()
    };
    config.validate().expect("valid");
    let properties = |store| {
        config
            .changelog_config(&config.stores[store], 1)
            .topic_properties
    };
    assert_eq!(properties(0)[MIN_INSYNC], "2");
    assert_eq!(properties(1)[MIN_INSYNC], "1");
    let plain = valid();
    let changelog = plain.changelog_config(&plain.stores[0], 1);
    assert!(!changelog.topic_properties.contains_key(MIN_INSYNC));
    assert_eq!(changelog.replication_factor, -1, "the broker's default");
}

#[test]
fn min_insync_is_at_least_one_and_at_most_the_replicas() {
    let mut two = StoreSpec::new("two", "memory");
    two.replication_factor = Some(2);
    let mut word = StoreSpec::new("word", "memory");
    word.topic_properties
        .insert(MIN_INSYNC.into(), "two".into());
    let cases = [
        (
            TasksConfig {
                min_insync_replicas: Some(0),
                ..valid()
            },
            "min_insync_replicas must be at least 1",
        ),
        (
            TasksConfig {
                min_insync_replicas: Some(3),
                stores: vec![two.clone()],
                ..valid()
            },
            "store \"two\": min.insync.replicas 3 exceeds",
        ),
        (
            TasksConfig {
                stores: vec![word],
                ..valid()
            },
            "not \"two\"",
        ),
    ];
    for (config, expected) in cases {
        let err = config.validate().expect_err(expected);
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument);
        assert!(err.to_string().contains(expected), "{err}");
    }
    // With the broker's replication factor (-1) there is nothing to compare with.
    TasksConfig {
        min_insync_replicas: Some(3),
        ..valid()
    }
    .validate()
    .expect("unknown replication factor");
}

#[test]
fn the_processing_guarantee_is_at_least_once_unless_set_by_kafka_streams_name() {
    let config = TasksConfig::default();
    assert_eq!(
        config.processing_guarantee,
        ProcessingGuarantee::AtLeastOnce
    );
    assert!(!config.exactly_once());
    assert_eq!(config.transaction_timeout(), Duration::from_secs(10));
    assert_eq!(config.effective_commit_interval(), Duration::from_secs(30));
    let eos = TasksConfig {
        processing_guarantee: ProcessingGuarantee::ExactlyOnceV2,
        ..TasksConfig::default()
    };
    assert_eq!(eos.effective_commit_interval(), Duration::from_secs(5));
    for (name, guarantee) in [
        ("at_least_once", ProcessingGuarantee::AtLeastOnce),
        ("exactly_once_v2", ProcessingGuarantee::ExactlyOnceV2),
    ] {
        let parsed: ProcessingGuarantee = serde_json::from_str(&format!("{name:?}")).expect(name);
        assert_eq!(parsed, guarantee);
    }
    serde_json::from_str::<ProcessingGuarantee>("\"exactly_once\"")
        .expect_err("the deprecated exactly_once (v1) is not offered");
}

#[test]
fn ttl_stores_are_declared_in_the_store_spec() {
    use statestore_operator_stores::{TtlClock, TtlStore, TypedStore};

    let spec: StoreSpec = serde_json::from_value(serde_json::json!({
        "name": "sessions",
        "backend": "memory",
        "kind": { "type": "ttl", "ttl_ms": 60000, "clock": "wall-clock" },
    }))
    .expect("a TTL store spec");
    let ttl = spec.kind.ttl_config().expect("TTL options");
    assert_eq!((ttl.ttl_ms, ttl.clock), (Some(60_000), TtlClock::WallClock));
    let stream: StoreKind =
        serde_json::from_value(serde_json::json!({ "type": "ttl", "ttl_ms": 5 })).expect("kind");
    assert_eq!(
        stream.ttl_config().map(|config| config.clock),
        Some(TtlClock::StreamTime),
        "stream time by default"
    );
    let config = TasksConfig {
        stores: vec![spec],
        ..valid()
    };
    config.validate().expect("valid");
    crate::StoreHandle::<TtlStore>::new(&config, "sessions").expect("reached as a TTL store");
    crate::StoreHandle::<TypedStore<String, u64>>::new(&config, "sessions")
        .expect("reached as a typed store over it");
    assert!(crate::StoreHandle::<crate::TaskKv>::new(&config, "sessions").is_err());
    for bad in [
        StoreKind::Ttl {
            ttl_ms: 0,
            clock: TtlClock::StreamTime,
            sweep_interval_ms: None,
        },
        StoreKind::Ttl {
            ttl_ms: 10,
            clock: TtlClock::StreamTime,
            sweep_interval_ms: Some(-1),
        },
    ] {
        let err = TasksConfig {
            stores: vec![StoreSpec::new("sessions", "memory").with_kind(bad)],
            ..valid()
        }
        .validate()
        .expect_err("bad TTL options");
        assert!(err.to_string().contains("sessions"), "{err}");
    }
}

#[test]
fn a_bad_snapshot_table_is_an_invalid_argument_before_anything_starts() {
    let with = |url: &str, keep: usize| TasksConfig {
        snapshots: Some(statestore_changelog::SnapshotConfig {
            url: url.into(),
            keep,
            ..statestore_changelog::SnapshotConfig::default()
        }),
        ..valid()
    };
    with("file:///var/lib/app/snapshots", 2)
        .validate()
        .expect("a file URL");
    for (config, expected) in [
        (with("", 3), "snapshots: url \"\""),
        (with("not a url", 3), "snapshots: url \"not a url\""),
        (
            with("gopher://host/x", 3),
            "snapshots: url \"gopher://host/x\"",
        ),
        (
            with("file:///var/lib/app/snapshots", 0),
            "`keep` must be at least 1",
        ),
    ] {
        let err = config.validate().expect_err(expected);
        assert_eq!(err.kind(), store_api::ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains(expected), "{err}");
    }
}

/// Each input topic and each store belongs to exactly one sub-topology, whose tasks hold it.
#[test]
fn sub_topologies_split_the_inputs_and_stores_between_them() {
    let sub = |id, topics: &[&str], stores: &[&str]| SubtopologySpec {
        id,
        input_topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        stores: stores.iter().map(|s| (*s).to_owned()).collect(),
    };
    let config = TasksConfig {
        input_topics: vec!["lines".into(), "words".into()],
        stores: vec![StoreSpec::new("counts", "memory")],
        subtopologies: vec![sub(0, &["lines"], &[]), sub(1, &["words"], &["counts"])],
        ..valid()
    };
    config.validate().expect("valid");
    let shapes = config.task_shapes();
    assert_eq!(shapes.len(), 2);
    assert_eq!(
        (shapes[0].topics.clone(), shapes[0].stores.len()),
        (vec!["lines".to_owned()], 0)
    );
    assert_eq!(shapes[1].stores[0].name, "counts");
    let cases = [
        (
            vec![
                sub(0, &["lines", "words"], &[]),
                sub(1, &["words"], &["counts"]),
            ],
            "\"words\" is in sub-topologies 0 and 1",
        ),
        (
            vec![sub(0, &["lines"], &[])],
            "\"words\" is in no sub-topology",
        ),
        (
            vec![sub(0, &["lines"], &[]), sub(1, &["words"], &[])],
            "\"counts\" is in no sub-topology",
        ),
        (
            vec![sub(0, &["lines"], &[]), sub(0, &["words"], &["counts"])],
            "sub-topology 0 is configured twice",
        ),
        (
            vec![
                sub(0, &["lines"], &["other"]),
                sub(1, &["words"], &["counts"]),
            ],
            "\"other\" is not a configured store",
        ),
        (
            vec![sub(0, &[], &[]), sub(1, &["lines", "words"], &["counts"])],
            "reads no input topic",
        ),
    ];
    for (subtopologies, why) in cases {
        let err = TasksConfig {
            subtopologies,
            ..config.clone()
        }
        .validate()
        .expect_err(why);
        assert!(err.to_string().contains(why), "{err} (expected {why})");
    }
    // Without sub-topologies, one holds every input and store.
    let plain = TasksConfig {
        subtopologies: Vec::new(),
        ..config
    };
    assert_eq!(plain.task_shapes()[0].topics.len(), 2);
}
