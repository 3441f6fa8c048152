//! OAUTHBEARER, in the `secured_kafka` test binary: librdkafka's OIDC client-credentials
//! method against a token endpoint the test runs on loopback, on a broker of the test's own
//! started with `STATESTORE_BROKER_SECURITY=sasl`. The broker validates a token with Kafka's
//! `OAuthBearerValidatorCallbackHandler`: its RS256 signature against the script's JWKS, its
//! expiry, issuer and audience; its `sub` claim is the principal, here alice, so the
//! authoriser applies the ACLs the other SASL cases grant her. An application that gets
//! alice's token processes every record once; a wrong client secret, a token that has
//! expired when the endpoint hands it out, and one signed by a key the broker does not know
//! each end the run with an authentication error naming the cause within seconds. A refresh
//! the endpoint refuses after the client authenticated is no error: the application goes on
//! with the token it holds until that expires, then ends with an error naming the refusal,
//! within seconds, and closes within seconds too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use statestore_tasks::{Application, ProcessorContext, TasksConfig};

use super::{
    CLEAR_ERROR_WITHIN, RECORDS, Withheld, admin, application, assert_clear, assert_once_each,
    fails, granted, sasl_cluster,
};
use crate::support::{count_word, produce_words_with};

/// The client the token endpoint knows.
const CLIENT_ID: &str = "wordcount";
const CLIENT_SECRET: &str = "wordcount-secret";

/// The tokens a [`TokenEndpoint`] hands out.
struct Token {
    /// The `sub` claim: the principal.
    subject: &'static str,
    /// Seconds from issue to expiry; negative, expired when issued.
    lifetime: i64,
    /// The RSA key (PKCS#8 PEM) that signs it.
    key: PathBuf,
    /// How long after its first request the endpoint hands out tokens (`None`: until
    /// dropped); it answers later requests as it answers a wrong secret.
    served_for: Option<Duration>,
}

