//! The faults a [`FaultProxy`](super::FaultProxy) injects: what they do, to which answers,
//! how often, and what the proxy saw of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiKey;

/// What happens to a request that a fault takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The broker never sees the request: the proxy answers it with this error in every
    /// error field of the answer (the partitions, the group, the coordinator key). Metadata
    /// requests are the exception: they reach the broker, and every topic of its answer
    /// carries the error.
    Error(ResponseError),
    /// The broker gets the request and answers; the proxy closes the client's connection
    /// instead of passing the answer on (a write that happened, unacknowledged).
    DropConnection,
    /// The answer is passed on this much later than it arrived.
    Delay(Duration),
}

/// How many requests a fault takes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Limit {
    /// The next `n` matching requests, then the fault is spent.
    Times(u32),
    /// Each matching request with probability `p`, from a generator seeded with `seed` (the
    /// same seed picks the same requests of the same sequence), until the fault is cleared.
    Probability { p: f64, seed: u64 },
}

/// A fault to inject: an [`Action`] on the answers of one API, optionally only for clients
/// whose `client.id` contains a substring, for the next N matching requests (1 unless
/// [`times`](Fault::times) says otherwise) or at random ([`probability`](Fault::probability)).
///
/// ```
/// use std::time::Duration;
/// use statestore_test_support::proxy::{ApiKey, Fault, ResponseError};
///
/// let retriable = Fault::error(ApiKey::ListOffsets, ResponseError::NotLeaderOrFollower).times(3);
/// let one_client = Fault::drop_connection(ApiKey::Produce).client("wordcount-a-");
/// let soak = Fault::delay(ApiKey::Fetch, Duration::from_millis(200)).probability(0.05, 7);
/// # let _ = (retriable, one_client, soak);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub(super) api: ApiKey,
    pub(super) client: Vec<String>,
    pub(super) action: Action,
    limit: Limit,
}

impl Fault {
    /// Answers the next request of `api` with `error` (see [`Action::Error`]).
    pub fn error(api: ApiKey, error: ResponseError) -> Fault {
        Fault::new(api, Action::Error(error))
    }

    /// Closes the connection instead of passing on the next answer of `api`.
    pub fn drop_connection(api: ApiKey) -> Fault {
        Fault::new(api, Action::DropConnection)
    }

    /// Passes on the next answer of `api` `delay` late.
    pub fn delay(api: ApiKey, delay: Duration) -> Fault {
        Fault::new(api, Action::Delay(delay))
    }

    fn new(api: ApiKey, action: Action) -> Fault {
        Fault {
            api,
            client: Vec::new(),
            action,
            limit: Limit::Times(1),
        }
    }

    /// Takes the next `n` matching requests instead of one.
    #[must_use]
    pub fn times(mut self, n: u32) -> Fault {
        self.limit = Limit::Times(n);
        self
    }

    /// Takes each matching request with probability `p` (0 to 1), until
    /// [`clear`](super::FaultProxy::clear)ed, with a generator seeded by `seed`: for soak
    /// runs.
    #[must_use]
    pub fn probability(mut self, p: f64, seed: u64) -> Fault {
        self.limit = Limit::Probability {
            p: p.clamp(0.0, 1.0),
            seed,
        };
        self
    }

    /// Takes only requests of clients whose `client.id` contains `substring` (and every
    /// substring given before: `.client("app-b-").client("-restore-consumer")` aims at one
    /// instance's restore consumer).
    #[must_use]
    pub fn client(mut self, substring: &str) -> Fault {
        self.client.push(substring.to_owned());
        self
    }
}

/// What the proxy saw of one injected fault; cheap to clone.
#[derive(Debug, Clone)]
pub struct Injection {
    state: Arc<Counter>,
}

#[derive(Debug)]
struct Counter {
    fired: Mutex<u64>,
    changed: Condvar,
    wanted: Option<u64>,
}

