//! A topology running inside one task: its nodes made for the task, records passed from
//! parent to child as they are, depth first, and the whole driven as the task's
//! [`Processor`](crate::Processor), so that one input record's processing through every
//! node is one call: committed, rolled back and handled as one unit.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

use statestore_changelog::TaskId;
use store_api::{Error, KeyValueStore, Result};

use crate::processor::{Host, ProcessorContext, TaskContext};
use crate::state::global::GlobalReads;
use crate::state::punctuation::{Punctuation, PunctuatorId};
use crate::topology::Topology;
use crate::topology::api::{Dispatch, RecordMetadata};
use crate::topology::defs::DefKind;
use crate::topology::node::ErasedNode;

/// A node's place in a call: the task it runs in, the graph, which node, and the input
/// record the call comes from.
#[derive(Clone, Copy)]
pub(crate) struct Link<'c> {
    pub host: &'c dyn Host,
    graph: &'c TaskGraph,
    node: usize,
    pub input: Option<RecordMetadata<'c>>,
}

impl<'c> Link<'c> {
    fn to(&self, node: usize) -> Link<'c> {
        Link { node, ..*self }
    }
}

impl Dispatch for Link<'_> {
    fn host(&self) -> &dyn Host {
        self.host
    }

    fn name(&self) -> &str {
        &self.graph.topology.nodes[self.node].name
    }

    fn input(&self) -> Option<RecordMetadata<'_>> {
        self.input
    }

    fn uses(&self, store: &str) -> bool {
        self.graph.topology.nodes[self.node]
            .stores
            .iter()
            .any(|s| s == store)
    }

    fn global_store(&self, name: &str) -> Result<&dyn KeyValueStore> {
        let store = match &self.graph.globals {
            Some(globals) => globals.store(name)?,
            None => None,
        };
        store.ok_or_else(|| Error::invalid(format!("no global store named {name:?}")))
    }

    fn owns_punctuator(&self, id: PunctuatorId) {
        self.graph.punctuators.borrow_mut().insert(id, self.node);
    }

    fn children(&self) -> usize {
        self.graph.topology.nodes[self.node].children.len()
    }

    fn deliver(&self, child: usize, record: Box<dyn Any>) -> Result<()> {
        let Some(&child) = self.graph.topology.nodes[self.node].children.get(child) else {
            return Err(Error::invalid(format!(
                "{:?} has no child {child}",
                self.name()
            )));
        };
        self.graph
            .call(self.to(child), |node, link| node.process(link, record))
    }

    fn deliver_to(&self, child: &str, record: Box<dyn Any>) -> Result<()> {
        let nodes = &self.graph.topology.nodes;
        let found = nodes[self.node]
            .children
            .iter()
            .find(|&&c| nodes[c].name == child)
            .copied();
        let Some(child) = found else {
            return Err(Error::invalid(format!(
                "{:?} has no child named {child:?}",
                self.name()
            )));
        };
        self.graph
            .call(self.to(child), |node, link| node.process(link, record))
    }

    fn next_output_index(&self, topic: &str) -> u32 {
        let mut sent = self.graph.sent.borrow_mut();
        let Some((_, count)) = sent.iter_mut().find(|(t, _)| t.as_str() == topic) else {
            sent.push((topic.to_owned(), 1));
            return 0;
        };
        *count += 1;
        *count - 1
    }
}

/// One task's instance of a topology: the task's [`Processor`](crate::Processor).
pub(crate) struct TaskGraph {
    topology: Arc<Topology>,
    /// The application's global stores, restored.
    globals: Option<Arc<GlobalReads>>,
    /// Each node, by index (`None` for the global stores' nodes, which run elsewhere).
    nodes: Vec<Option<RefCell<Box<dyn ErasedNode>>>>,
    /// The source of each input topic, by its name on the brokers.
    sources: HashMap<String, usize>,
    /// The node each punctuator was scheduled by.
    punctuators: RefCell<HashMap<PunctuatorId, usize>>,
    /// The first failure of the call under way: the call fails even if a parent went on.
    failure: RefCell<Option<String>>,
    /// The records the input record under way sent to each repartition topic, so far.
    sent: RefCell<Vec<(String, u32)>>,
}

