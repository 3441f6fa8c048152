//! A topology's nodes as each task runs them, their types hidden behind [`ErasedNode`]:
//! sources (decoding the input's bytes), user processors and sinks (encoding for a topic).

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use statestore_operator_stores::{KeyCodec, ValueCodec};
use store_api::{Error, Result};

use crate::processor::ProcessorContext;
use crate::runtime::outputs::OutputRecord;
use crate::state::punctuation::Punctuation;
use crate::state::upstream::{RESERVED_HEADER_PREFIX, UPSTREAM_HEADER, encode_upstream};
use crate::topology::api::{Context, Dispatch, Processor, Record, forward_all};
use crate::topology::topic::TopicName;

/// Decodes an input record into the `Record` a source forwards, boxed.
pub(crate) type Decode = Arc<dyn Fn(&ProcessorContext<'_>) -> Result<Box<dyn Any>> + Send + Sync>;

/// Makes a task's instance of a node, given the application id.
pub(crate) type MakeNode = Arc<dyn Fn(&str) -> Box<dyn ErasedNode> + Send + Sync>;

/// A node with its types hidden: it takes a boxed `Record` of the types its parents were
/// checked to forward.
pub(crate) trait ErasedNode: Send {
    fn init(&mut self, link: &dyn Dispatch) -> Result<()>;
    fn process(&mut self, link: &dyn Dispatch, record: Box<dyn Any>) -> Result<()>;
    fn punctuate(&mut self, link: &dyn Dispatch, punctuation: &Punctuation<'_>) -> Result<()>;
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
            // statestore's own (a repartition record's upstream) stay at the source.
            headers: ctx
                .headers()
                .filter(|(name, _)| !name.starts_with(RESERVED_HEADER_PREFIX))
                .map(|(name, value)| (name.to_owned(), value.map(<[u8]>::to_vec)))
                .collect(),
        };
        Ok(Box::new(record) as Box<dyn Any>)
    })
}

/// The record a node was checked to take, unboxed.
fn unbox<K: 'static, V: 'static>(
    link: &dyn Dispatch,
    record: Box<dyn Any>,
) -> Result<Record<K, V>> {
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
    fn init(&mut self, _: &dyn Dispatch) -> Result<()> {
        Ok(())
    }

    fn process(&mut self, link: &dyn Dispatch, record: Box<dyn Any>) -> Result<()> {
        let record = unbox::<K, V>(link, record)?;
        forward_all(link, record)
    }

    fn punctuate(&mut self, _: &dyn Dispatch, _: &Punctuation<'_>) -> Result<()> {
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
    fn init(&mut self, link: &dyn Dispatch) -> Result<()> {
        self.0.init(&mut Context::new(link))
    }

    fn process(&mut self, link: &dyn Dispatch, record: Box<dyn Any>) -> Result<()> {
        let record = unbox::<P::KeyIn, P::ValueIn>(link, record)?;
        self.0.process(&mut Context::new(link), record)
    }

    fn punctuate(&mut self, link: &dyn Dispatch, punctuation: &Punctuation<'_>) -> Result<()> {
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
/// records, and whether it is a repartition topic.
enum Target<K, V> {
    Fixed(Arc<str>, bool),
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
                SinkTarget::Fixed(topic) => Target::Fixed(
                    Arc::from(topic.resolve(application_id)),
                    matches!(topic, TopicName::Repartition(_)),
                ),
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
    fn init(&mut self, _: &dyn Dispatch) -> Result<()> {
        Ok(())
    }

    fn process(&mut self, link: &dyn Dispatch, record: Box<dyn Any>) -> Result<()> {
        let record = unbox::<K, V>(link, record)?;
        let mut output = match &self.target {
            Target::Fixed(topic, repartition) => {
                let output = OutputRecord::to_shared(Arc::clone(topic));
                match repartition.then(|| upstream_header(link, topic)).flatten() {
                    Some(value) => output.header(UPSTREAM_HEADER, Some(&value)),
                    None => output,
                }
            }
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
        link.host().send(output);
        Ok(())
    }

    fn punctuate(&mut self, _: &dyn Dispatch, _: &Punctuation<'_>) -> Result<()> {
        Ok(())
    }
}

/// The upstream header of the next record sent to repartition topic `topic` in this call:
/// its task, input record and index among that record's outputs to `topic` (see the
/// `upstream` module), when its task stamps them (under `at_least_once`) and the call has an
/// input record (a punctuator's records have none, and are at least once).
fn upstream_header(link: &dyn Dispatch, topic: &str) -> Option<Vec<u8>> {
    let task = link.host().task();
    if !task.stamps_repartition_records() {
        return None;
    }
    let input = link.input()?;
    let topic_index = task.topics.iter().position(|t| t == input.topic)?;
    let index = link.next_output_index(topic);
    Some(encode_upstream(task.id, topic_index, input.offset, index))
}
