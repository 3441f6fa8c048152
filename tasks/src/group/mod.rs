//! The consumer group and its metadata: the clients' settings, the members and their
//! partitions, standby placement, the endpoints instances advertise, how keys map to
//! partitions, and the topics an application needs.

pub(crate) mod client_config;
pub(crate) mod endpoint;
pub(crate) mod members;
pub(crate) mod partitioner;
pub(crate) mod topics;
