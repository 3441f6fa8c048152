//! What building checks: each mistake in a graph is a typed error naming its node.

use statestore_operator_stores::{BigEndian, Utf8};

use super::{Context, Processor, Record, TopicName, TopologyBuilder, TopologyError};
use crate::config::StoreSpec;

/// Takes strings, forwards strings.
struct Strings;

impl Processor for Strings {
    type KeyIn = String;
    type ValueIn = String;
    type KeyOut = String;
    type ValueOut = String;

    fn process(
        &mut self,
        _: &mut Context<'_, String, String>,
        _: Record<String, String>,
    ) -> store_api::Result<()> {
        Ok(())
    }
}

/// Takes strings keyed by numbers.
struct Numbered;

impl Processor for Numbered {
    type KeyIn = u64;
    type ValueIn = String;
    type KeyOut = u64;
    type ValueOut = String;

    fn process(
        &mut self,
        _: &mut Context<'_, u64, String>,
        _: Record<u64, String>,
    ) -> store_api::Result<()> {
        Ok(())
    }
}

fn source(t: &mut TopologyBuilder, name: &str, topic: &str) {
    t.add_source::<String, String, Utf8, Utf8>(name, [topic]);
}

fn built(t: TopologyBuilder) -> TopologyError {
    match t.build() {
        Ok(_) => panic!("built"),
        Err(err) => err,
    }
}

fn s(name: &str) -> String {
    name.to_owned()
}

#[test]
fn an_empty_topology_has_no_source() {
    assert_eq!(built(TopologyBuilder::new()), TopologyError::NoSource);
}

#[test]
fn names_are_unique() {
    let mut t = TopologyBuilder::new();
    source(&mut t, "a", "in");
    t.add_processor("a", || Strings, ["a"]);
    assert_eq!(built(t), TopologyError::DuplicateNode { name: s("a") });
}

#[test]
fn a_topic_is_read_by_one_source() {
    let mut t = TopologyBuilder::new();
    source(&mut t, "a", "in");
    source(&mut t, "b", "in");
    let err = built(t);
    assert_eq!(
        err,
        TopologyError::TopicReadTwice {
            topic: s("in"),
            first: s("a"),
            second: s("b")
        }
    );
    let mut t = TopologyBuilder::new();
    t.add_source::<String, String, Utf8, Utf8>("a", Vec::<String>::new());
    assert_eq!(built(t), TopologyError::NoTopic { node: s("a") });
}

#[test]
fn parents_are_known_and_never_sinks() {
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("p", || Strings, ["nowhere"]);
    assert_eq!(
        built(t),
        TopologyError::UnknownParent {
            node: s("p"),
            parent: s("nowhere")
        }
    );
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("p", || Strings, Vec::<String>::new());
    assert_eq!(built(t), TopologyError::NoParent { node: s("p") });
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_sink::<String, String, Utf8, Utf8>("out", "out", ["in"])
        .add_processor("p", || Strings, ["out"]);
    assert_eq!(
        built(t),
        TopologyError::SinkAsParent {
            node: s("p"),
            parent: s("out")
        }
    );
}

#[test]
fn a_cycle_is_named_in_order() {
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("a", || Strings, ["in", "c"])
        .add_processor("b", || Strings, ["a"])
        .add_processor("c", || Strings, ["b"]);
    assert_eq!(
        built(t),
        TopologyError::Cycle {
            nodes: vec![s("a"), s("b"), s("c")]
        }
    );
}

#[test]
fn a_child_takes_what_its_parent_forwards() {
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("numbers", || Numbered, ["in"]);
    let TopologyError::TypeMismatch {
        node,
        parent,
        expected,
        found,
    } = built(t)
    else {
        panic!("not a type mismatch");
    };
    assert_eq!((node.as_str(), parent.as_str()), ("numbers", "in"));
    assert_eq!(expected, "u64, alloc::string::String");
    assert_eq!(found, "alloc::string::String, alloc::string::String");
    // A sink's codecs' types are checked too.
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_sink::<u64, String, BigEndian, Utf8>("out", "out", ["in"]);
    assert!(matches!(built(t), TopologyError::TypeMismatch { node, .. } if node == "out"));
}

