//! [`TopologyBuilder`]: sources, processors, sinks and stores added by name, checked all at
//! once by [`build`](TopologyBuilder::build).

use std::sync::Arc;

use statestore_operator_stores::{KeyCodec, ValueCodec};

use crate::config::StoreSpec;
use crate::topology::api::{Processor, Record};
use crate::topology::defs::{DefKind, NodeDef, SinkTopic, Types};
use crate::topology::node::{ProcessorNode, SinkNode, SinkTarget, SourceNode, decoder};
use crate::topology::topic::TopicName;
use crate::topology::{Topology, TopologyError, build};

/// A topology, built node by node as Kafka Streams' `Topology` is: sources read topics,
/// processors take their parents' records, sinks write topics, stores are connected to the
/// processors that use them. Nothing is checked until [`build`](TopologyBuilder::build),
/// which checks the whole graph (so nodes may be added in any order).
///
/// ```
/// use statestore_tasks::StoreSpec;
/// use statestore_tasks::operator_stores::Utf8;
/// use statestore_tasks::topology::{Context, Processor, Record, TopologyBuilder};
///
/// /// Splits lines into words, each forwarded keyed by itself.
/// struct Split;
///
/// impl Processor for Split {
///     type KeyIn = String;
///     type ValueIn = String;
///     type KeyOut = String;
///     type ValueOut = String;
///
///     fn process(
///         &mut self,
///         ctx: &mut Context<'_, String, String>,
///         line: Record<String, String>,
///     ) -> statestore_tasks::Result<()> {
///         for word in line.value.clone().unwrap_or_default().split_whitespace() {
///             let word = Some(word.to_owned());
///             ctx.forward(Record::new(word.clone(), word, line.timestamp))?;
///         }
///         Ok(())
///     }
/// }
///
/// let mut builder = TopologyBuilder::new();
/// builder
///     .add_source::<String, String, Utf8, Utf8>("lines", ["text"])
///     .add_processor("split", || Split, ["lines"])
///     .add_sink::<String, String, Utf8, Utf8>("words", "words", ["split"]);
/// let topology = builder.build()?;
/// assert_eq!(topology.subtopologies().len(), 1);
/// # Ok::<(), statestore_tasks::topology::TopologyError>(())
/// ```
#[derive(Default)]
pub struct TopologyBuilder {
    pub(crate) nodes: Vec<NodeDef>,
    /// The tasks' stores.
    pub(crate) stores: Vec<StoreSpec>,
    /// Which processor uses which store: (processor, store).
    pub(crate) connections: Vec<(String, String)>,
    /// The global stores' specs, by their processor's name.
    pub(crate) globals: Vec<StoreSpec>,
}

impl TopologyBuilder {
    /// An empty topology.
    pub fn new() -> Self {
        TopologyBuilder::default()
    }

    /// Adds source `name`, reading `topics` (each a [`TopicName`] or a topic name) and
    /// decoding each record's key with `KC` and its value with `VC` (a null key or value
    /// stays `None`). A record that does not decode fails as a deserialization error (see
    /// [`deserialization_error`](crate::TasksConfig::deserialization_error)).
    pub fn add_source<K, V, KC, VC>(
        &mut self,
        name: &str,
        topics: impl IntoIterator<Item = impl Into<TopicName>>,
    ) -> &mut Self
    where
        K: Clone + 'static,
        V: Clone + 'static,
        KC: KeyCodec<K>,
        VC: ValueCodec<V>,
    {
        self.nodes.push(NodeDef {
            name: name.to_owned(),
            parents: Vec::new(),
            kind: DefKind::Source {
                topics: topics.into_iter().map(Into::into).collect(),
                decode: decoder::<K, V, KC, VC>(),
                make: SourceNode::<K, V>::maker(),
            },
            takes: None,
            forwards: Some(Types::of::<K, V>()),
        });
        self
    }

