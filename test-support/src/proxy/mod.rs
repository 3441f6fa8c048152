//! A Kafka wire-protocol fault proxy: clients connect to it instead of the brokers, and a
//! test decides at run time which answers they get.
//!
//! The proxy listens on loopback, one port per broker. It rewrites every answer that names
//! brokers (Metadata, FindCoordinator, DescribeCluster, and the leaders Produce and Fetch
//! name) to name its own ports, so a client that bootstraps through it never reaches a
//! broker directly. It narrows the versions an ApiVersions answer offers to those the
//! `kafka-protocol` crate reads, so every request and answer can be decoded. Faults
//! ([`Fault`]) answer requests of one API with an error, close the connection instead of
//! passing an answer on, or delay answers, for the next N requests or at random, for every
//! client or those whose `client.id` contains a substring; a blackholed client's requests
//! vanish (its session expires).
//!
//! Threads, no async runtime: three per client connection, one per listening port.
//! See `docs/fault-proxy.md` for testing an application with it.

mod answers;
mod conn;
mod rules;

use std::collections::BTreeMap;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;

pub use kafka_protocol::ResponseError;
pub use kafka_protocol::messages::ApiKey;
pub use rules::{Action, Fault, Injection};

use conn::Tracked;
use rules::{Armed, Seen};

/// The address the proxy listens on and names in the answers it rewrites.
const LOOPBACK: &str = "127.0.0.1";

/// The APIs whose requests the proxy can answer with an error itself (see
/// [`Action::Error`]).
pub const ERROR_APIS: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::EndTxn,
];

/// A fault proxy in front of a Kafka cluster; stopped, with every connection through it
/// closed, on drop.
///
/// ```no_run
/// use statestore_test_support::proxy::{ApiKey, Fault, FaultProxy, ResponseError};
///
/// let proxy = FaultProxy::start("127.0.0.1:9092")?;
/// // Give the application `proxy.bootstrap()` as its bootstrap servers, then:
/// let faults = proxy.inject(
///     Fault::error(ApiKey::ListOffsets, ResponseError::NotLeaderOrFollower).times(3),
/// )?;
/// assert!(faults.wait(std::time::Duration::from_secs(30)));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct FaultProxy {
    shared: Arc<Shared>,
    bootstrap: String,
}

/// What the proxy's threads share.
pub(crate) struct Shared {
    faults: Mutex<Vec<Armed>>,
    blackholes: Mutex<Vec<String>>,
    /// The proxy's port for each broker address (`host:port`) seen.
    ports: Mutex<BTreeMap<String, u16>>,
    connections: Mutex<Vec<Tracked>>,
    seen: Seen,
    stopped: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FaultProxy {
    /// Starts a proxy in front of the brokers `bootstrap` names (`host:port`,
    /// comma-separated): a port for each now, and one for each further broker as answers
    /// name it.
    ///
    /// # Errors
    /// When no loopback port can be bound or no thread started.
    pub fn start(bootstrap: &str) -> io::Result<FaultProxy> {
        let shared = Arc::new(Shared {
            faults: Mutex::new(Vec::new()),
            blackholes: Mutex::new(Vec::new()),
            ports: Mutex::new(BTreeMap::new()),
            connections: Mutex::new(Vec::new()),
            seen: Seen::default(),
            stopped: AtomicBool::new(false),
        });
        let mut ports = Vec::new();
        for address in bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            ports.push(format!("{LOOPBACK}:{}", shared.listen(address)?));
        }
        if ports.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no broker address in {bootstrap:?}"),
            ));
        }
        Ok(FaultProxy {
            shared,
            bootstrap: ports.join(","),
        })
    }

    /// The proxy's bootstrap servers, for the clients under test.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Arms `fault`; the returned [`Injection`] tells how often it fired.
    ///
    /// # Errors
    /// `InvalidInput` for an error on an API the proxy cannot answer itself (see
    /// [`ERROR_APIS`]).
    pub fn inject(&self, fault: Fault) -> io::Result<Injection> {
        if matches!(fault.action, Action::Error(_)) && !ERROR_APIS.contains(&fault.api) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the proxy cannot answer {:?} with an error", fault.api),
            ));
        }
        let (armed, injection) = Armed::new(fault);
        let mut faults = lock(&self.shared.faults);
        faults.retain(|armed| !armed.spent());
        faults.push(armed);
        Ok(injection)
    }

    /// Disarms every fault.
    pub fn clear(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Drops every request of clients whose `client.id` contains `client` until
    /// [`lift`](FaultProxy::lift)ed: they wait for answers that never come.
    pub fn blackhole(&self, client: &str) {
        lock(&self.shared.blackholes).push(client.to_owned());
    }

    /// Ends every blackhole.
    pub fn lift(&self) {
        lock(&self.shared.blackholes).clear();
    }

    /// How many requests of `api` reached the proxy (blackholed ones too).
    pub fn requests(&self, api: ApiKey) -> u64 {
        self.shared.seen.get(api as i16)
    }

    /// Closes every client connection open now (clients reconnect through the proxy).
    pub fn close_connections(&self) {
        for conn in lock(&self.shared.connections).drain(..) {
            conn.close();
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("bootstrap", &self.bootstrap)
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Relaxed);
        self.close_connections();
        // Wakes each listener's accept so its thread sees the stop.
        for port in lock(&self.shared.ports).values() {
            let _ = TcpStream::connect((LOOPBACK, *port));
        }
    }
}

impl Shared {
    /// Listens on a new loopback port in front of `upstream` and returns the port.
    fn listen(self: &Arc<Self>, upstream: &str) -> io::Result<u16> {
        let listener = TcpListener::bind((LOOPBACK, 0))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::clone(self);
        let target = upstream.to_owned();
        thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || conn::serve(listener, target, shared))?;
        lock(&self.ports).insert(upstream.to_owned(), port);
        Ok(port)
    }

    /// The proxy's port for broker `host:port`, listening on a new one at its first
    /// mention; the broker's own port when none can be had (the client then bypasses
    /// the proxy, which the test sees as faults that never fire).
    fn local_port(self: &Arc<Self>, host: &str, port: i32) -> i32 {
        let upstream = format!("{host}:{port}");
        if let Some(&local) = lock(&self.ports).get(&upstream) {
            return i32::from(local);
        }
        self.listen(&upstream).map_or(port, i32::from)
    }

    fn track(&self, conn: Tracked) {
        let mut connections = lock(&self.connections);
        connections.retain(Tracked::open);
        connections.push(conn);
    }

    fn blackholed(&self, client_id: &str) -> bool {
        lock(&self.blackholes)
            .iter()
            .any(|substring| client_id.contains(substring.as_str()))
    }

    /// The action of the first armed fault that takes a request of `api` from `client_id`.
    fn action(&self, api: ApiKey, client_id: &str) -> Option<Action> {
        lock(&self.faults)
            .iter_mut()
            .find_map(|armed| armed.take(api, client_id))
    }
}
