//! Interactive queries across processes against the real broker: two instances of
//! partitioned-wordcount serve `GET /count/<word>` over HTTP on loopback. Once the input is
//! processed, asking either instance for any word gives its exact count, so each instance
//! answers some words itself and forwards the others to their owner; with one standby replica
//! the metadata names the other instance as each word's standby, and that instance's standby
//! copy answers the exact count too.
//!
//! Needs `STATESTORE_KAFKA_BOOTSTRAP`; without it the test prints one SKIP line and passes.

mod support;
use support::{BIN, output, unique};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// Lines produced (8 words each).
const LINES: u64 = 2_000;

/// An instance process serving queries, its stderr lines on a channel.
struct Instance {
    child: Child,
    lines: Receiver<String>,
    log: Vec<String>,
    endpoint: String,
}

impl Instance {
    fn start(
        bootstrap: &str,
        topic: &str,
        app: &str,
        extra: &[&str],
    ) -> (Instance, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("dir");
        let mut child = Command::new(BIN)
            .args(["run", "--bootstrap", bootstrap, "--topic", topic])
            .args(["--application-id", app, "--backend", "redb"])
            .args([
                "--commit-interval-ms",
                "200",
                "--session-timeout-ms",
                "10000",
            ])
            .args(["--num-standby-replicas", "1", "--serve", "127.0.0.1:0"])
            .args(extra)
            .arg("--stop-on-stdin-eof")
            .arg("--state-dir")
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn instance");
        let stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut instance = Instance {
            child,
            lines: rx,
            log: Vec::new(),
            endpoint: String::new(),
        };
        let line = instance.wait_for(Duration::from_secs(60), |l| {
            l.starts_with("serving queries at ")
        });
        instance.endpoint = line["serving queries at ".len()..].to_owned();
        (instance, dir)
    }

    fn wait_for(&mut self, timeout: Duration, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(remaining) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(_) => panic!("no such line within {timeout:?}; log: {:#?}", self.log),
            }
        }
    }

    /// Closes stdin, so the instance commits, leaves the group and exits.
    fn stop(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait");
        self.log.extend(self.lines.try_iter());
        assert!(status.success(), "instance failed: {:#?}", self.log);
    }
}

/// One HTTP answer: status, body, and the `x-served-by` and `x-source` headers.
struct Answer {
    status: u16,
    body: String,
    served_by: String,
    source: String,
}

fn get(agent: &ureq::Agent, url: &str) -> Answer {
    let mut response = agent.get(url).call().expect("an HTTP answer");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (served_by, source) = (header("x-served-by"), header("x-source"));
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().expect("body");
    Answer {
        status,
        body,
        served_by,
        source,
    }
}

