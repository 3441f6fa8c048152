//! What every command that talks to Kafka shares: the clients' properties (security, tuning),
//! from a file and the command line, and the log that shows what the clients report.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;

use statestore_tasks::{Result, parse_property, read_client_properties};
use tracing_subscriber::EnvFilter;

/// The librdkafka properties of every client a command creates.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientArgs {
    /// A librdkafka property for every client, `KEY=VALUE` (repeatable), e.g.
    /// `security.protocol=SASL_SSL`; it overrides the same key of `--client-config`.
    #[arg(long, value_parser = parse_property)]
    pub property: Vec<(String, String)>,
    /// A file of librdkafka properties in Kafka's `client.properties` form: one `KEY=VALUE`
    /// a line, `#` comments (see docs/security.md).
    #[arg(long)]
    pub client_config: Option<PathBuf>,
}

impl ClientArgs {
    /// The properties of `--client-config`, then of every `--property`.
    ///
    /// # Errors
    /// As [`read_client_properties`].
    pub fn properties(&self) -> Result<BTreeMap<String, String>> {
        let mut properties = match &self.client_config {
            Some(path) => read_client_properties(path)?,
            None => BTreeMap::new(),
        };
        properties.extend(self.property.iter().cloned());
        Ok(properties)
    }
}

/// Logs to stderr at `RUST_LOG`'s levels (default `warn`), librdkafka's own reports (an
/// authentication failure, a broker down) among them.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_overrides_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("client.properties");
        std::fs::write(&path, "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n").expect("write");
        let args = ClientArgs {
            property: vec![("sasl.mechanism".into(), "SCRAM-SHA-512".into())],
            client_config: Some(path),
        };
        let properties = args.properties().expect("properties");
        assert_eq!(properties["security.protocol"], "SASL_SSL");
        assert_eq!(properties["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(properties.len(), 2);
    }
}
