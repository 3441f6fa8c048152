//! `run --serve HOST:PORT`: answers "count of word w" over HTTP from any instance.
//!
//! - `GET /count/<word>`: the word's count, as text. Answered from this instance's active
//!   task for the word's partition; otherwise forwarded to the instance that owns it (found
//!   with `Queries::metadata_for_key`). With `?standby=1` a standby copy here may answer, and
//!   a word owned by no instance is asked of a standby. Headers say who answered:
//!   `x-served-by` (endpoint), `x-source` (`active` or `standby`), `x-partition`, and for a
//!   standby `x-standby-age-ms` and `x-standby-offsets-behind`.
//! - `GET /metadata/<word>`: `{"partition":..,"active":..,"standbys":[..]}`.
//! - `GET /instances`: every instance, its endpoint and tasks.
//!
//! A forwarded request carries `forwarded=1` and is never forwarded again, so two instances
//! that disagree during a rebalance answer 503 rather than bounce a request. Bad paths and
//! methods get 4xx; a group in flux gets 503 with `retry-after: 1`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use statestore_tasks::{Queries, QueryError, ReadFrom, ReadSource};
use store_api::{Error, Result};
use tiny_http::{Header, Method, Request, Response, Server};

/// Requests served at once: a request may wait for a forwarded one.
const THREADS: usize = 4;

/// How long a forwarded request may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

type Reply = Response<std::io::Cursor<Vec<u8>>>;

/// Binds `address` (port 0 picks one) and returns the server and the address it listens at.
///
/// # Errors
/// `Io` when the address cannot be bound.
pub fn bind(address: &str) -> Result<(Server, String)> {
    let server = Server::http(address)
        .map_err(|err| Error::io(format!("binding {address}"), std::io::Error::other(err)))?;
    let bound = server
        .server_addr()
        .to_ip()
        .map_or_else(|| address.to_owned(), |ip| ip.to_string());
    Ok((server, bound))
}

/// Serves `server` on [`THREADS`] threads until `stop` is set.
pub fn spawn(server: Server, queries: Queries, stop: Arc<AtomicBool>) {
    let server = Arc::new(server);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FORWARD_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    for _ in 0..THREADS {
        let (server, queries, agent, stop) = (
            Arc::clone(&server),
            queries.clone(),
            agent.clone(),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match server.recv_timeout(Duration::from_millis(200)) {
                    Ok(Some(request)) => answer(request, &queries, &agent),
                    Ok(None) => {}
                    Err(err) => eprintln!("serving: {err}"),
                }
            }
        });
    }
}

fn answer(request: Request, queries: &Queries, agent: &ureq::Agent) {
    let reply = if *request.method() == Method::Get {
        route(request.url(), queries, agent)
    } else {
        text(405, "only GET is served\n")
    };
    if let Err(err) = request.respond(reply) {
        eprintln!("answering a query: {err}");
    }
}

/// The path's route and query flags.
fn route(url: &str, queries: &Queries, agent: &ureq::Agent) -> Reply {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let flag = |name: &str| query.split('&').any(|pair| pair == format!("{name}=1"));
    let word = |prefix: &str| path.strip_prefix(prefix).map(percent_decode);
    if let Some(word) = word("/count/") {
        match word {
            Some(word) if !word.is_empty() && !word.contains('/') => {
                count(&word, queries, agent, flag("standby"), flag("forwarded"))
            }
            _ => text(400, "expected /count/<word>\n"),
        }
    } else if let Some(word) = word("/metadata/") {
        match word {
            Some(word) if !word.is_empty() => metadata(&word, queries),
            _ => text(400, "expected /metadata/<word>\n"),
        }
    } else if path == "/instances" {
        instances(queries)
    } else {
        text(404, "try /count/<word>, /metadata/<word> or /instances\n")
    }
}

fn count(
    word: &str,
    queries: &Queries,
    agent: &ureq::Agent,
    standby: bool,
    forwarded: bool,
) -> Reply {
    let from = if standby {
        ReadFrom::ActiveOrStandby
    } else {
        ReadFrom::Active
    };
    let me = queries.endpoint().ok().flatten().unwrap_or_default();
    match queries.get("counts", word.as_bytes(), from) {
        Ok(read) => {
            let count = match read.value.as_deref().map(crate::decode) {
                None => 0,
                Some(Ok(count)) => count,
                Some(Err(err)) => return text(500, &format!("{err}\n")),
            };
            let reply = with(text(200, &format!("{count}\n")), "x-served-by", &me);
            let reply = with(reply, "x-partition", &read.partition.to_string());
            match read.source {
                ReadSource::Active => with(reply, "x-source", "active"),
                ReadSource::Standby(staleness) => {
                    let reply = with(reply, "x-source", "standby");
                    let age = staleness.age().as_millis().to_string();
                    let reply = with(reply, "x-standby-age-ms", &age);
                    let behind = staleness.offsets_behind.to_string();
                    with(reply, "x-standby-offsets-behind", &behind)
                }
            }
        }
        Err(QueryError::NotLocal { partition }) if forwarded => unavailable(&format!(
            "partition {partition} is not here (the group may be rebalancing)"
        )),
        Err(QueryError::NotLocal { .. }) => forward(word, queries, agent, standby, &me),
        Err(err) => failed(&err),
    }
}