/// A token endpoint (OAuth 2.0's client credentials grant) on loopback, served by a thread
/// of its own until dropped, a panicking test's too. To a POST of grant type
/// `client_credentials` whose Basic authorisation is [`CLIENT_ID`] and [`CLIENT_SECRET`] it
/// answers with a JWT of its [`Token`]; any other request gets 401 `invalid_client`.
struct TokenEndpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TokenEndpoint {
    fn start(token: Token) -> TokenEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("the endpoint's address");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut first = None;
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let first = *first.get_or_insert_with(Instant::now);
                let serving = token.served_for.is_none_or(|time| first.elapsed() < time);
                let answered = stream.and_then(|stream| answer(&stream, &token, serving));
                if let Err(err) = answered {
                    eprintln!("token endpoint: {err}");
                }
            }
        });
        TokenEndpoint {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/token", self.addr)
    }
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A connection wakes the thread from `accept`; it sees the flag and returns.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one HTTP request from `stream` and answers it (see [`TokenEndpoint`]).
fn answer(stream: &TcpStream, token: &Token, serving: bool) -> std::io::Result<()> {
    // A client that stalls mid-request cannot hold the endpoint up.
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let (mut authorization, mut length) = (None, 0);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("authorization") {
                authorization = Some(value.to_owned());
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let credentials = format!("{CLIENT_ID}:{CLIENT_SECRET}");
    let expected = format!("Basic {}", base64(credentials.as_bytes(), false));
    let granted = serving
        && request_line.starts_with("POST ")
        && authorization.as_deref() == Some(expected.as_str())
        && String::from_utf8_lossy(&body)
            .split('&')
            .any(|pair| pair == "grant_type=client_credentials");
    let (status, json) = if granted {
        let jwt = signed_jwt(token)?;
        let json = format!(
            r#"{{"access_token":"{jwt}","token_type":"bearer","expires_in":{}}}"#,
            token.lifetime
        );
        ("200 OK", json)
    } else {
        (
            "401 Unauthorized",
            r#"{"error":"invalid_client"}"#.to_owned(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{json}",
        json.len()
    );
    let mut out = stream;
    out.write_all(response.as_bytes())
}

/// A JWT (RFC 7519) of `token`, signed with RS256 by `openssl`: issued now by
/// `statestore-test` for audience `statestore`, as the test brokers expect.
fn signed_jwt(token: &Token) -> std::io::Result<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let now = i64::try_from(now).expect("seconds since 1970");
    let header = r#"{"alg":"RS256","typ":"JWT","kid":"statestore-test"}"#;
    let claims = format!(
        r#"{{"sub":"{}","iss":"statestore-test","aud":"statestore","iat":{now},"exp":{}}}"#,
        token.subject,
        now + token.lifetime
    );
    let signed = format!(
        "{}.{}",
        base64(header.as_bytes(), true),
        base64(claims.as_bytes(), true)
    );
    let signature = rs256(&token.key, signed.as_bytes())?;
    Ok(format!("{signed}.{}", base64(&signature, true)))
}

/// The RSASSA-PKCS1-v1_5 SHA-256 signature of `data` by `key`.
fn rs256(key: &Path, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut openssl = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    openssl.stdin.take().expect("piped").write_all(data)?;
    let out = openssl.wait_with_output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "openssl dgst: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(out.stdout)
}

/// `bytes` in base64: the standard alphabet with padding, or with `url` the URL-safe one
/// without (as JWTs are written).
fn base64(bytes: &[u8], url: bool) -> String {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    if url {
        URL_SAFE_NO_PAD.encode(bytes)
    } else {
        STANDARD.encode(bytes)
    }
}

/// librdkafka's OIDC client-credentials properties: [`CLIENT_ID`] with `secret`, its token
/// from `endpoint`.
fn oidc(endpoint: &TokenEndpoint, secret: &str) -> BTreeMap<String, String> {
    [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.method", "oidc"),
        ("sasl.oauthbearer.client.id", CLIENT_ID),
        ("sasl.oauthbearer.client.secret", secret),
        ("sasl.oauthbearer.token.endpoint.url", &endpoint.url()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect()
}

#[test]
fn oauthbearer_oidc_works_and_a_refused_or_expired_token_is_a_clear_error_in_seconds() {
    let Some((cluster, dir)) = sasl_cluster(
        "oauthbearer_oidc_works_and_a_refused_or_expired_token_is_a_clear_error_in_seconds",
    ) else {
        return;
    };
    let (bootstrap, dir) = (cluster.bootstrap(), dir.path());
    let keys = cluster.oauth_keys();
    let token = |lifetime, key| Token {
        subject: "alice",
        lifetime,
        key: keys.join(key),
        served_for: None,
    };
    let alice = TokenEndpoint::start(token(3600, "oauth.key"));

    let properties = oidc(&alice, CLIENT_SECRET);
    let config = granted(bootstrap, dir, "o", properties, Withheld::Nothing);
    assert_once_each("OAUTHBEARER, OIDC client credentials", config);

    let wrong = oidc(&alice, "not-the-secret");
    let failed = fails(application(bootstrap, &dir.join("w"), wrong));
    assert_clear(
        "a wrong client secret",
        &failed,
        &["Authentication", "OAUTHBEARER token", "401"],
    );

    // A run with the client's own secret, on an endpoint handing out `token`.
    let refused = |case: &str, state: &str, token: Token, names: &[&str]| {
        let endpoint = TokenEndpoint::start(token);
        let properties = oidc(&endpoint, CLIENT_SECRET);
        let failed = fails(application(bootstrap, &dir.join(state), properties));
        assert_clear(case, &failed, names);
    };
    let expired = ["Authentication", "OAUTHBEARER token", "unexpired token"];
    refused("an expired token", "e", token(-60, "oauth.key"), &expired);
    let forged = ["Authentication", "OAUTHBEARER token", "invalid_token"];
    refused(
        "a token signed by another key",
        "f",
        token(3600, "rogue.key"),
        &forged,
    );
    let log = cluster.log(1);
    assert!(
        log.contains("JWT rejected due to invalid signature"),
        "the broker's log does not say it checked the signature"
    );

    // Tokens of 60 s, from an endpoint that refuses every request 10 s after the first: each
    // client's refresh (at 80% of the lifetime, 48 s in, then every 10 s) is refused, and the
    // application goes on with the token it holds, as Kafka's Java client does: it processes
    // the records produced 49 s in, after the refusals, once each (11 s before the expiry,
    // so a loaded machine has time to produce and process them). Then the token expires,
    // which ends it: a Kafka broker gives an OAUTHBEARER session the token's remaining lifetime
    // (KIP-368, `connections.max.reauth.ms` set or not), so from then on every connection must
    // authenticate anew, which an expired token cannot. The run ends with a clear
    // authentication error within seconds of the expiry, and its close is bounded (issue 44).
    const LIFETIME: Duration = Duration::from_secs(60);
    let brief = TokenEndpoint::start(Token {
        served_for: Some(Duration::from_secs(10)),
        ..token(60, "oauth.key")
    });
    let config = granted(
        bootstrap,
        dir,
        "r",
        oidc(&brief, CLIENT_SECRET),
        Withheld::Nothing,
    );
    let input = config.input_topics[0].clone();
    let expiring = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_secs(49));
            produce_words_with(bootstrap, &admin(), &input, RECORDS);
        });
        run_to_the_end(config, LIFETIME + 3 * CLEAR_ERROR_WITHIN)
    });
    eprintln!("a refused token refresh, then its expiry: {expiring:?}");
    let Expiring {
        distinct,
        again,
        failed,
        failed_after,
        closed_after,
    } = expiring;
    assert_eq!(
        (distinct, again),
        (2 * RECORDS, 0),
        "a refused token refresh: records processed, and again"
    );
    let failed = failed.expect("the run ended with the token's expiry");
    assert_clear(
        "an authenticated client's token expiring",
        &(failed, failed_after.saturating_sub(LIFETIME)),
        &[
            "Authentication",
            "OAUTHBEARER token could not be refreshed",
            "401",
        ],
    );
    assert!(
        closed_after - failed_after < CLEAR_ERROR_WITHIN,
        "the close after the token's expiry took {:?}",
        closed_after - failed_after
    );
}

