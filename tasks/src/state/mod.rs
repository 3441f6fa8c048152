//! The state of the tasks: each task's stores ([`kv`], [`stores`]), the input position they
//! keep with their state ([`position`]) with the marks of the upstream tasks whose
//! repartition records they applied ([`upstream`]), the [`Task`](task::Task) that keeps them consistent
//! (its commits, rewinds and closes), its punctuators and metrics, and the global stores'
//! read side ([`global`]). Nothing here talks to the
//! consumer group.

pub(crate) mod changelogs;
pub(crate) mod global;
pub(crate) mod kv;
pub mod metrics;
pub(crate) mod position;
pub(crate) mod punctuation;
pub(crate) mod stores;
pub(crate) mod task;
pub(crate) mod upstream;
