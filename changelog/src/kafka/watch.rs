//! What librdkafka said when it lost or could not make a connection, kept for the errors it
//! explains.
//!
//! A consumer's poll returns a broker's failure as a bare code (rdkafka drops the text of the
//! error event), and two failures no retry can change come with codes that do not say so:
//! a broker that refuses this client's certificate does it with a TLS alert after the
//! handshake (TLS 1.3 verifies the client last), which librdkafka reports as a lost
//! connection (`BrokerTransportFailure`), the code of a broker that is merely down; and an
//! `SSL` or `Authentication` code does not say which certificate or mechanism failed. The
//! text does: librdkafka logs it (facility `FAIL`) just before it queues the error, and a
//! [`WatchedContext`] keeps it. An authentication error that no connection made, an
//! OAUTHBEARER token the client could not get (its token endpoint refused it, or handed out
//! one already expired), is logged by no `FAIL` line: its text comes with the error event
//! alone, which rdkafka hands to the context's `error` before the poll returns the bare code,
//! and the context keeps that too, with the endpoint and HTTP status of a refused token
//! request, which only librdkafka's log line before it (facility `OIDC`) names.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// A consumer whose context keeps its last connection failure.
pub type WatchedConsumer = BaseConsumer<WatchedContext>;

/// The TLS alerts a broker sends when it refuses the client's certificate: bad (42),
/// unsupported (43), revoked (44), expired (45), unknown (46), signed by an unknown CA (48),
/// or missing (116). OpenSSL reports each as "SSL alert number N".
const CERTIFICATE_ALERTS: [u8; 7] = [42, 43, 44, 45, 46, 48, 116];

/// A client context that logs as rdkafka's default one does and keeps librdkafka's last
/// connection failure.
#[derive(Debug, Default)]
pub struct WatchedContext {
    last_failure: Mutex<Option<String>>,
    /// librdkafka's last error logged of a token request (OIDC), until the authentication
    /// error it explains comes.
    token_request: Mutex<Option<String>>,
    /// A request of the client was answered: it authenticated once (see
    /// [`only_token_refresh`](WatchedContext::only_token_refresh)).
    answered: AtomicBool,
    /// Why the last refresh of the OAUTHBEARER token of this client, authenticated before,
    /// failed: what ends its run once the token it holds expires (see
    /// [`explain`](WatchedContext::explain)).
    refresh_refused: Mutex<Option<String>>,
}

/// How librdkafka's error event of a token it could not get begins.
const NO_TOKEN: &str = "Failed to acquire SASL OAUTHBEARER token: ";

/// How the failure this context keeps of a token it could not get begins.
const TOKEN_UNAVAILABLE: &str = "this client could not get an OAUTHBEARER token";

impl WatchedContext {
    /// Notes that a broker answered a request of this client, which it therefore
    /// authenticated to.
    pub fn answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// Whether `err` only says that this client, authenticated before, could not refresh
    /// its OAUTHBEARER token: it goes on with the token it holds until the broker refuses
    /// that one, which is an authentication error of the broker's, as Kafka's Java client
    /// does. A client that never authenticated gets no such leeway: its first token is
    /// refused at once.
    pub fn only_token_refresh(&self, err: &KafkaError) -> bool {
        is_authentication(err)
            && self.answered.load(Ordering::Relaxed)
            && self
                .last_failure()
                .is_some_and(|failure| failure.starts_with(TOKEN_UNAVAILABLE))
    }

    /// What librdkafka said of the last connection it lost or could not make.
    pub fn last_failure(&self) -> Option<String> {
        self.last_failure.lock().clone()
    }

    /// The last failure when it is a broker refusing this client's certificate: fatal,
    /// whatever its code.
    pub fn certificate_refused(&self) -> Option<String> {
        self.last_failure()
            .filter(|failure| is_certificate_refusal(failure))
    }

