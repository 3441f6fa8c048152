//! The nodes of a topology as added, before the graph is checked: what each is, what it
//! takes and forwards.

use std::any::{TypeId, type_name};

use crate::topology::node::{Decode, MakeNode};
use crate::topology::topic::TopicName;

/// A key type and a value type, compared between a parent and its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Types {
    key: TypeId,
    value: TypeId,
    key_name: &'static str,
    value_name: &'static str,
}

impl Types {
    pub(crate) fn of<K: 'static, V: 'static>() -> Self {
        Types {
            key: TypeId::of::<K>(),
            value: TypeId::of::<V>(),
            key_name: type_name::<K>(),
            value_name: type_name::<V>(),
        }
    }

    pub(crate) fn same(&self, other: &Types) -> bool {
        self.key == other.key && self.value == other.value
    }
}

impl std::fmt::Display for Types {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, {}", self.key_name, self.value_name)
    }
}

/// Where a sink sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SinkTopic {
    Fixed(TopicName),
    /// Chosen per record by the sink's function.
    PerRecord,
}

/// A node as added, before the graph is checked.
pub(crate) struct NodeDef {
    pub name: String,
    pub parents: Vec<String>,
    pub kind: DefKind,
    /// What it takes (`None`: a source).
    pub takes: Option<Types>,
    /// What it forwards (`None`: a sink).
    pub forwards: Option<Types>,
}

pub(crate) enum DefKind {
    Source {
        topics: Vec<TopicName>,
        decode: Decode,
        make: MakeNode,
    },
    Processor {
        make: MakeNode,
    },
    Sink {
        topic: SinkTopic,
        make: MakeNode,
    },
    /// The source of a global store: it reads the store's topic on every instance.
    GlobalSource {
        topic: String,
    },
    /// The processor that keeps a global store from its source's records.
    GlobalProcessor {
        store: String,
    },
}
