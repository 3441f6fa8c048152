//! A broker cluster of one test's own, started and stopped through `scripts/broker.sh`, so a
//! test can kill, pause and restart its nodes without touching the shared broker.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// A cluster of `nodes` Apache Kafka nodes (each a broker and a KRaft controller) on loopback,
/// with a working directory and ports of its own; stopped and removed on drop.
///
/// With three nodes or more, topics default to three replicas and `min.insync.replicas` 2
/// (the script's settings). A one-node cluster runs the broker named by `STATESTORE_BROKER`
/// (Apache Kafka unless it says `nisshi`).
#[derive(Debug)]
pub struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    nodes: usize,
    bootstrap: String,
    kind: &'static str,
    /// The address the nodes listen on and advertise.
    host: String,
    /// `STATESTORE_BROKER_SECURITY` of the script: `sasl`, `sasl_ssl`, `kerberos`, or empty
    /// for plaintext.
    security: &'static str,
    /// With `sasl_ssl`: the mTLS listeners' addresses and the certificates' directory.
    tls: Option<(String, PathBuf)>,
}

impl Cluster {
    /// Starts `nodes` nodes on loopback and waits until each serves.
    ///
    /// # Panics
    /// When the script fails (no Java and no way to install it, no free ports, a node that
    /// does not start), with the script's own words.
    pub fn start(nodes: usize) -> Cluster {
        Cluster::start_on(nodes, "127.0.0.1")
    }

    /// Starts `nodes` nodes listening on and advertising `host` (an address of this
    /// machine, such as the root end of a [`NetNamespace`](crate::NetNamespace)'s veth pair,
    /// which its processes reach the brokers through), and waits until each serves.
    ///
    /// # Panics
    /// As [`start`](Cluster::start).
    pub fn start_on(nodes: usize, host: &str) -> Cluster {
        let kind = match std::env::var("STATESTORE_BROKER") {
            Ok(broker) if broker == "nisshi" && nodes == 1 => "nisshi",
            _ => "kafka",
        };
        Cluster::launch(nodes, host, kind, "")
    }

    /// Starts `nodes` Apache Kafka nodes whose client listener is SASL_PLAINTEXT, with the
    /// StandardAuthorizer: PLAIN users `admin` (a super user) and `alice`, SCRAM-SHA-512 user
    /// `alice`, the password of each `<name>-secret`, and OAUTHBEARER with tokens signed by a
    /// key of [`oauth_keys`](Cluster::oauth_keys); a resource without ACLs is open to every
    /// user, one with ACLs only to those they name (see `scripts/broker.sh`).
    ///
    /// # Panics
    /// As [`start`](Cluster::start).
    pub fn start_sasl(nodes: usize) -> Cluster {
        Cluster::launch(nodes, "127.0.0.1", "kafka", "sasl")
    }

    /// Starts `nodes` Apache Kafka nodes with `sasl`'s users and authoriser over TLS (see
    /// `scripts/broker.sh`): the client listener ([`bootstrap`](Cluster::bootstrap)) is
    /// SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; a second listener
    /// ([`ssl_bootstrap`](Cluster::ssl_bootstrap)) is SSL and requires a client certificate,
    /// whose CN is the principal. The script's certificates are in [`certs`](Cluster::certs).
    ///
    /// # Panics
    /// As [`start`](Cluster::start); with more than 3 nodes (ports for 3 listeners each).
    pub fn start_sasl_ssl(nodes: usize) -> Cluster {
        let mut cluster = Cluster::launch(nodes, "127.0.0.1", "kafka", "sasl_ssl");
        let ssl_bootstrap = cluster.script(&["ssl-bootstrap"]);
        let certs = PathBuf::from(cluster.script(&["certs"]));
        cluster.tls = Some((ssl_bootstrap, certs));
        cluster
    }

    /// Starts `nodes` Apache Kafka nodes as [`start_sasl`](Cluster::start_sasl) does, whose
    /// client listener takes GSSAPI too, and an MIT Kerberos KDC of realm `STATESTORE.TEST`
    /// for them (see `scripts/broker.sh`): the nodes' principal is
    /// `kafka/127.0.0.1@STATESTORE.TEST`, and [`kerberos`](Cluster::kerberos) holds the
    /// realm's `krb5.conf` and the clients' keytabs.
    ///
    /// # Panics
    /// As [`start`](Cluster::start); when the Kerberos packages are missing and cannot be
    /// installed.
    pub fn start_kerberos(nodes: usize) -> Cluster {
        Cluster::launch(nodes, "127.0.0.1", "kafka", "kerberos")
    }

    fn launch(nodes: usize, host: &str, kind: &'static str, security: &'static str) -> Cluster {
        let dir = tempfile::tempdir().expect("a directory for the cluster's state file");
        // Each node's client and controller ports, then, with TLS, each node's mTLS port; with
        // Kerberos, the KDC's port after them.
        let ports = match security {
            "sasl_ssl" => 3 * nodes,
            "kerberos" => 2 * nodes + 1,
            _ => 2 * nodes,
        };
        let mut cluster = Cluster {
            dir,
            port: free_ports(ports, host),
            nodes,
            bootstrap: String::new(),
            kind,
            host: host.to_owned(),
            security,
            tls: None,
        };
        cluster.bootstrap = cluster.script(&["start", &nodes.to_string()]);
        cluster
    }

    /// The bootstrap addresses, comma-separated.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The mTLS listeners' addresses, comma-separated (a [`start_sasl_ssl`] cluster).
    ///
    /// # Panics
    /// When the cluster was not started by [`start_sasl_ssl`].
    ///
    /// [`start_sasl_ssl`]: Cluster::start_sasl_ssl
    pub fn ssl_bootstrap(&self) -> &str {
        &self.tls.as_ref().expect("a sasl_ssl cluster").0
    }

