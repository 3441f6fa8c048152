//! Shared by the Kafka integration tests: finding the broker, unique topic names, and a private
//! tansu broker that a test can stop and restart.
//!
//! The tests run against the broker named by `STATESTORE_KAFKA_BOOTSTRAP` (start one with
//! `export STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)`); without it they pass
//! without running, after one SKIP line (see `statestore_test_support`).

#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different part of this module"
)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use statestore_changelog::KafkaConfig;
pub use statestore_test_support::{announce, kafka_bootstrap as bootstrap};

/// The tansu binary for tests that run their own broker (default: the patched one that
/// `scripts/broker.sh` builds, see its `bin` command).
pub const TANSU_ENV: &str = "STATESTORE_TANSU_BIN";

/// A name no other test run has used: `<prefix>-<pid>-<time>-<counter>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// A config for `store_name` of a fresh application on `bootstrap`, with short timeouts.
pub fn config(bootstrap: &str, store_name: &str) -> KafkaConfig {
    KafkaConfig {
        bootstrap_servers: bootstrap.to_owned(),
        application_id: unique("test"),
        store_name: store_name.to_owned(),
        produce_timeout_ms: 10_000,
        admin_timeout_ms: 10_000,
        ..KafkaConfig::default()
    }
}

/// A tansu broker owned by one test, in its own directory with its own SQLite file and port,
/// so the test can kill it and start it again on the same data.
pub struct Tansu {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl Tansu {
    /// Starts a broker on a free loopback port and waits until it accepts connections.
    pub fn start() -> Tansu {
        let dir = tempfile::tempdir().expect("temp dir for tansu");
        let port = free_port();
        let mut tansu = Tansu {
            dir,
            port,
            child: None,
        };
        tansu.restart();
        tansu
    }

    /// The bootstrap address.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the broker (SIGKILL: nothing is flushed on the way out) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the broker again on the same port and database.
    pub fn restart(&mut self) {
        self.kill();
        let addr = format!("tcp://{}", self.bootstrap());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))
            .expect("log file");
        let child = Command::new(tansu_bin())
            .current_dir(self.dir.path())
            .args([
                "broker",
                "--listener-url",
                &addr,
                "--advertised-listener-url",
                &addr,
            ])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("starting tansu");
        self.child = Some(child);
        self.wait_listening(Duration::from_secs(30));
    }

    /// What the broker printed, across restarts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    fn wait_listening(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            let log = std::fs::read_to_string(self.dir.path().join("broker.log"));
            assert!(exited.is_none(), "tansu exited ({exited:?}): {log:?}");
            assert!(
                Instant::now() < deadline,
                "tansu did not listen within {timeout:?}: {log:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("local address").port()
}

fn tansu_bin() -> PathBuf {
    if let Ok(bin) = std::env::var(TANSU_ENV) {
        return PathBuf::from(bin);
    }
    // The manifest directory at run time: a test binary reused from a build cache shared by
    // several checkouts would carry another checkout's compile-time path.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let script = manifest_dir.join("../scripts/broker.sh");
    let out = std::process::Command::new(script)
        .arg("bin")
        .output()
        .expect("running scripts/broker.sh bin");
    assert!(
        out.status.success(),
        "no tansu binary: {} (or set {TANSU_ENV})",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8(out.stdout).expect("a UTF-8 path").trim())
}