    /// What librdkafka said of `err`, when `err` is a failed or refused connection (TLS,
    /// authentication, a lost connection), whose code alone does not say what was refused.
    pub fn explain(&self, err: &KafkaError) -> Option<String> {
        use RDKafkaErrorCode as C;
        let connection = is_authentication(err)
            || matches!(
                err.rdkafka_error_code(),
                Some(C::SSL | C::BrokerTransportFailure | C::AllBrokersDown)
            );
        let failure = self.last_failure().filter(|_| connection)?;
        if is_certificate_refusal(&failure) {
            return Some(format!(
                "the broker refused this client's certificate (ssl.certificate.location, \
                 ssl.key.location; is it signed by a CA the broker trusts?): {failure}"
            ));
        }
        // The broker's whole answer to an OAUTHBEARER token it refuses (RFC 7628): the
        // reason is in its own log only.
        if failure.contains(r#"{"status":"invalid_token"}"#) {
            return Some(self.after_refused_refresh(format!(
                "the broker refused this client's OAUTHBEARER token (its signature, issuer, \
                 audience or expiry; the broker's log says which): {failure}"
            )));
        }
        Some(self.after_refused_refresh(failure))
    }

    /// `failure`, with why this client's token could not be refreshed when it could not:
    /// the broker refusing the token it went on with is that refusal's end.
    fn after_refused_refresh(&self, failure: String) -> String {
        match self.refresh_refused.lock().as_deref() {
            Some(refused) if !failure.starts_with(TOKEN_UNAVAILABLE) => format!(
                "{failure} (this client's OAUTHBEARER token could not be refreshed, and it went \
                 on with the one it held until that one's end: {refused})"
            ),
            _ => failure,
        }
    }
}

impl ClientContext for WatchedContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_to_tracing(level, fac, log_message);
        if fac == "FAIL" {
            *self.last_failure.lock() = Some(log_message.to_owned());
        }
        let error = matches!(
            level,
            RDKafkaLogLevel::Emerg
                | RDKafkaLogLevel::Alert
                | RDKafkaLogLevel::Critical
                | RDKafkaLogLevel::Error
        );
        if fac == "OIDC" && error {
            *self.token_request.lock() = Some(log_message.to_owned());
        }
    }

    /// Logs as rdkafka's default context does, and keeps the text of an authentication
    /// error. Only that: the text of a lost connection's event ("1/1 brokers are down") says
    /// less than the `FAIL` line before it.
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
        if !is_authentication(&error) || reason.is_empty() {
            return;
        }
        let failure = match reason.strip_prefix(NO_TOKEN) {
            Some(detail) => {
                // The log line of the request says the same and more; an older one, of
                // another failure, does not hold this one's words.
                let request = self.token_request.lock().take();
                let request = request.filter(|request| request.contains(detail));
                format!(
                    "{TOKEN_UNAVAILABLE} (sasl.oauthbearer.*): {}",
                    request.as_deref().unwrap_or(detail)
                )
            }
            None => reason.to_owned(),
        };
        if failure.starts_with(TOKEN_UNAVAILABLE) && self.answered.load(Ordering::Relaxed) {
            *self.refresh_refused.lock() = Some(failure.clone());
        }
        *self.last_failure.lock() = Some(failure);
    }
}

/// Whether `err` is librdkafka's or the broker's refusal of this client's credentials.
fn is_authentication(err: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        err.rdkafka_error_code(),
        Some(C::Authentication | C::SaslAuthenticationFailed)
    )
}

impl ConsumerContext for WatchedContext {}

