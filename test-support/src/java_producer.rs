//! Apache Kafka's own Java producer (its console producer, from the jars `scripts/broker.sh`
//! installs), so tests read topics written the way most clients of a cluster write them.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::cluster::broker_script;

/// Writes `records` (key, value; neither may hold a newline or `\t`) to `topic` through
/// Apache Kafka's Java producer with `compression.type` `codec` (`none`, `gzip`, `snappy`,
/// `lz4` or `zstd`), acks from every in-sync replica, and returns once the producer exits.
///
/// # Panics
/// When Java or the jars are missing, or the producer fails; the panic carries its stderr.
pub fn java_produce(bootstrap: &str, topic: &str, codec: &str, records: &[(String, String)]) {
    let classpath = kafka_classpath();
    let mut child = Command::new("java")
        .args(["-cp", &classpath, "org.apache.kafka.tools.ConsoleProducer"])
        .args(["--bootstrap-server", bootstrap, "--topic", topic])
        .args([
            "--compression-codec",
            codec,
            "--request-required-acks",
            "-1",
        ])
        .args([
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=\t",
        ])
        .args(["--producer-property", "linger.ms=20"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting java");
    {
        let mut stdin = child.stdin.take().expect("the producer's stdin");
        let mut lines = String::new();
        for (key, value) in records {
            lines.push_str(&format!("{key}\t{value}\n"));
        }
        stdin
            .write_all(lines.as_bytes())
            .expect("writing to the producer");
    }
    let out = child.wait_with_output().expect("waiting for java");
    assert!(
        out.status.success(),
        "Kafka's console producer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Java classpath of Apache Kafka's jars (`scripts/broker.sh classpath`), for running its
/// own tools.
///
/// # Panics
/// When the script fails, with its stderr.
pub fn kafka_classpath() -> String {
    let out = Command::new(broker_script())
        .arg("classpath")
        .env("STATESTORE_BROKER", "kafka")
        .output()
        .expect("running scripts/broker.sh classpath");
    assert!(
        out.status.success(),
        "scripts/broker.sh classpath: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