/// Asks the word's owner (or, with `standby`, a standby when no instance owns it).
fn forward(word: &str, queries: &Queries, agent: &ureq::Agent, standby: bool, me: &str) -> Reply {
    let metadata = match queries.metadata_for_key(word.as_bytes()) {
        Ok(metadata) => metadata,
        Err(err) => return failed(&err),
    };
    let target = match (metadata.active, metadata.standbys.first()) {
        (Some(active), _) => active,
        (None, Some(copy)) if standby => copy.clone(),
        _ => {
            return unavailable(&format!(
                "partition {} has no instance with an endpoint",
                metadata.partition
            ));
        }
    };
    if target == me {
        return unavailable("the group says this instance owns the word, and it does not yet");
    }
    let flags = if standby {
        "standby=1&forwarded=1"
    } else {
        "forwarded=1"
    };
    let url = format!("http://{target}/count/{}?{flags}", percent_encode(word));
    let mut response = match agent.get(&url).call() {
        Ok(response) => response,
        Err(err) => return text(502, &format!("forwarding to {target}: {err}\n")),
    };
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    let mut reply = text(status, &body);
    for name in [
        "x-served-by",
        "x-source",
        "x-partition",
        "x-standby-age-ms",
        "x-standby-offsets-behind",
        "retry-after",
    ] {
        if let Some(value) = response.headers().get(name).and_then(|v| v.to_str().ok()) {
            reply = with(reply, name, value);
        }
    }
    reply
}

fn metadata(word: &str, queries: &Queries) -> Reply {
    match queries.metadata_for_key(word.as_bytes()) {
        Ok(metadata) => json(&serde_json::json!({
            "partition": metadata.partition,
            "active": metadata.active,
            "standbys": metadata.standbys,
        })),
        Err(err) => failed(&err),
    }
}

fn instances(queries: &Queries) -> Reply {
    match queries.all_metadata() {
        Ok(all) => json(&serde_json::Value::Array(
            all.into_iter()
                .map(|instance| {
                    serde_json::json!({
                        "endpoint": instance.endpoint,
                        "member_id": instance.member_id,
                        "active": instance.active,
                        "standby": instance.standby,
                        "local": instance.local,
                    })
                })
                .collect(),
        )),
        Err(err) => failed(&err),
    }
}

/// The reply to a query that has no answer here.
fn failed(err: &QueryError) -> Reply {
    match err {
        QueryError::Rebalancing | QueryError::NoMetadata(_) | QueryError::NotLocal { .. } => {
            unavailable(&err.to_string())
        }
        QueryError::Unpartitioned(_) => text(400, &format!("{err}\n")),
        QueryError::Store(store) if store.kind() == store_api::ErrorKind::InvalidArgument => {
            text(400, &format!("{err}\n"))
        }
        _ => text(500, &format!("{err}\n")),
    }
}

fn unavailable(why: &str) -> Reply {
    with(text(503, &format!("{why}\n")), "retry-after", "1")
}

fn text(status: u16, body: &str) -> Reply {
    Response::from_string(body).with_status_code(status)
}

fn json(value: &serde_json::Value) -> Reply {
    with(
        text(200, &format!("{value}\n")),
        "content-type",
        "application/json",
    )
}

/// `reply` with header `name: value`; a value that is not printable ASCII is sent with `?`
/// in place of each other character.
fn with(mut reply: Reply, name: &str, value: &str) -> Reply {
    let value: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
        reply.add_header(header);
    }
    reply
}

/// The `%XX`-decoded UTF-8 text of a path segment; `None` for a bad escape or bytes that are
/// not UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(segment.len());
    let mut rest = segment.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail
                .get(..2)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
            // Two hex digits: ASCII, and below 256 (`from_str_radix` alone takes a `+`).
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// `word` as a path segment: unreserved characters kept, every other byte `%XX`.
fn percent_encode(word: &str) -> String {
    let mut segment = String::with_capacity(word.len());
    for &byte in word.as_bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            segment.push(char::from(byte));
        } else {
            segment.push_str(&format!("%{byte:02X}"));
        }
    }
    segment
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_round_trip_and_bad_escapes_are_refused() {
        for word in ["state", "a b/c", "ünï", "%", ""] {
            assert_eq!(percent_decode(&percent_encode(word)).as_deref(), Some(word));
        }
        for bad in ["%", "%4", "%zz", "%FF", "a%+1"] {
            assert_eq!(percent_decode(bad), None, "{bad}");
        }
    }
}
