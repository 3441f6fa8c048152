//! A sub-topology running inside one task: its nodes made for the task, records passed from
//! parent to child as they are, depth first, and the whole driven as the task's
//! [`Processor`](crate::Processor), so that one input record's processing through every
//! node is one call: committed, rolled back and handled as one unit.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

use statestore_operator_stores::{KeyCodec, ValueCodec};
use store_api::{Error, KeyValueStore, Result};

use crate::processor::{Host, ProcessorContext, TaskContext};
use crate::runtime::outputs::OutputRecord;
use crate::state::global::GlobalReads;
use crate::state::punctuation::{Punctuation, PunctuatorId};
use crate::topology::api::{Context, Processor, Record, RecordMetadata};
use crate::topology::builder::DefKind;
use crate::topology::{TopicName, Topology};

/// Decodes an input record into the `Record` a source forwards, boxed.
pub(crate) type Decode = Arc<dyn Fn(&ProcessorContext<'_>) -> Result<Box<dyn Any>> + Send + Sync>;

/// Makes a task's instance of a node, given the application id.
pub(crate) type MakeNode = Arc<dyn Fn(&str) -> Box<dyn ErasedNode> + Send + Sync>;

/// A node with its types hidden: it takes a boxed `Record` of the types its parents were
/// checked to forward.
pub(crate) trait ErasedNode: Send {
    fn init(&mut self, link: Link<'_>) -> Result<()>;
    fn process(&mut self, link: Link<'_>, record: Box<dyn Any>) -> Result<()>;
    fn punctuate(&mut self, link: Link<'_>, punctuation: &Punctuation<'_>) -> Result<()>;
}

/// The decoder of a source reading keys of `K` with `KC` and values of `V` with `VC`.
pub(crate) fn decoder<K, V, KC, VC>() -> Decode
where
    K: 'static,
    V: 'static,
    KC: KeyCodec<K>,
    VC: ValueCodec<V>,
{
    Arc::new(|ctx: &ProcessorContext<'_>| {
        let key = ctx.key_as::<K, KC>()?;
        let value = ctx.value_as::<V, VC>()?;
        let record = Record {
            key,
            value,
            timestamp: ctx.timestamp().unwrap_or(-1),
            headers: ctx
                .headers()
                .map(|(name, value)| (name.to_owned(), value.map(<[u8]>::to_vec)))
                .collect(),
        };
        Ok(Box::new(record) as Box<dyn Any>)
    })
}

/// The record a node was checked to take, unboxed.
fn unbox<K: 'static, V: 'static>(link: &Link<'_>, record: Box<dyn Any>) -> Result<Record<K, V>> {
    record.downcast::<Record<K, V>>().map(|r| *r).map_err(|_| {
        Error::invalid(format!(
            "node {:?} was given a record of other types than it takes",
            link.name()
        ))
    })
}

/// A source's node: forwards what its decoder made.
pub(crate) struct SourceNode<K, V>(PhantomData<fn(K, V)>);

impl<K: Clone + 'static, V: Clone + 'static> SourceNode<K, V> {
    pub(crate) fn maker() -> MakeNode {
        Arc::new(|_: &str| Box::new(SourceNode::<K, V>(PhantomData)) as Box<dyn ErasedNode>)
    }
}

impl<K: Clone + 'static, V: Clone + 'static> ErasedNode for SourceNode<K, V> {
    fn init(&mut self, _: Link<'_>) -> Result<()> {
        Ok(())
    }

    fn process(&mut self, link: Link<'_>, record: Box<dyn Any>) -> Result<()> {
        let record = unbox::<K, V>(&link, record)?;
        link.forward(record)
    }

    fn punctuate(&mut self, _: Link<'_>, _: &Punctuation<'_>) -> Result<()> {
        Ok(())
    }
}

/// A user's processor.
pub(crate) struct ProcessorNode<P>(P);

impl<P: Processor> ProcessorNode<P> {
    pub(crate) fn maker<S>(supplier: S) -> MakeNode
    where
        S: Fn() -> P + Send + Sync + 'static,
    {
        Arc::new(move |_: &str| Box::new(ProcessorNode(supplier())) as Box<dyn ErasedNode>)
    }
}

impl<P: Processor> ErasedNode for ProcessorNode<P> {
    fn init(&mut self, link: Link<'_>) -> Result<()> {
        self.0.init(&mut Context::new(link))
    }

    fn process(&mut self, link: Link<'_>, record: Box<dyn Any>) -> Result<()> {
        let record = unbox::<P::KeyIn, P::ValueIn>(&link, record)?;
        self.0.process(&mut Context::new(link), record)
    }

    fn punctuate(&mut self, link: Link<'_>, punctuation: &Punctuation<'_>) -> Result<()> {
        self.0.punctuate(&mut Context::new(link), punctuation)
    }
}

/// Names the topic of each record a sink takes.
pub(crate) type ChooseTopic<K, V> = Arc<dyn Fn(&Record<K, V>) -> String + Send + Sync>;

/// Where a sink sends a record.
pub(crate) enum SinkTarget<K, V> {
    /// One topic, by its name in the topology.
    Fixed(TopicName),
    /// The topic a function names for each record.
    PerRecord(ChooseTopic<K, V>),
}

/// [`SinkTarget`] made for one task: a fixed topic's name resolved once and shared by its
/// records.
enum Target<K, V> {
    Fixed(Arc<str>),
    PerRecord(ChooseTopic<K, V>),
}

/// A sink: encodes each record and sends it once the input record's call returns.
pub(crate) struct SinkNode<K, V, KC, VC> {
    target: Target<K, V>,
    _codecs: PhantomData<fn() -> (KC, VC)>,
}

impl<K: 'static, V: 'static, KC: KeyCodec<K>, VC: ValueCodec<V>> SinkNode<K, V, KC, VC> {
    pub(crate) fn maker(target: SinkTarget<K, V>) -> MakeNode {
        Arc::new(move |application_id: &str| {
            let target = match &target {
                SinkTarget::Fixed(topic) => Target::Fixed(Arc::from(topic.resolve(application_id))),
                SinkTarget::PerRecord(choose) => Target::PerRecord(Arc::clone(choose)),
            };
            Box::new(SinkNode::<K, V, KC, VC> {
                target,
                _codecs: PhantomData,
            }) as Box<dyn ErasedNode>
        })
    }
}

impl<K: 'static, V: 'static, KC: KeyCodec<K>, VC: ValueCodec<V>> ErasedNode
    for SinkNode<K, V, KC, VC>
{
    fn init(&mut self, _: Link<'_>) -> Result<()> {
        Ok(())
    }

    fn process(&mut self, link: Link<'_>, record: Box<dyn Any>) -> Result<()> {
        let record = unbox::<K, V>(&link, record)?;
        let mut output = match &self.target {
            Target::Fixed(topic) => OutputRecord::to_shared(Arc::clone(topic)),
            Target::PerRecord(choose) => OutputRecord::new(choose(&record)),
        };
        if let Some(key) = &record.key {
            output = output.key(KC::encode_key(key)?);
        }
        if let Some(value) = &record.value {
            output = output.value(VC::encode_value(value)?);
        }
        if record.timestamp >= 0 {
            output = output.timestamp(record.timestamp);
        }
        for (name, value) in &record.headers {
            output = output.header(name, value.as_deref());
        }
        link.host.send(output);
        Ok(())
    }

    fn punctuate(&mut self, _: Link<'_>, _: &Punctuation<'_>) -> Result<()> {
        Ok(())
    }
}

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
    pub fn name(&self) -> &'c str {
        &self.graph.topology.nodes[self.node].name
    }

    /// Whether store `store` is connected to this node.
    pub fn uses(&self, store: &str) -> bool {
        self.graph.topology.nodes[self.node]
            .stores
            .iter()
            .any(|s| s == store)
    }

    /// Global store `name`.
    pub fn global_store(&self, name: &str) -> Result<&'c dyn KeyValueStore> {
        let store = match &self.graph.globals {
            Some(globals) => globals.store(name)?,
            None => None,
        };
        store.ok_or_else(|| Error::invalid(format!("no global store named {name:?}")))
    }

    pub fn owns_punctuator(&self, id: PunctuatorId) {
        self.graph.punctuators.borrow_mut().insert(id, self.node);
    }

    pub fn forward<K: Clone + 'static, V: Clone + 'static>(
        &self,
        record: Record<K, V>,
    ) -> Result<()> {
        let children = &self.graph.topology.nodes[self.node].children;
        let mut record = Some(record);
        for (i, &child) in children.iter().enumerate() {
            let next = if i + 1 == children.len() {
                record.take()
            } else {
                record.clone()
            };
            if let Some(next) = next {
                self.graph.call(self.to(child), |node, link| {
                    node.process(link, Box::new(next))
                })?;
            }
        }
        Ok(())
    }

    pub fn forward_to<K: Clone + 'static, V: Clone + 'static>(
        &self,
        child: &str,
        record: Record<K, V>,
    ) -> Result<()> {
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
        self.graph.call(self.to(child), |node, link| {
            node.process(link, Box::new(record))
        })
    }

    fn to(&self, node: usize) -> Link<'c> {
        Link { node, ..*self }
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
}

impl TaskGraph {
    /// Every sub-topology of `topology` (its global stores' nodes aside), made for one task
    /// of `application_id`: the task owns the same partition of every source topic.
    pub(crate) fn new(
        topology: Arc<Topology>,
        globals: Option<Arc<GlobalReads>>,
        application_id: &str,
    ) -> Self {
        let mut sources = HashMap::new();
        let nodes = topology
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
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
        }
    }

    /// Calls node `link.node` with `call`, catching what fails in it so that the input
    /// record fails whatever its parents do with the error.
    fn call(
        &self,
        link: Link<'_>,
        call: impl FnOnce(&mut dyn ErasedNode, Link<'_>) -> Result<()>,
    ) -> Result<()> {
        let Some(Ok(mut node)) = self.nodes[link.node].as_ref().map(RefCell::try_borrow_mut) else {
            return Err(Error::invalid(format!(
                "node {:?} cannot be called here",
                link.name()
            )));
        };
        match catch_unwind(AssertUnwindSafe(|| call(node.as_mut(), link))) {
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
