//! Client properties from a file in the form of Kafka's `client.properties`.

use std::collections::BTreeMap;
use std::path::Path;

use store_api::{Error, Result};

/// The librdkafka properties of a file in the form of Kafka's `client.properties`: one
/// `KEY=VALUE` a line, spaces around either trimmed; blank lines and lines starting with `#`
/// or `!` are skipped. For [`TasksConfig::properties`](super::TasksConfig::properties); the
/// keys are librdkafka's (most are the Java client's, see docs/security.md).
///
/// # Errors
/// `Io` when the file cannot be read, `InvalidArgument` naming the first line (`path:line`)
/// that is not `KEY=VALUE`.
pub fn read_client_properties(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| Error::io(format!("reading {}", path.display()), err))?;
    let mut properties = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (key, value) = parse_property(line)
            .map_err(|err| Error::invalid(format!("{}:{}: {err}", path.display(), number + 1)))?;
        properties.insert(key, value);
    }
    Ok(properties)
}

/// `KEY=VALUE` (a line of a properties file, or a command-line argument), spaces around either
/// trimmed.
///
/// # Errors
/// Text without `=` or with an empty key.
pub fn parse_property(text: &str) -> std::result::Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or("expected KEY=VALUE")?;
    let key = key.trim();
    if key.is_empty() {
        return Err("expected KEY=VALUE, with a key".to_owned());
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_properties_file_skips_comments_and_names_a_bad_line() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("client.properties");
        std::fs::write(
            &path,
            "# a comment\n! another\nsecurity.protocol = SASL_SSL\n\nsasl.jaas.config=a=b\n",
        )
        .expect("write");
        let properties = read_client_properties(&path).expect("properties");
        assert_eq!(properties["security.protocol"], "SASL_SSL");
        assert_eq!(properties["sasl.jaas.config"], "a=b");
        assert_eq!(properties.len(), 2);
        std::fs::write(&path, "a=1\nno separator\n").expect("write");
        let err = read_client_properties(&path).expect_err("a line without =");
        assert!(err.to_string().contains("client.properties:2:"), "{err}");
        std::fs::write(&path, " = value\n").expect("write");
        assert!(read_client_properties(&path).is_err(), "an empty key");
        let missing = read_client_properties(&dir.path().join("none")).expect_err("no file");
        assert_eq!(missing.kind(), store_api::ErrorKind::Io, "{missing}");
    }
}