/// Whether librdkafka's `message` reports a TLS alert by which the broker refused this
/// client's certificate.
pub fn is_certificate_refusal(message: &str) -> bool {
    const ALERT: &str = "SSL alert number ";
    message.match_indices(ALERT).any(|(at, _)| {
        let digits: String = message[at + ALERT.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse::<u8>()
            .is_ok_and(|alert| CERTIFICATE_ALERTS.contains(&alert))
    })
}

/// Logs librdkafka's `message` through `tracing` at its level, as rdkafka's default context
/// does (a context that overrides `log` replaces that default).
pub fn log_to_tracing(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}");
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}");
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}");
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librdkafka 2.12's words for a broker that refused the client's certificate after a
    /// TLS 1.3 handshake, and for failures that are not that.
    #[test]
    fn certificate_alerts_are_refusals_and_nothing_else_is() {
        let no_certificate = "ssl://127.0.0.1:21002/bootstrap: Receive failed: \
             error:0A000412:SSL routines::sslv3 alert bad certificate: SSL alert number 42 \
             (after 4ms in state APIVERSION_QUERY)";
        let unknown_ca = "Receive failed: error:0A000416:SSL routines::sslv3 alert \
             certificate unknown: SSL alert number 46";
        let required = "error:0A00045C:SSL routines::tlsv13 alert certificate required: \
             SSL alert number 116";
        for refused in [no_certificate, unknown_ca, required] {
            assert!(is_certificate_refusal(refused), "{refused}");
        }
        for other in [
            "ssl://127.0.0.1:21002/bootstrap: Connect to ipv4#127.0.0.1:21002 failed: \
             Connection refused (after 0ms in state CONNECT)",
            "Disconnected: connection reset by peer",
            "error:0A000410:SSL routines::sslv3 alert handshake failure: SSL alert number 40",
            "SSL alert number 4",
            "SSL alert number 420",
        ] {
            assert!(!is_certificate_refusal(other), "{other}");
        }
    }

    #[test]
    fn a_refusal_code_is_explained_by_the_last_failure() {
        let context = WatchedContext::default();
        let ssl = KafkaError::MessageConsumption(RDKafkaErrorCode::SSL);
        let transport = KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(context.explain(&ssl), None);
        assert_eq!(context.explain(&transport), None);
        context.log(
            RDKafkaLogLevel::Error,
            "FAIL",
            "SSL handshake failed: certificate verify failed",
        );
        assert_eq!(
            context.explain(&ssl).as_deref(),
            Some("SSL handshake failed: certificate verify failed")
        );
        assert_eq!(context.certificate_refused(), None);
        context.log(
            RDKafkaLogLevel::Error,
            "FAIL",
            "Receive failed: SSL alert number 42",
        );
        let explained = context.explain(&transport).expect("explained");
        assert!(
            explained.contains("refused this client's certificate"),
            "{explained}"
        );
        // Only failures of the connection are explained by it.
        let denied = KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed);
        assert_eq!(context.explain(&denied), None);
        context.log(RDKafkaLogLevel::Debug, "BROKER", "something else");
        assert!(context.certificate_refused().is_some());
    }

    /// librdkafka 2.12's words for a token it could not get, which come with the error event
    /// and no `FAIL` line: one its OIDC token endpoint refused, logged before the event, and
    /// an expired one, not logged.
    #[test]
    fn an_authentication_error_event_explains_itself_and_a_lost_connection_does_not() {
        let context = WatchedContext::default();
        context.log(
            RDKafkaLogLevel::Error,
            "FAIL",
            "Receive failed: SSL alert number 42",
        );
        let down = || KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        context.error(down(), "1/1 brokers are down");
        assert!(context.certificate_refused().is_some());

        let event = || KafkaError::Global(RDKafkaErrorCode::Authentication);
        let polled = KafkaError::MessageConsumption(RDKafkaErrorCode::Authentication);
        let request = r#"Failed to retrieve OIDC token from "http://127.0.0.1:1/token": {"error":"invalid_client"} (401)"#;
        context.log(RDKafkaLogLevel::Error, "OIDC", request);
        let refused = r#"Failed to acquire SASL OAUTHBEARER token: {"error":"invalid_client"}"#;
        context.error(event(), refused);
        let explained = context.explain(&polled).expect("explained");
        assert!(explained.ends_with(request), "{explained}");
        assert!(explained.contains("OAUTHBEARER token"), "{explained}");
        // A token it could not get is fatal to a client until a broker answered it once.
        assert!(!context.only_token_refresh(&polled));
        context.answered();
        assert!(context.only_token_refresh(&polled));
        assert!(!context.only_token_refresh(&down()));

        let expired = "Must supply an unexpired token: now=1765101600000ms, exp=1765101540000ms";
        context.log(RDKafkaLogLevel::Error, "OIDC", request);
        context.error(event(), &format!("{NO_TOKEN}{expired}"));
        let explained = context.explain(&polled).expect("explained");
        assert!(explained.ends_with(expired), "{explained}");
        assert!(!explained.contains("401"), "{explained}");

        let invalid = r#"sasl_plaintext://127.0.0.1:25410/bootstrap: SASL authentication error: {"status":"invalid_token"} (after 308ms in state AUTH_REQ)"#;
        context.log(RDKafkaLogLevel::Error, "FAIL", invalid);
        // The broker refusing the token it holds is fatal, refreshed or not.
        assert!(!context.only_token_refresh(&polled));
        let explained = context.explain(&polled).expect("explained");
        assert!(explained.contains(invalid), "{explained}");
        assert!(
            explained.contains("refused this client's OAUTHBEARER token"),
            "{explained}"
        );
        // Its refused refresh explains why (the client had authenticated: `answered`).
        assert!(explained.contains("could not be refreshed"), "{explained}");
        assert!(explained.contains(expired), "{explained}");
    }
}
