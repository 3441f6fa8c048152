//! A network namespace joined to this one by a veth pair, so a test can cut the processes it
//! runs there off from every broker (a network partition) and join them again, with nothing
//! but iproute2 (`ip netns`, `ip link`): no iptables needed. Needs root (CAP_NET_ADMIN).
//!
//! ```text
//!   root namespace                      namespace ssf-<pid>-<n>
//!   brokers on 10.231.<n>.1  <-veth->   10.231.<n>.2, the processes run with `command`
//! ```
//!
//! [`cut`](NetNamespace::cut) sets the root end of the pair down: the namespace's packets go
//! nowhere, and its connections to the brokers stall or fail as in a real partition, while
//! processes of the root namespace still reach the brokers on `10.231.<n>.1` (a local address
//! stays reachable from its own namespace with its link down).

use std::ffi::OsStr;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

/// A network namespace and its veth pair; both removed on drop.
#[derive(Debug)]
pub struct NetNamespace {
    name: String,
    /// The root end of the veth pair.
    veth: String,
    host: String,
}

impl NetNamespace {
    /// Creates the namespace and the veth pair, both ends up, or `Err` saying why not (not
    /// root, no `ip`, no network namespaces in this container), so that a test can say it
    /// cannot run rather than fail.
    ///
    /// # Errors
    /// The failed `ip` command and what it printed.
    pub fn create() -> Result<NetNamespace, String> {
        // One subnet per namespace of this process; the pid keeps processes apart.
        static NEXT: AtomicU8 = AtomicU8::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Subnets 10.231.0-249.0/30, spread by pid so two test processes rarely meet.
        let subnet = u8::try_from((pid + u32::from(n)) % 250).unwrap_or(0);
        let name = format!("ssf-{pid}-{n}");
        // Interface names are at most 15 bytes.
        let veth = format!("ssf{}h{n}", pid % 100_000);
        let peer = format!("ssf{}n{n}", pid % 100_000);
        let host = format!("10.231.{subnet}.1");
        let guest = format!("10.231.{subnet}.2");
        let namespace = NetNamespace {
            name: name.clone(),
            veth: veth.clone(),
            host: host.clone(),
        };
        ip(["netns", "add", &name])?;
        // From here on, drop removes what was made.
        ip(["link", "add", &veth, "type", "veth", "peer", "name", &peer])?;
        ip(["link", "set", &peer, "netns", &name])?;
        ip(["addr", "add", &format!("{host}/30"), "dev", &veth])?;
        ip(["link", "set", &veth, "up"])?;
        let inside = ["netns", "exec", &name, "ip"];
        ip(inside
            .iter()
            .copied()
            .chain(["addr", "add", &format!("{guest}/30"), "dev", &peer]))?;
        ip(inside.iter().copied().chain(["link", "set", &peer, "up"]))?;
        ip(inside.iter().copied().chain(["link", "set", "lo", "up"]))?;
        Ok(namespace)
    }

    /// The root end's address: brokers listen there (see [`Cluster::start_on`](crate::Cluster::start_on)).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Cuts the namespace off: sets the root end of the veth pair down.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn cut(&self) {
        ip(["link", "set", &self.veth, "down"]).expect("setting the veth down");
    }

    /// Joins the namespace again: sets the root end of the veth pair up.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn heal(&self) {
        ip(["link", "set", &self.veth, "up"]).expect("setting the veth up");
    }
}

impl Drop for NetNamespace {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it the root end; the
        // second command only covers a namespace whose peer never moved into it.
        let _ = ip(["netns", "del", &self.name]);
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
    }
}

/// Runs `ip args`, `Err` with what it printed when it fails.
fn ip<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<(), String> {
    let args: Vec<&str> = args.into_iter().collect();
    let out = Command::new("ip")
        .args(&args)
        .output()
        .map_err(|err| format!("running ip {}: {err}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