#[test]
fn every_store_is_connected_to_a_processor() {
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("p", || Strings, ["in"])
        .add_store(StoreSpec::new("idle", "memory"), Vec::<String>::new());
    assert_eq!(built(t), TopologyError::UnusedStore { store: s("idle") });

    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("p", || Strings, ["in"])
        .connect_stores("p", ["missing"]);
    assert_eq!(
        built(t),
        TopologyError::UnknownStore {
            node: s("p"),
            store: s("missing")
        }
    );

    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_store(StoreSpec::new("st", "memory"), ["in"]);
    assert_eq!(
        built(t),
        TopologyError::StoreOnNonProcessor {
            node: s("in"),
            store: s("st")
        }
    );

    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_store(StoreSpec::new("st", "memory"), ["ghost"]);
    assert_eq!(
        built(t),
        TopologyError::UnknownProcessor {
            node: s("ghost"),
            store: s("st")
        }
    );

    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("p", || Strings, ["in"])
        .add_store(StoreSpec::new("st", "memory"), ["p"])
        .add_store(StoreSpec::new("st", "memory"), ["p"]);
    assert_eq!(built(t), TopologyError::DuplicateStore { store: s("st") });

    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    t.add_processor("p", || Strings, ["in"])
        .add_store(StoreSpec::new("a/b", "memory"), ["p"]);
    assert_eq!(
        built(t),
        TopologyError::InvalidName {
            what: "store",
            name: s("a/b")
        }
    );
}

#[test]
fn global_stores_are_kept_by_their_own_processor_only() {
    let global = |t: &mut TopologyBuilder| {
        t.add_global_store(
            StoreSpec::new("customers", "memory"),
            "customers-in",
            "customers",
            "keeper",
        );
    };
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    global(&mut t);
    t.add_processor("p", || Strings, ["in"])
        .connect_stores("p", ["customers"]);
    assert_eq!(
        built(t),
        TopologyError::GlobalStoreConnected {
            node: s("p"),
            store: s("customers")
        }
    );
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    global(&mut t);
    t.add_processor("p", || Strings, ["keeper"]);
    assert_eq!(
        built(t),
        TopologyError::GlobalNodeAsParent {
            node: s("p"),
            parent: s("keeper")
        }
    );
    let mut t = TopologyBuilder::new();
    source(&mut t, "in", "in");
    global(&mut t);
    let topology = t.build().expect("builds");
    assert!(
        !topology.global_store_specs()[0].logging,
        "a global store has no changelog"
    );
}

/// Kafka Streams' grouping: parents and shared stores unite nodes; the ids follow the
/// order nodes were added; a repartition topic joins two sub-topologies by name only.
#[test]
fn nodes_group_into_subtopologies_as_kafka_streams_groups_them() {
    let mut t = TopologyBuilder::new();
    source(&mut t, "a", "a");
    t.add_processor("pa", || Strings, ["a"]);
    t.add_sink::<String, String, Utf8, Utf8>("to-r", TopicName::repartition("r"), ["pa"]);
    t.add_source::<String, String, Utf8, Utf8>("r", [TopicName::repartition("r")]);
    t.add_processor("pr", || Strings, ["r"]);
    source(&mut t, "b", "b");
    t.add_processor("pb", || Strings, ["b"]);
    t.add_store(StoreSpec::new("shared", "memory"), ["pr", "pb"]);
    let topology = t.build().expect("builds");
    let groups: Vec<(u32, Vec<String>)> = topology
        .subtopologies()
        .iter()
        .map(|sub| (sub.id, sub.nodes.clone()))
        .collect();
    assert_eq!(
        groups,
        [
            (0, vec![s("a"), s("pa"), s("to-r")]),
            (1, vec![s("r"), s("pr"), s("b"), s("pb")]),
        ]
    );
    assert_eq!(
        topology.subtopologies()[1].source_topics,
        [TopicName::repartition("r"), TopicName::from("b")]
    );
    assert_eq!(
        TopicName::repartition("r").resolve("app"),
        "app-r-repartition"
    );
    let config = topology
        .configure(crate::TasksConfig {
            application_id: "app".into(),
            ..crate::TasksConfig::default()
        })
        .expect("configures");
    assert_eq!(config.input_topics, ["a", "app-r-repartition", "b"]);
    assert_eq!(config.repartition_topics, ["app-r-repartition"]);
}
