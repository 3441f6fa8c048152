//! Input topics records are piped into and output topics they are read from, as bytes or
//! through the operator stores' codecs.

use std::collections::BTreeMap;

use statestore_tasks::MemoryRecord;
use statestore_tasks::operator_stores::{KeyCodec, ValueCodec};
use store_api::Result;

use crate::TestDriver;

/// A record's key and value, as bytes (`None`: null).
pub type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A record read from an output topic: the partition it went to, and the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRecord {
    /// Its partition: the one it named, else its key's, else round robin.
    pub partition: u32,
    /// Its key, value, timestamp and headers (its topic's name too).
    pub record: MemoryRecord,
}

/// A topic the application consumes, to pipe records into: each is processed (through
/// every repartition it goes through) and the tasks commit before the call returns.
pub struct TestInputTopic<'d> {
    driver: &'d TestDriver,
    topic: String,
}

impl<'d> TestInputTopic<'d> {
    pub(crate) fn new(driver: &'d TestDriver, topic: &str) -> Self {
        TestInputTopic {
            driver,
            topic: topic.to_owned(),
        }
    }

    /// Pipes a record of `key`, `value` and `timestamp` (milliseconds since the epoch) into
    /// the partition of its key.
    ///
    /// # Errors
    /// `InvalidArgument` for a topic the application does not consume, or while a
    /// [`DriverStore`](crate::DriverStore) of the driver is held; a failure the error
    /// handler answers with `Fail`; a commit's error.
    pub fn pipe_input(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: i64,
    ) -> Result<()> {
        self.pipe_record(
            MemoryRecord {
                key: key.map(<[u8]>::to_vec),
                value: value.map(<[u8]>::to_vec),
                timestamp: Some(timestamp),
                ..MemoryRecord::default()
            },
            None,
        )
    }

    /// [`pipe_input`](Self::pipe_input) of a key and value encoded with codecs `KC` and `VC`.
    ///
    /// # Errors
    /// A codec's error; as [`pipe_input`](Self::pipe_input).
    pub fn pipe_input_as<K, V, KC: KeyCodec<K>, VC: ValueCodec<V>>(
        &self,
        key: Option<&K>,
        value: Option<&V>,
        timestamp: i64,
    ) -> Result<()> {
        let key = key.map(KC::encode_key).transpose()?;
        let value = value.map(VC::encode_value).transpose()?;
        self.pipe_input(key.as_deref(), value.as_deref(), timestamp)
    }

    /// Pipes `record` (its headers too; its topic is this one whatever it says) into
    /// `partition`, or its key's partition, or the next one round robin for a record
    /// without a key. A record without a timestamp gets the driver's wall clock.
    ///
    /// # Errors
    /// As [`pipe_input`](Self::pipe_input); `InvalidArgument` for a partition the topic
    /// does not have.
    pub fn pipe_record(&self, record: MemoryRecord, partition: Option<u32>) -> Result<()> {
        self.pipe_list(std::iter::once((record, partition)))
    }

    /// Pipes every record of `records` as [`pipe_record`](Self::pipe_record) does, in order,
    /// each processed before the next; the tasks commit once, after the last.
    ///
    /// # Errors
    /// As [`pipe_record`](Self::pipe_record): the records after a failing one are not piped.
    pub fn pipe_list(
        &self,
        records: impl IntoIterator<Item = (MemoryRecord, Option<u32>)>,
    ) -> Result<()> {
        let mut inner = self.driver.inner_mut()?;
        if !inner.consumes(&self.topic) {
            return Err(store_api::Error::invalid(format!(
                "the application consumes no topic {:?}",
                self.topic
            )));
        }
        for (mut record, partition) in records {
            record.topic.clone_from(&self.topic);
            inner.append(record, partition)?;
            inner.drain()?;
        }
        inner.commit()
    }
}

/// A topic the application sends to and does not consume, read in the order its records
/// were sent (across partitions). Reading removes what it reads.
pub struct TestOutputTopic<'d> {
    driver: &'d TestDriver,
    topic: String,
}

impl<'d> TestOutputTopic<'d> {
    pub(crate) fn new(driver: &'d TestDriver, topic: &str) -> Self {
        TestOutputTopic {
            driver,
            topic: topic.to_owned(),
        }
    }

    /// The next record, if any.
    ///
    /// # Panics
    /// While a [`DriverStore`](crate::DriverStore) of the driver is held.
    pub fn read_record(&self) -> Option<TestRecord> {
        let mut inner = self.driver.inner().borrow_mut();
        inner.outputs.get_mut(&self.topic)?.pop_front()
    }

    /// The next record's key and value, if any.
    pub fn read_key_value(&self) -> Option<KeyValue> {
        let read = self.read_record()?;
        Some((read.record.key, read.record.value))
    }

    /// [`read_key_value`](Self::read_key_value) decoded with codecs `KC` and `VC`.
    ///
    /// # Errors
    /// A codec's error (the record is read all the same).
    pub fn read_key_value_as<K, V, KC: KeyCodec<K>, VC: ValueCodec<V>>(
        &self,
    ) -> Result<Option<(Option<K>, Option<V>)>> {
        let Some((key, value)) = self.read_key_value() else {
            return Ok(None);
        };
        let key = key.as_deref().map(KC::decode_key).transpose()?;
        let value = value.as_deref().map(VC::decode_value).transpose()?;
        Ok(Some((key, value)))
    }

    /// Every record left, keyed ones only, as a map of each key to its last value (`None`
    /// for a tombstone), as Kafka Streams' `readKeyValuesToMap`.
    pub fn read_to_map(&self) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        let mut map = BTreeMap::new();
        while let Some((key, value)) = self.read_key_value() {
            if let Some(key) = key {
                map.insert(key, value);
            }
        }
        map
    }

    /// Every record left, in order.
    pub fn read_records(&self) -> Vec<TestRecord> {
        std::iter::from_fn(|| self.read_record()).collect()
    }

    /// Whether every record sent so far was read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many records are left to read.
    pub fn len(&self) -> usize {
        let inner = self.driver.inner().borrow();
        inner
            .outputs
            .get(&self.topic)
            .map_or(0, |queue| queue.len())
    }
}