impl TaskGraph {
    /// The nodes of task `task`'s sub-topology of `topology`, made for that task of
    /// `application_id`.
    pub(crate) fn new(
        topology: Arc<Topology>,
        globals: Option<Arc<GlobalReads>>,
        application_id: &str,
        task: TaskId,
    ) -> Self {
        let mut sources = HashMap::new();
        let nodes = topology
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                if node.subtopology != task.subtopology {
                    return None;
                }
                let make = match &node.kind {
                    DefKind::Source { topics, make, .. } => {
                        for topic in topics {
                            sources.insert(topic.resolve(application_id), i);
                        }
                        make
                    }
                    DefKind::Processor { make } | DefKind::Sink { make, .. } => make,
                    DefKind::GlobalSource { .. } | DefKind::GlobalProcessor { .. } => {
                        return None;
                    }
                };
                Some(RefCell::new(make(application_id)))
            })
            .collect();
        TaskGraph {
            topology,
            globals,
            nodes,
            sources,
            punctuators: RefCell::new(HashMap::new()),
            failure: RefCell::new(None),
            sent: RefCell::new(Vec::new()),
        }
    }

    /// Calls node `link.node` with `call`, catching what fails in it so that the input
    /// record fails whatever its parents do with the error.
    fn call(
        &self,
        link: Link<'_>,
        call: impl FnOnce(&mut dyn ErasedNode, &dyn Dispatch) -> Result<()>,
    ) -> Result<()> {
        let Some(Ok(mut node)) = self.nodes[link.node].as_ref().map(RefCell::try_borrow_mut) else {
            return Err(Error::invalid(format!(
                "node {:?} cannot be called here",
                link.name()
            )));
        };
        match catch_unwind(AssertUnwindSafe(|| call(node.as_mut(), &link))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => {
                self.failed(format!("{:?} failed: {err}", link.name()));
                Err(err)
            }
            Err(panic) => {
                self.failed(format!("{:?} panicked", link.name()));
                drop(node);
                resume_unwind(panic)
            }
        }
    }

    fn failed(&self, failure: String) {
        self.failure.borrow_mut().get_or_insert(failure);
    }

    /// `called`, failed if a node failed in it.
    fn outcome(&self, called: Result<()>) -> Result<()> {
        let failure = self.failure.borrow_mut().take();
        match (called, failure) {
            (Ok(()), Some(failure)) => Err(Error::invalid(format!(
                "{failure}, and its parent went on: the record fails"
            ))),
            (called, _) => called,
        }
    }

    fn link<'c>(
        &'c self,
        host: &'c dyn Host,
        node: usize,
        input: Option<RecordMetadata<'c>>,
    ) -> Link<'c> {
        Link {
            host,
            graph: self,
            node,
            input,
        }
    }
}

impl crate::Processor for TaskGraph {
    fn init(&mut self, ctx: &mut TaskContext<'_>) -> Result<()> {
        let host: &dyn Host = ctx;
        self.failure.borrow_mut().take();
        let mut called = Ok(());
        for node in (0..self.nodes.len()).filter(|&n| self.nodes[n].is_some()) {
            called = self.call(self.link(host, node, None), |node, link| node.init(link));
            if called.is_err() {
                break;
            }
        }
        self.outcome(called)
    }

    fn process(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        self.failure.borrow_mut().take();
        self.sent.borrow_mut().clear();
        let Some(&source) = self.sources.get(ctx.topic()) else {
            return Err(Error::invalid(format!(
                "no source of this task reads topic {:?}",
                ctx.topic()
            )));
        };
        let DefKind::Source { decode, .. } = &self.topology.nodes[source].kind else {
            return Err(Error::invalid("a source that is not a source"));
        };
        let record = decode(ctx)?;
        let input = RecordMetadata {
            topic: ctx.topic(),
            partition: ctx.partition(),
            offset: ctx.offset(),
        };
        let host: &dyn Host = &**ctx;
        let called = self.call(self.link(host, source, Some(input)), |node, link| {
            node.process(link, record)
        });
        self.outcome(called)
    }

    fn punctuate(
        &mut self,
        ctx: &mut TaskContext<'_>,
        punctuation: &Punctuation<'_>,
    ) -> Result<()> {
        self.failure.borrow_mut().take();
        let Some(node) = self.punctuators.borrow().get(&punctuation.id).copied() else {
            return Ok(());
        };
        let host: &dyn Host = ctx;
        let called = self.call(self.link(host, node, None), |node, link| {
            node.punctuate(link, punctuation)
        });
        self.outcome(called)
    }
}
