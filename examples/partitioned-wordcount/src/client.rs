//! What every command that talks to Kafka shares: the clients' properties (security, tuning),
//! from a file and the command line, and the log that shows what the clients report.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;

use store_api::{Error, Result};
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
    /// `Io` when the file cannot be read, `InvalidArgument` naming a line that is not
    /// `KEY=VALUE`.
    pub fn properties(&self) -> Result<BTreeMap<String, String>> {
        let mut properties = BTreeMap::new();
        if let Some(path) = &self.client_config {
            let text = std::fs::read_to_string(path)
                .map_err(|err| Error::io(format!("reading {}", path.display()), err))?;
            for (number, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                    continue;
                }
                let (key, value) = parse_property(line).map_err(|err| {
                    Error::invalid(format!("{}:{}: {err}", path.display(), number + 1))
                })?;
                properties.insert(key, value);
            }
        }
        properties.extend(self.property.iter().cloned());
        Ok(properties)
    }
}

/// `KEY=VALUE` of `--property` or of a line of `--client-config`; spaces around either trimmed.
pub fn parse_property(text: &str) -> std::result::Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or("expected KEY=VALUE")?;
    Ok((key.trim().to_owned(), value.trim().to_owned()))
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
    fn the_command_line_overrides_the_file_and_comments_are_skipped() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("client.properties");
        std::fs::write(
            &path,
            "# a comment\nsecurity.protocol = SASL_SSL\n\nsasl.mechanism=PLAIN\n",
        )
        .expect("write");
        let args = ClientArgs {
            property: vec![("sasl.mechanism".into(), "SCRAM-SHA-512".into())],
            client_config: Some(path.clone()),
        };
        let properties = args.properties().expect("properties");
        assert_eq!(properties["security.protocol"], "SASL_SSL");
        assert_eq!(properties["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(properties.len(), 2);
        std::fs::write(&path, "no separator\n").expect("write");
        let err = args.properties().expect_err("a line without =");
        assert!(err.to_string().contains(":1:"), "{err}");
    }
}