/// How [`run_to_the_end`] went.
#[derive(Debug)]
struct Expiring {
    /// The distinct records (partition, offset) processed.
    distinct: u64,
    /// The records processed again.
    again: u64,
    /// The run's error, if it failed.
    failed: Option<String>,
    /// When it failed (or gave up), from the start of the application.
    failed_after: Duration,
    /// When the application had closed and was dropped, from its start.
    closed_after: Duration,
}

/// Runs `config` until it fails or `timeout` passes, then closes and drops it.
fn run_to_the_end(config: TasksConfig, timeout: Duration) -> Expiring {
    let mut seen = BTreeSet::new();
    let mut again = 0;
    let mut processor = |ctx: &mut ProcessorContext<'_>| {
        if !seen.insert((ctx.partition(), ctx.offset())) {
            again += 1;
        }
        count_word(ctx)
    };
    let started = Instant::now();
    let mut failed = None;
    match Application::new(config) {
        Ok(mut app) => {
            while failed.is_none() && started.elapsed() < timeout {
                if let Err(err) = app.poll(Duration::from_millis(50), &mut processor) {
                    failed = Some(err.to_string());
                }
            }
            let failed_after = started.elapsed();
            drop(app);
            let closed_after = started.elapsed();
            return Expiring {
                distinct: seen.len() as u64,
                again,
                failed,
                failed_after,
                closed_after,
            };
        }
        Err(err) => failed = Some(err.to_string()),
    }
    Expiring {
        distinct: seen.len() as u64,
        again,
        failed,
        failed_after: started.elapsed(),
        closed_after: started.elapsed(),
    }
}
