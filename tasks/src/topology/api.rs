//! What a topology's processors see: the [`Record`]s they take and forward, and the
//! [`Context`] of a call, as Kafka Streams' `org.apache.kafka.streams.processor.api`.

use std::marker::PhantomData;
use std::time::Duration;

use statestore_changelog::TaskId;
use std::any::Any;
use std::ops::Bound;

use store_api::{Error, KeyValueStore, KvIter, Result};

use crate::processor::{Host, store_named, store_of};
use crate::state::kv::TaskStore;
use crate::state::punctuation::{Punctuation, PunctuationType, PunctuatorId};
use crate::state::stores::{StoreHandle, StoreType};

/// One record going through a topology: a key, a value (either may be null), a timestamp
/// and headers. Between the processors of one sub-topology it passes as it is, never
/// encoded; sources decode it from the input's bytes and sinks encode it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<K, V> {
    /// The key, `None` for a record without one.
    pub key: Option<K>,
    /// The value, `None` for a tombstone.
    pub value: Option<V>,
    /// Milliseconds since the epoch; a source gives its input record's timestamp (`-1` when
    /// the input had none), a punctuator the time it was called at.
    pub timestamp: i64,
    /// The headers, in order; a name may repeat.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl<K, V> Record<K, V> {
    /// A record of `key` and `value` at `timestamp`, without headers.
    pub fn new(key: Option<K>, value: Option<V>, timestamp: i64) -> Self {
        Record {
            key,
            value,
            timestamp,
            headers: Vec::new(),
        }
    }

    /// The same record with `key`, its value, timestamp and headers kept (Kafka's
    /// `withKey`).
    pub fn with_key<K2>(self, key: Option<K2>) -> Record<K2, V> {
        Record {
            key,
            value: self.value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// The same record with `value` (Kafka's `withValue`).
    pub fn with_value<V2>(self, value: Option<V2>) -> Record<K, V2> {
        Record {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// The same record at `timestamp`.
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }
}

/// Where the input record being processed comes from (Kafka's `RecordMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata<'a> {
    /// The input topic.
    pub topic: &'a str,
    /// The input partition.
    pub partition: u32,
    /// The input offset.
    pub offset: u64,
}

/// A global store as processors read it: the bytes its topic's records hold, by key.
#[derive(Clone, Copy)]
pub struct GlobalStoreView<'a> {
    store: &'a dyn KeyValueStore,
}

impl GlobalStoreView<'_> {
    /// The value of `key`, or `None`.
    ///
    /// # Errors
    /// A store error.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.store.get(key)
    }

    /// The entries in the bounds, in key order.
    ///
    /// # Errors
    /// A store error.
    pub fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter> {
        self.store.range(from, to)
    }
}

/// A node of a topology that processes records: Kafka Streams'
/// `Processor<KIn, VIn, KOut, VOut>`. Each task makes its own instance with the supplier
/// given to [`add_processor`](crate::topology::TopologyBuilder::add_processor).
///
/// A call's writes and forwards, through every processor they reach, count only if the
/// whole record finishes: an error or a panic anywhere in it (in this processor or in a
/// child) rolls the task back to where the record began, its stores included, and goes to
/// the error handlers as a single processor's would.
pub trait Processor: Send + 'static {
    /// The key type it takes.
    type KeyIn: 'static;
    /// The value type it takes.
    type ValueIn: 'static;
    /// The key type it forwards.
    type KeyOut: Clone + 'static;
    /// The value type it forwards.
    type ValueOut: Clone + 'static;

    /// Called once when its task starts processing here, before the first record: the
    /// place to schedule punctuators.
    ///
    /// # Errors
    /// As [`crate::Processor::init`].
    fn init(&mut self, ctx: &mut Context<'_, Self::KeyOut, Self::ValueOut>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Processes `record`, forwarding what it makes of it.
    ///
    /// # Errors
    /// An error fails the input record (see the trait's docs).
    fn process(
        &mut self,
        ctx: &mut Context<'_, Self::KeyOut, Self::ValueOut>,
        record: Record<Self::KeyIn, Self::ValueIn>,
    ) -> Result<()>;

    /// Called for each due punctuator this processor scheduled; it may forward.
    ///
    /// # Errors
    /// As [`process`](Processor::process).
    fn punctuate(
        &mut self,
        ctx: &mut Context<'_, Self::KeyOut, Self::ValueOut>,
        punctuation: &Punctuation<'_>,
    ) -> Result<()> {
        let _ = (ctx, punctuation);
        Ok(())
    }
}

/// A call of a topology's processor: its task's stores (those connected to it), forwarding
/// to its children, its task's stream time and punctuators.
pub struct Context<'c, K, V> {
    link: &'c dyn Dispatch,
    _forwards: PhantomData<fn(K, V)>,
}