/// Asks `url` until it answers 200 (a 503 is a group still settling), within `timeout`.
fn get_ok(agent: &ureq::Agent, url: &str, timeout: Duration) -> Answer {
    let deadline = Instant::now() + timeout;
    loop {
        let answer = get(agent, url);
        if answer.status == 200 {
            return answer;
        }
        assert!(
            answer.status == 503 && Instant::now() < deadline,
            "{url}: {} {}",
            answer.status,
            answer.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `word<TAB>count` lines.
fn parse_counts(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (word, count) = line.split_once('\t')?;
            Some((word.to_owned(), count.parse().ok()?))
        })
        .collect()
}

/// Produces `LINES` lines to a new topic and returns it with the expected counts.
fn produce(bootstrap: &str) -> (String, BTreeMap<String, u64>) {
    let topic = unique("pwc-iq-words");
    let lines = LINES.to_string();
    let args = [
        "--bootstrap",
        bootstrap,
        "--topic",
        &topic,
        "--lines",
        &lines,
    ];
    output(&[&["produce"][..], &args].concat());
    let expected = parse_counts(&output(&["expected", "--lines", &lines]));
    assert!(expected.len() > 10);
    (topic, expected)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// Asks `endpoint` for `word` until it answers `count` (counts grow while the input is
/// processed; a 503 is a group still settling) or `deadline` passes, and returns the answer.
fn exact(agent: &ureq::Agent, endpoint: &str, word: &str, count: u64, deadline: Instant) -> Answer {
    let url = format!("http://{endpoint}/count/{word}");
    let answer = loop {
        let answer = get_ok(
            agent,
            &url,
            deadline.saturating_duration_since(Instant::now()),
        );
        let got: u64 = answer.body.trim().parse().expect("a count");
        if got == count || Instant::now() >= deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        answer.body.trim(),
        count.to_string(),
        "{word} asked of {endpoint}"
    );
    answer
}

#[test]
fn either_instance_answers_every_count_forwarding_to_the_owner() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "either_instance_answers_every_count_forwarding_to_the_owner",
    ) else {
        return;
    };
    let app = unique("pwc-iq");
    let (topic, expected) = produce(&bootstrap);
    let (mut a, _a_dir) = Instance::start(&bootstrap, &topic, &app, &[]);
    let (mut b, _b_dir) = Instance::start(&bootstrap, &topic, &app, &[]);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    let agent = agent();
    let endpoints = [a.endpoint.clone(), b.endpoint.clone()];

    // Every word from either instance.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut forwarded = [0usize; 2];
    for (word, &count) in &expected {
        for (asked, endpoint) in endpoints.iter().enumerate() {
            let answer = exact(&agent, endpoint, word, count, deadline);
            assert_eq!(answer.source, "active", "{word}");
            if answer.served_by != *endpoint {
                assert_eq!(answer.served_by, endpoints[1 - asked], "{word}");
                forwarded[asked] += 1;
            }
        }
    }
    assert!(
        forwarded.iter().all(|&n| n > 0),
        "each instance forwarded some words to the other: {forwarded:?}"
    );

    // The metadata names the owner and, with one replica, the other instance as standby; the
    // standby copy there answers the same count once it has caught up.
    for word in expected.keys().take(8) {
        let url = format!("http://{}/metadata/{word}", endpoints[0]);
        let answer = get_ok(&agent, &url, Duration::from_secs(30));
        let metadata: serde_json::Value = serde_json::from_str(&answer.body).expect("json");
        let active = metadata["active"].as_str().expect("an owner").to_owned();
        let standby = endpoints
            .iter()
            .find(|e| **e != active)
            .expect("two endpoints");
        assert_eq!(metadata["standbys"], serde_json::json!([standby]), "{word}");
        let url = format!("http://{standby}/count/{word}?standby=1&forwarded=1");
        let deadline = Instant::now() + Duration::from_secs(30);
        let copy = loop {
            let copy = get_ok(&agent, &url, Duration::from_secs(30));
            if copy.body.trim() == expected[word].to_string() || Instant::now() >= deadline {
                break copy;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(copy.source, "standby", "{word}: {}", copy.body);
        assert_eq!(copy.body.trim(), expected[word].to_string(), "{word}");
    }

    // Bad requests are refused, not fatal.
    for (path, status) in [("/count/", 400), ("/count/%zz", 400), ("/nope", 404)] {
        let answer = get(&agent, &format!("http://{}{path}", endpoints[0]));
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
    }
    a.stop();
    b.stop();
}

/// While a third instance joins and then one of the first two is killed with SIGKILL (its
/// tasks move after the session timeout), every count an instance answers is exact: the
/// group in flux gets 503 (or 502 when forwarded to the dead one), never a stale or partial
/// count.
#[test]
fn answers_stay_exact_or_unavailable_while_instances_join_and_die() {
    let Some(bootstrap) = statestore_test_support::kafka_bootstrap(
        "answers_stay_exact_or_unavailable_while_instances_join_and_die",
    ) else {
        return;
    };
    let app = unique("pwc-iq-churn");
    let (topic, expected) = produce(&bootstrap);
    let (mut a, _a_dir) = Instance::start(&bootstrap, &topic, &app, &[]);
    let (mut b, _b_dir) = Instance::start(&bootstrap, &topic, &app, &[]);
    a.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    b.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    let agent = agent();
    let deadline = Instant::now() + Duration::from_secs(180);
    for (word, &count) in &expected {
        exact(&agent, &a.endpoint, word, count, deadline);
    }

    // A keeps being asked every word while the group changes under it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asking = {
        let (stop, agent, endpoint, expected) = (
            stop.clone(),
            agent.clone(),
            a.endpoint.clone(),
            expected.clone(),
        );
        std::thread::spawn(move || {
            let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (word, &count) in &expected {
                    let answer = get(&agent, &format!("http://{endpoint}/count/{word}"));
                    if answer.status == 200 {
                        assert_eq!(answer.body.trim(), count.to_string(), "{word} during churn");
                    } else {
                        assert!(
                            [502, 503].contains(&answer.status),
                            "{word}: {}",
                            answer.body
                        );
                    }
                    *statuses.entry(answer.status).or_default() += 1;
                }
            }
            statuses
        })
    };
    let (mut c, _c_dir) = Instance::start(&bootstrap, &topic, &app, &[]);
    c.wait_for(Duration::from_secs(120), |l| l.starts_with("assigned"));
    std::thread::sleep(Duration::from_secs(3));
    b.child.kill().expect("SIGKILL");
    let _ = b.child.wait();
    // B's tasks move after its session timeout (10 s); then A and C answer every word.
    std::thread::sleep(Duration::from_secs(12));
    let deadline = Instant::now() + Duration::from_secs(180);
    for (word, &count) in &expected {
        exact(&agent, &a.endpoint, word, count, deadline);
        exact(&agent, &c.endpoint, word, count, deadline);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = asking
        .join()
        .expect("every answer during the churn was exact or refused");
    eprintln!("answers during the churn by status: {statuses:?}");
    assert!(statuses.get(&200).is_some_and(|&n| n > 0), "{statuses:?}");
    a.stop();
    c.stop();
}
