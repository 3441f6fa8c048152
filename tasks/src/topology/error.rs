//! What building a topology finds wrong, each naming the node, store or topic.

/// A topology that cannot be built: returned by
/// [`TopologyBuilder::build`](crate::topology::TopologyBuilder::build), which checks the
/// whole graph at once, so nothing is found wrong at run time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// No source: the topology reads nothing.
    #[error("the topology has no source")]
    NoSource,
    /// Two nodes (sources, processors, sinks, global stores' nodes) share a name.
    #[error("node {name:?} is added twice")]
    DuplicateNode {
        /// The name.
        name: String,
    },
    /// A source with no topic.
    #[error("source {node:?} names no topic")]
    NoTopic {
        /// The source.
        node: String,
    },
    /// Two sources read one topic (Kafka Streams' "Topic ... has already been registered
    /// by another source").
    #[error("topic {topic:?} is read by sources {first:?} and {second:?}")]
    TopicReadTwice {
        /// The topic.
        topic: String,
        /// The source added first.
        first: String,
        /// The other source.
        second: String,
    },
    /// A processor or sink without a parent.
    #[error("{node:?} has no parent: a processor or a sink needs at least one")]
    NoParent {
        /// The node.
        node: String,
    },
    /// A parent that is not in the topology.
    #[error("{node:?} names parent {parent:?}, which is not in the topology")]
    UnknownParent {
        /// The node.
        node: String,
        /// The missing parent.
        parent: String,
    },
    /// A sink, which forwards nothing, named as a parent.
    #[error("{node:?} names sink {parent:?} as its parent: a sink has no children")]
    SinkAsParent {
        /// The node.
        node: String,
        /// The sink.
        parent: String,
    },
    /// A global store's source or processor named as a parent: a global store's nodes only
    /// keep the store.
    #[error("{node:?} names {parent:?}, a global store's node, as its parent")]
    GlobalNodeAsParent {
        /// The node.
        node: String,
        /// The global store's node.
        parent: String,
    },
    /// Nodes that are their own ancestors.
    #[error("the nodes {nodes:?} form a cycle")]
    Cycle {
        /// The nodes of the cycle, in order.
        nodes: Vec<String>,
    },
    /// A parent whose output is not what the child takes.
    #[error("{node:?} takes ({expected}) but its parent {parent:?} forwards ({found})")]
    TypeMismatch {
        /// The child.
        node: String,
        /// The parent.
        parent: String,
        /// The key and value types the child takes.
        expected: String,
        /// The key and value types the parent forwards.
        found: String,
    },
    /// Two stores (or a store and a global store) share a name.
    #[error("store {store:?} is added twice")]
    DuplicateStore {
        /// The store.
        store: String,
    },
    /// A processor connected to a store the topology does not have.
    #[error("{node:?} uses store {store:?}, which is not added")]
    UnknownStore {
        /// The processor.
        node: String,
        /// The store.
        store: String,
    },
    /// A store connected to a processor the topology does not have.
    #[error("store {store:?} is connected to {node:?}, which is not in the topology")]
    UnknownProcessor {
        /// The missing processor.
        node: String,
        /// The store.
        store: String,
    },
    /// A store connected to a node that is not a processor.
    #[error("store {store:?} is connected to {node:?}, which is not a processor")]
    StoreOnNonProcessor {
        /// The node.
        node: String,
        /// The store.
        store: String,
    },
    /// A store no processor uses.
    #[error("store {store:?} is used by no processor")]
    UnusedStore {
        /// The store.
        store: String,
    },
    /// A global store's processor connected to another store, or a task's processor
    /// connected to a global store (it reads global stores without a connection).
    #[error(
        "{node:?} is connected to global store {store:?}: global stores are only kept by their own processor"
    )]
    GlobalStoreConnected {
        /// The processor.
        node: String,
        /// The global store.
        store: String,
    },
    /// A name Kafka cannot take as part of a topic name (`[a-zA-Z0-9._-]`).
    #[error("{what} {name:?} is not a valid part of a topic name (letters, digits, '.', '_', '-')")]
    InvalidName {
        /// What the name is of: a store, a repartition topic.
        what: &'static str,
        /// The name.
        name: String,
    },
}

impl From<TopologyError> for store_api::Error {
    fn from(err: TopologyError) -> Self {
        store_api::Error::invalid(err.to_string())
    }
}