impl Injection {
    /// How many requests the fault took so far.
    pub fn fired(&self) -> u64 {
        *self
            .state
            .fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until a counted fault ([`Fault::times`]) is spent, or (random faults) until it
    /// fired once; `false` when `timeout` passed first.
    pub fn wait(&self, timeout: Duration) -> bool {
        let wanted = self.state.wanted.unwrap_or(1);
        let deadline = Instant::now() + timeout;
        let mut fired = self
            .state
            .fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *fired < wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            fired = self
                .state
                .changed
                .wait_timeout(fired, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// An injected fault with what is left of it.
#[derive(Debug)]
pub(super) struct Armed {
    fault: Fault,
    left: Option<u32>,
    rng: u64,
    counter: Arc<Counter>,
}

impl Armed {
    pub(super) fn new(fault: Fault) -> (Armed, Injection) {
        let (left, rng) = match fault.limit {
            Limit::Times(n) => (Some(n), 0),
            Limit::Probability { seed, .. } => (None, seed),
        };
        let counter = Arc::new(Counter {
            fired: Mutex::new(0),
            changed: Condvar::new(),
            wanted: left.map(u64::from),
        });
        let injection = Injection {
            state: Arc::clone(&counter),
        };
        let armed = Armed {
            fault,
            left,
            rng,
            counter,
        };
        (armed, injection)
    }

    /// Whether the fault is spent.
    pub(super) fn spent(&self) -> bool {
        self.left == Some(0)
    }

    /// The action to take on a request of `api` from `client_id`, if this fault takes it.
    pub(super) fn take(&mut self, api: ApiKey, client_id: &str) -> Option<Action> {
        if self.fault.api != api || self.spent() {
            return None;
        }
        if !self
            .fault
            .client
            .iter()
            .all(|s| client_id.contains(s.as_str()))
        {
            return None;
        }
        match (&mut self.left, self.fault.limit) {
            (Some(left), _) => *left -= 1,
            (None, Limit::Probability { p, .. }) => {
                if unit_interval(&mut self.rng) >= p {
                    return None;
                }
            }
            (None, Limit::Times(_)) => return None,
        }
        let mut fired = self
            .counter
            .fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *fired += 1;
        self.counter.changed.notify_all();
        Some(self.fault.action)
    }
}

/// The next number of a splitmix64 sequence, as a float in `[0, 1)`.
fn unit_interval(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // The top 53 bits: every such value is exact in an f64.
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Requests seen per API, for tests that check a client did send what they aim at.
#[derive(Debug, Default)]
pub(super) struct Seen {
    counts: Mutex<std::collections::BTreeMap<i16, Arc<AtomicU64>>>,
}

impl Seen {
    pub(super) fn count(&self, api: i16) {
        let counter = Arc::clone(
            self.counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(api)
                .or_default(),
        );
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn get(&self, api: i16) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&api)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counted_fault_takes_exactly_n_matching_requests() {
        let fault = Fault::error(ApiKey::Fetch, ResponseError::NotLeaderOrFollower)
            .times(2)
            .client("app-a-")
            .client("-consumer");
        let (mut armed, injection) = Armed::new(fault);
        assert_eq!(armed.take(ApiKey::Produce, "app-a-producer"), None);
        assert_eq!(armed.take(ApiKey::Fetch, "app-b-consumer"), None);
        assert_eq!(armed.take(ApiKey::Fetch, "app-a-producer"), None);
        assert!(armed.take(ApiKey::Fetch, "app-a-consumer").is_some());
        assert!(!injection.wait(Duration::from_millis(1)));
        assert!(armed.take(ApiKey::Fetch, "app-a-consumer").is_some());
        assert_eq!(armed.take(ApiKey::Fetch, "app-a-consumer"), None);
        assert!(armed.spent());
        assert_eq!(injection.fired(), 2);
        assert!(injection.wait(Duration::ZERO));
    }

    #[test]
    fn a_random_fault_takes_about_its_share_and_repeats_with_its_seed() {
        let run = |seed| {
            let fault = Fault::drop_connection(ApiKey::Produce).probability(0.25, seed);
            let (mut armed, _) = Armed::new(fault);
            (0..4000)
                .map(|_| armed.take(ApiKey::Produce, "x").is_some())
                .collect::<Vec<_>>()
        };
        let first = run(7);
        let taken = first.iter().filter(|&&t| t).count();
        assert!((800..1200).contains(&taken), "{taken} of 4000");
        assert_eq!(first, run(7));
        assert_ne!(first, run(8));
    }
}
