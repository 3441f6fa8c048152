//! The input record a processor is handed, whoever read it: the Kafka runtime hands it
//! rdkafka's messages, the test driver records held in memory ([`MemoryRecord`]). The
//! processing code reads records through [`InputRecord`] alone, so both run the same code.

use rdkafka::message::{BorrowedMessage, Headers, Message};

/// What the processing code reads of an input record. Its partition and offset are not part
/// of it: the runtime places a record (in a task, at an offset) before it is processed, and
/// passes them with it.
pub trait InputRecord {
    /// The topic the record was read from.
    fn topic(&self) -> &str;

    /// Its timestamp in milliseconds since the epoch, when it has one.
    fn timestamp(&self) -> Option<i64>;

    /// Its key.
    fn key(&self) -> Option<&[u8]>;

    /// Its value.
    fn value(&self) -> Option<&[u8]>;

    /// How many headers it has.
    fn header_count(&self) -> usize;

    /// Header `index` (below [`header_count`](InputRecord::header_count)): its name and value
    /// (`None` for a null value).
    fn header(&self, index: usize) -> Option<(&str, Option<&[u8]>)>;
}

impl InputRecord for BorrowedMessage<'_> {
    fn topic(&self) -> &str {
        Message::topic(self)
    }

    fn timestamp(&self) -> Option<i64> {
        Message::timestamp(self).to_millis()
    }

    fn key(&self) -> Option<&[u8]> {
        Message::key(self)
    }

    fn value(&self) -> Option<&[u8]> {
        self.payload()
    }

    fn header_count(&self) -> usize {
        self.headers().map_or(0, |headers| headers.count())
    }

    /// rdkafka panics on a header name that is not UTF-8 (which Kafka's Java clients never
    /// write).
    fn header(&self, index: usize) -> Option<(&str, Option<&[u8]>)> {
        let header = self.headers()?.try_get(index)?;
        Some((header.key, header.value))
    }
}

/// An input record held in memory, as the test driver feeds its tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryRecord {
    /// Its topic.
    pub topic: String,
    /// Its timestamp in milliseconds since the epoch.
    pub timestamp: Option<i64>,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl InputRecord for MemoryRecord {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }

    fn header_count(&self) -> usize {
        self.headers.len()
    }

    fn header(&self, index: usize) -> Option<(&str, Option<&[u8]>)> {
        let (name, value) = self.headers.get(index)?;
        Some((name, value.as_deref()))
    }
}