/// What a node's call reaches of the graph it runs in: its task, its children, its stores.
/// The graph of a task implements it; nodes only see this.
pub(crate) trait Dispatch {
    /// The task the call runs in.
    fn host(&self) -> &dyn Host;
    /// The node's name.
    fn name(&self) -> &str;
    /// The input record the call comes from.
    fn input(&self) -> Option<RecordMetadata<'_>>;
    /// Whether store `store` is connected to the node.
    fn uses(&self, store: &str) -> bool;
    /// Global store `name`.
    fn global_store(&self, name: &str) -> Result<&dyn KeyValueStore>;
    /// Makes the node the one punctuator `id` calls.
    fn owns_punctuator(&self, id: PunctuatorId);
    /// How many children the node has.
    fn children(&self) -> usize;
    /// Calls child number `child` with `record`, a boxed [`Record`] of the node's output types.
    fn deliver(&self, child: usize, record: Box<dyn Any>) -> Result<()>;
    /// Calls the child named `child` with `record`.
    fn deliver_to(&self, child: &str, record: Box<dyn Any>) -> Result<()>;
    /// The index of the next record sent to `topic` among those the input record under
    /// way sent there (0, 1, 2, ...; counted anew for each input record).
    fn next_output_index(&self, topic: &str) -> u32;
}

/// Passes `record` to every child of `link`'s node in order, cloned for all but the last.
pub(crate) fn forward_all<K: Clone + 'static, V: Clone + 'static>(
    link: &dyn Dispatch,
    record: Record<K, V>,
) -> Result<()> {
    let children = link.children();
    let mut record = Some(record);
    for child in 0..children {
        let next = if child + 1 == children {
            record.take()
        } else {
            record.clone()
        };
        if let Some(next) = next {
            link.deliver(child, Box::new(next))?;
        }
    }
    Ok(())
}

impl<'c, K: Clone + 'static, V: Clone + 'static> Context<'c, K, V> {
    pub(crate) fn new(link: &'c dyn Dispatch) -> Self {
        Context {
            link,
            _forwards: PhantomData,
        }
    }

    /// Passes `record` to every child, one after the other in the order they were added,
    /// each child's processing (and what it forwards, depth first) done before this returns.
    ///
    /// # Errors
    /// A child's error: return it, and the input record fails (the record fails even if
    /// this processor goes on without returning it).
    pub fn forward(&mut self, record: Record<K, V>) -> Result<()> {
        forward_all(self.link, record)
    }

    /// Passes `record` to the child named `child` only.
    ///
    /// # Errors
    /// `InvalidArgument` when `child` is not a child of this processor; the child's error.
    pub fn forward_to(&mut self, child: &str, record: Record<K, V>) -> Result<()> {
        self.link.deliver_to(child, Box::new(record))
    }
}

impl<K, V> Context<'_, K, V> {
    fn host(&self) -> &dyn Host {
        self.link.host()
    }

    /// The task: `<subtopology>_<partition>`.
    pub fn task_id(&self) -> TaskId {
        self.host().task().id
    }

    /// The name of this processor.
    pub fn name(&self) -> &str {
        self.link.name()
    }

    /// The input record this call comes from; `None` in `init` and in a punctuator.
    pub fn record_metadata(&self) -> Option<RecordMetadata<'_>> {
        self.link.input()
    }

    /// The task's stream time (see [`crate::TaskContext::stream_time`]).
    pub fn stream_time(&self) -> Option<i64> {
        self.host().task().stream_time()
    }

    /// The key-value store `name`, which must be connected to this processor.
    ///
    /// # Errors
    /// `InvalidArgument` for a store not connected to it, or not a key-value store.
    pub fn store(&self, name: &str) -> Result<TaskStore<'_>> {
        self.connected(name)?;
        store_named(self.host().task(), name)
    }

    /// The store `handle` refers to, as its type (see [`crate::TaskContext::store_of`]); it
    /// must be connected to this processor.
    ///
    /// # Errors
    /// `InvalidArgument` for a store not connected to it, or a handle of another
    /// configuration.
    pub fn store_of<T: StoreType + ?Sized>(&self, handle: &StoreHandle<T>) -> Result<T::View<'_>> {
        self.connected(handle.name())?;
        store_of(self.host().task(), handle)
    }

    /// Global store `name` (see
    /// [`add_global_store`](crate::topology::TopologyBuilder::add_global_store)), read only:
    /// every task reads it, no connection needed.
    ///
    /// # Errors
    /// `InvalidArgument` for a store that is not global, or once the thread keeping the
    /// global stores failed (its error said).
    pub fn global_store(&self, name: &str) -> Result<GlobalStoreView<'_>> {
        Ok(GlobalStoreView {
            store: self.link.global_store(name)?,
        })
    }

    fn connected(&self, store: &str) -> Result<()> {
        if self.link.uses(store) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "processor {:?} is not connected to store {store:?}",
            self.name()
        )))
    }

    /// Schedules punctuator `name` of this processor every `interval`; its calls go to this
    /// processor's [`punctuate`](Processor::punctuate).
    ///
    /// # Errors
    /// `InvalidArgument` for an interval under one millisecond.
    pub fn schedule(
        &self,
        name: &str,
        interval: Duration,
        kind: PunctuationType,
    ) -> Result<PunctuatorId> {
        let id = self
            .host()
            .task()
            .punctuators
            .borrow_mut()
            .schedule(name, interval, kind)?;
        self.link.owns_punctuator(id);
        Ok(id)
    }

    /// Cancels punctuator `id`; returns whether it was scheduled.
    pub fn cancel(&self, id: PunctuatorId) -> bool {
        self.host().task().punctuators.borrow_mut().cancel(id)
    }
}
