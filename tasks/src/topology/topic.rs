//! [`TopicName`]: a topic a source reads or a sink writes, the application's own or not.

/// A topic a source reads or a sink writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TopicName {
    /// A topic of its own name, outside the application.
    External(String),
    /// A repartition topic the application owns: `<name>-repartition` in descriptions,
    /// `<application_id>-<name>-repartition` on the brokers.
    Repartition(String),
}

impl TopicName {
    /// The repartition topic `name`.
    pub fn repartition(name: impl Into<String>) -> Self {
        TopicName::Repartition(name.into())
    }

    /// The topic's name on the brokers for application `application_id`.
    pub fn resolve(&self, application_id: &str) -> String {
        match self {
            TopicName::External(name) => name.clone(),
            TopicName::Repartition(name) => format!("{application_id}-{name}-repartition"),
        }
    }
}

impl std::fmt::Display for TopicName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopicName::External(name) => f.write_str(name),
            TopicName::Repartition(name) => write!(f, "{name}-repartition"),
        }
    }
}

impl From<&str> for TopicName {
    fn from(name: &str) -> Self {
        TopicName::External(name.to_owned())
    }
}

impl From<String> for TopicName {
    fn from(name: String) -> Self {
        TopicName::External(name)
    }
}
