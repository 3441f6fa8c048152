//! Topologies: an application as a graph of sources, processors and sinks with the stores
//! they use, as Kafka Streams' Processor API builds one (`Topology`, `TopologyDescription`).
//!
//! - [`TopologyBuilder`] adds nodes by name; [`build`](TopologyBuilder::build) checks the
//!   whole graph and answers a [`TopologyError`] naming what is wrong, so nothing fails at
//!   run time for the graph's shape.
//! - Nodes connected through parents, or through a store they share, form a sub-topology, as
//!   Kafka Streams groups them, numbered in the order their first node was added;
//!   [`Topology::describe`] prints them as Kafka Streams' `TopologyDescription` does.
//! - Inside a task a processor's [`forward`](Context::forward) runs its children in the same
//!   call, depth first, passing keys and values as they are: bytes only at sources, sinks and
//!   stores. Everything one input record's processing writes and forwards commits, or fails,
//!   as one unit.
//!
//! [`Application::run_topology`](crate::Application::run_topology) runs a topology with at
//! least one store, its global stores, and sub-topologies joined through repartition topics;
//! task `<sub>_<partition>` runs partition `<partition>` of sub-topology `<sub>`, with its
//! stores.

mod api;
mod build;
mod builder;
mod defs;
mod describe;
mod error;
pub(crate) mod graph;
mod node;
mod topic;

pub use api::{Context, GlobalStoreView, Processor, Record, RecordMetadata};
pub use builder::TopologyBuilder;
pub use describe::TopologyDescription;
pub use error::TopologyError;
use store_api::{Error, Result};
pub use topic::TopicName;

use crate::config::{StoreSpec, SubtopologySpec, TasksConfig};
use defs::DefKind;

/// A built, checked topology (see the [module](self) docs). Cheap to share between threads:
/// each task makes its own processors from it.
pub struct Topology {
    /// Every node, in the order added.
    pub(crate) nodes: Vec<Node>,
    /// The groups that make tasks, by id.
    subtopologies: Vec<Subtopology>,
    /// The global stores, by id.
    global_stores: Vec<GlobalStore>,
    /// The tasks' stores, in the order added.
    stores: Vec<StoreSpec>,
    /// The global stores' specs.
    global_specs: Vec<StoreSpec>,
}

/// A node of a built topology.
pub(crate) struct Node {
    pub name: String,
    pub kind: DefKind,
    pub parents: Vec<usize>,
    /// In the order they were added: the order `forward` calls them.
    pub children: Vec<usize>,
    /// The stores connected to it (processors only).
    pub stores: Vec<String>,
    pub subtopology: u32,
}

/// A group of nodes that runs as one task per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subtopology {
    /// Its number: its tasks are `<id>_<partition>`.
    pub id: u32,
    /// Its nodes, in the order they were added.
    pub nodes: Vec<String>,
    /// The topics its sources read, in the order added.
    pub source_topics: Vec<TopicName>,
    /// The topics its sinks write (those not chosen per record).
    pub sink_topics: Vec<TopicName>,
    /// The stores its processors use.
    pub stores: Vec<String>,
}

/// A store every instance keeps whole from a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalStore {
    /// Its sub-topology number (it makes no task).
    pub id: u32,
    /// The store.
    pub store: String,
    /// Its source node.
    pub source: String,
    /// The topic it is kept from.
    pub topic: String,
    /// The processor that writes it.
    pub processor: String,
}

impl Topology {
    /// The sub-topologies that make tasks, by id.
    pub fn subtopologies(&self) -> &[Subtopology] {
        &self.subtopologies
    }

    /// The global stores.
    pub fn global_stores(&self) -> &[GlobalStore] {
        &self.global_stores
    }

    /// The stores of the tasks, as the configuration declares them.
    pub fn stores(&self) -> &[StoreSpec] {
        &self.stores
    }

    /// The global stores' specs.
    pub fn global_store_specs(&self) -> &[StoreSpec] {
        &self.global_specs
    }

    /// The topology as Kafka Streams' `TopologyDescription` prints it.
    pub fn describe(&self) -> TopologyDescription {
        describe::describe(self)
    }

    /// `config` with the inputs and stores this topology runs on: `input_topics` set to its
    /// sources' topics (of every sub-topology), `repartition_topics` to the repartition
    /// topics among them, `stores` to its stores and `subtopologies` to the topics and stores
    /// of each sub-topology's tasks (each left as it is when it already says the same).
    ///
    /// # Errors
    /// `InvalidArgument` when `config` names other inputs or stores, and for a topology this
    /// runtime cannot run yet (no store).
    pub fn configure(&self, mut config: TasksConfig) -> Result<TasksConfig> {
        if self.stores.is_empty() {
            return Err(Error::invalid(
                "this topology has no store: this version runs topologies with at least one",
            ));
        }
        let app = config.application_id.clone();
        let sources = || self.subtopologies.iter().flat_map(|sub| &sub.source_topics);
        let inputs: Vec<String> = sources().map(|topic| topic.resolve(&app)).collect();
        let repartition: Vec<String> = sources()
            .filter(|topic| matches!(topic, TopicName::Repartition(_)))
            .map(|topic| topic.resolve(&app))
            .collect();
        if !config.input_topics.is_empty() && config.input_topics != inputs {
            return Err(Error::invalid(format!(
                "the configuration reads {:?} but the topology's sources read {inputs:?}",
                config.input_topics
            )));
        }
        if !config.stores.is_empty() && config.stores != self.stores {
            return Err(Error::invalid(
                "the configuration declares stores other than the topology's: leave \
                 `stores` empty and add them to the topology",
            ));
        }
        let subtopologies: Vec<SubtopologySpec> = self
            .subtopologies
            .iter()
            .map(|sub| SubtopologySpec {
                id: sub.id,
                input_topics: sub.source_topics.iter().map(|t| t.resolve(&app)).collect(),
                stores: sub.stores.clone(),
            })
            .collect();
        if !config.subtopologies.is_empty() && config.subtopologies != subtopologies {
            return Err(Error::invalid(
                "the configuration declares sub-topologies other than the topology's: leave \
                 `subtopologies` empty",
            ));
        }
        config.input_topics = inputs;
        config.repartition_topics = repartition;
        config.stores = self.stores.clone();
        config.subtopologies = subtopologies;
        Ok(config)
    }

    /// Checks that `config` is what [`configure`](Self::configure) makes of it.
    pub(crate) fn check(&self, config: &TasksConfig) -> Result<()> {
        let configured = self.configure(config.clone())?;
        if configured.input_topics != config.input_topics
            || configured.repartition_topics != config.repartition_topics
            || configured.stores != config.stores
            || configured.subtopologies != config.subtopologies
        {
            return Err(Error::invalid(
                "the application's configuration was not made by Topology::configure",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