    /// Adds processor `name`, a child of `parents`; each task makes its own with `supplier`.
    pub fn add_processor<P, S>(
        &mut self,
        name: &str,
        supplier: S,
        parents: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> &mut Self
    where
        P: Processor,
        S: Fn() -> P + Send + Sync + 'static,
    {
        self.nodes.push(NodeDef {
            name: name.to_owned(),
            parents: names(parents),
            kind: DefKind::Processor {
                make: ProcessorNode::maker(supplier),
            },
            takes: Some(Types::of::<P::KeyIn, P::ValueIn>()),
            forwards: Some(Types::of::<P::KeyOut, P::ValueOut>()),
        });
        self
    }

    /// Adds sink `name`, a child of `parents`, writing each record it takes to `topic`, key
    /// encoded with `KC`, value with `VC`, with the record's timestamp and headers, to the
    /// partition of its key (see [`OutputRecord`](crate::OutputRecord)).
    pub fn add_sink<K, V, KC, VC>(
        &mut self,
        name: &str,
        topic: impl Into<TopicName>,
        parents: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> &mut Self
    where
        K: 'static,
        V: 'static,
        KC: KeyCodec<K>,
        VC: ValueCodec<V>,
    {
        let topic = topic.into();
        self.nodes.push(NodeDef {
            name: name.to_owned(),
            parents: names(parents),
            kind: DefKind::Sink {
                topic: SinkTopic::Fixed(topic.clone()),
                make: SinkNode::<K, V, KC, VC>::maker(SinkTarget::Fixed(topic)),
            },
            takes: Some(Types::of::<K, V>()),
            forwards: None,
        });
        self
    }

    /// Adds sink `name`, as [`add_sink`](Self::add_sink) but writing each record to the
    /// topic `extractor` names for it (Kafka's `TopicNameExtractor`).
    pub fn add_sink_with<K, V, KC, VC, E>(
        &mut self,
        name: &str,
        extractor: E,
        parents: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> &mut Self
    where
        K: 'static,
        V: 'static,
        KC: KeyCodec<K>,
        VC: ValueCodec<V>,
        E: Fn(&Record<K, V>) -> String + Send + Sync + 'static,
    {
        self.nodes.push(NodeDef {
            name: name.to_owned(),
            parents: names(parents),
            kind: DefKind::Sink {
                topic: SinkTopic::PerRecord,
                make: SinkNode::<K, V, KC, VC>::maker(SinkTarget::PerRecord(Arc::new(extractor))),
            },
            takes: Some(Types::of::<K, V>()),
            forwards: None,
        });
        self
    }

    /// Adds store `spec` of every task, connected to `processors` (more can be connected
    /// with [`connect_stores`](Self::connect_stores)). Processors sharing a store run in
    /// one sub-topology.
    pub fn add_store(
        &mut self,
        spec: StoreSpec,
        processors: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> &mut Self {
        for processor in names(processors) {
            self.connections.push((processor, spec.name.clone()));
        }
        self.stores.push(spec);
        self
    }

    /// Connects processor `processor` to `stores`, added before or after.
    pub fn connect_stores(
        &mut self,
        processor: &str,
        stores: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> &mut Self {
        for store in names(stores) {
            self.connections.push((processor.to_owned(), store));
        }
        self
    }

    /// Adds global store `spec`: every instance keeps all of it from `topic`, read by source
    /// `source` and written by processor `processor` (the two nodes Kafka Streams describes):
    /// each record puts its value under its key, a null value deletes the key, a record
    /// without a key is skipped, as Kafka Streams keeps a global table. Keys and values are
    /// the topic's bytes. It has no changelog whatever `spec` says: the topic is its log
    /// (KIP-813). Processors read it with [`Context::global_store`](crate::topology::Context::global_store).
    pub fn add_global_store(
        &mut self,
        spec: StoreSpec,
        source: &str,
        topic: &str,
        processor: &str,
    ) -> &mut Self {
        self.nodes.push(NodeDef {
            name: source.to_owned(),
            parents: Vec::new(),
            kind: DefKind::GlobalSource {
                topic: topic.to_owned(),
            },
            takes: None,
            forwards: None,
        });
        self.nodes.push(NodeDef {
            name: processor.to_owned(),
            parents: vec![source.to_owned()],
            kind: DefKind::GlobalProcessor {
                store: spec.name.clone(),
            },
            takes: None,
            forwards: None,
        });
        self.globals.push(spec.with_logging(false));
        self
    }

    /// Checks the whole graph and groups it into sub-topologies.
    ///
    /// # Errors
    /// The first [`TopologyError`] found: a duplicate or unknown name, a cycle, a topic read
    /// twice, a type mismatch between a parent and a child, a store no processor uses, ...
    pub fn build(self) -> Result<Topology, TopologyError> {
        build::build(build::Parts {
            nodes: self.nodes,
            stores: self.stores,
            connections: self.connections,
            globals: self.globals,
        })
    }
}

fn names(names: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<String> {
    names
        .into_iter()
        .map(|name| name.as_ref().to_owned())
        .collect()
}