    /// The directory of the certificates of a [`start_sasl_ssl`] cluster, PEM files:
    /// `ca.pem` (the CA that signed the nodes' certificate), `carol.pem` and `carol.key` (a
    /// client certificate it signed, principal `User:carol`), `rogue-ca.pem` (a CA the nodes
    /// do not trust), `rogue.pem` and `rogue.key` (a CN=carol certificate it signed).
    ///
    /// # Panics
    /// When the cluster was not started by [`start_sasl_ssl`].
    ///
    /// [`start_sasl_ssl`]: Cluster::start_sasl_ssl
    pub fn certs(&self) -> &Path {
        &self.tls.as_ref().expect("a sasl_ssl cluster").1
    }

    /// The directory of the OAUTHBEARER keys of a [`start_sasl`] or [`start_sasl_ssl`]
    /// cluster, RSA keys in PKCS#8 PEM: `oauth.key`, whose RS256 signature the nodes accept
    /// on a JWT (key id `statestore-test`, its public half in `jwks.json`) of issuer
    /// `statestore-test` for audience `statestore`, its `sub` claim the principal; and
    /// `rogue.key`, another key, whose signature they refuse.
    ///
    /// # Panics
    /// When the cluster was started by neither.
    ///
    /// [`start_sasl`]: Cluster::start_sasl
    /// [`start_sasl_ssl`]: Cluster::start_sasl_ssl
    pub fn oauth_keys(&self) -> PathBuf {
        PathBuf::from(self.script(&["oauth"]))
    }

    /// The directory of the realm of a [`start_kerberos`] cluster: `krb5.conf` (the realm
    /// `STATESTORE.TEST` and its KDC on loopback; a client's `KRB5_CONFIG`), and keytabs:
    /// `alice.keytab` (`alice@STATESTORE.TEST`, the principal `User:alice`), `stale.keytab`
    /// (alice's key before the KDC changed it), `mallory.keytab` (`mallory@STATESTORE.TEST`,
    /// whom the KDC does not know); and `kdc.log`, the tickets the KDC issued.
    ///
    /// # Panics
    /// When the cluster was not started by [`start_kerberos`].
    ///
    /// [`start_kerberos`]: Cluster::start_kerberos
    pub fn kerberos(&self) -> PathBuf {
        PathBuf::from(self.script(&["kerberos"]))
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Node `node`'s client port (nodes count from 1).
    pub fn port(&self, node: usize) -> u16 {
        self.port + 2 * u16::try_from(node - 1).expect("a node number")
    }

    /// Kills node `node` with SIGKILL and waits until it is gone; its data stays.
    pub fn kill(&self, node: usize) {
        self.script(&["kill", &node.to_string()]);
    }

    /// Starts node `node` again on its data and waits until it serves.
    pub fn restart(&self, node: usize) {
        self.script(&["restart", &node.to_string()]);
    }

    /// Stops node `node` with SIGSTOP.
    pub fn pause(&self, node: usize) {
        self.script(&["pause", &node.to_string()]);
    }

    /// Lets a paused node `node` go on (SIGCONT).
    pub fn resume(&self, node: usize) {
        self.script(&["resume", &node.to_string()]);
    }

    /// What node `node` has logged so far, across restarts.
    pub fn log(&self, node: usize) -> String {
        let path = self.script(&["log", &node.to_string()]);
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// Runs `scripts/broker.sh args` for this cluster and returns what it printed.
    fn script(&self, args: &[&str]) -> String {
        let out = self
            .command()
            .args(args)
            .output()
            .expect("running scripts/broker.sh");
        assert!(
            out.status.success(),
            "scripts/broker.sh {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// `scripts/broker.sh` with this cluster's state file, ports and broker.
    fn command(&self) -> Command {
        let mut command = Command::new(broker_script());
        command
            .env("STATESTORE_BROKER", self.kind)
            .env(
                "STATESTORE_BROKER_STATE",
                self.dir.path().join("broker.env"),
            )
            .env("STATESTORE_KAFKA_PORT", self.port.to_string())
            .env("STATESTORE_BROKER_HOST", &self.host)
            .env("STATESTORE_BROKER_SECURITY", self.security);
        command
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.command().arg("stop").output();
    }
}

/// `scripts/broker.sh` of the checkout under test: found upwards from the package's manifest
/// directory at run time (a test binary reused from a build cache shared by several checkouts
/// would carry another checkout's compile-time path).
pub(crate) fn broker_script() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    start
        .ancestors()
        .map(|dir| dir.join("scripts/broker.sh"))
        .find(|script| script.is_file())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/broker.sh"))
}

/// The first of `count` consecutive ports of `host` that are free now, below the ephemeral
/// range, so clients' own ports never take them. Two clusters of one process never get the
/// same ports.
fn free_ports(count: usize, host: &str) -> u16 {
    static TAKEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut taken = TAKEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(count <= 10, "at most 10 ports a cluster ({count} asked)");
    let count = u16::try_from(count).expect("a port count");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().rotate_left(16);
    for attempt in 0..1_000u32 {
        let slot = u16::try_from(seed.wrapping_add(attempt.wrapping_mul(7919)) % 1_000)
            .expect("below 1000");
        let base = 21_000 + slot * 10;
        let ports = base..base + count;
        let free = !ports.clone().any(|p| taken.contains(&p))
            && ports.clone().all(|p| TcpListener::bind((host, p)).is_ok());
        if free {
            taken.extend(ports);
            return base;
        }
    }
    panic!("no {count} consecutive free ports of {host} between 21000 and 31000");
}
