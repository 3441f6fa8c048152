//! Each instance's endpoint (`application_server`, `host:port`), advertised to the group
//! without a protocol of our own: written into the instance's `client.id`, which the group's
//! coordinator reports for every member (`DescribeGroups`).
//!
//! Kafka Streams puts `application.server` in the member's subscription user data; librdkafka
//! does not let a consumer set that, but it does send `client.id`, and the coordinator reports
//! it (Kafka) or starts the member id with it (`<client.id>-<uuid>`, which is all a
//! coordinator that reports no client id gives). So the client id becomes
//! `<application_id>-<pid>-<nanos>_at_<endpoint>_`, where the endpoint is escaped to the
//! characters every broker accepts in a client id, `[A-Za-z0-9.-]`, each other byte written
//! as `_` and two upper-case hex digits (`127.0.0.1:8080` -> `127.0.0.1_3A8080`). The marker
//! `_at_` cannot occur in an escaped endpoint (an escape is `_` and upper-case hex) and
//! neither can the closing `_` followed by the end or `-`, so the endpoint is found again in
//! a client id or in a member id whatever the application id holds. The client id stays
//! unique per instance, which standby placement relies on.

use store_api::{Error, Result};

use crate::group::members::Member;

/// Between the instance's unique id and its escaped endpoint.
const MARKER: &str = "_at_";

/// Checks that `endpoint` is `host:port` with a port from 1 to 65535 and a host without
/// spaces or control characters.
///
/// # Errors
/// `InvalidArgument` saying what is wrong.
pub(crate) fn validate(endpoint: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(format!(
            "application_server {endpoint:?} is not host:port: {why}"
        )))
    };
    let Some((host, port)) = endpoint.rsplit_once(':') else {
        return bad("no port");
    };
    if host.is_empty() {
        return bad("no host");
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("the host holds a space or a control character");
    }
    if endpoint.len() > 255 {
        return bad("longer than 255 bytes");
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => bad("the port is not a number from 1 to 65535"),
        Ok(_) => Ok(()),
    }
}

/// `unique` with `endpoint` appended as the module docs describe (`unique` alone without one).
pub(crate) fn encode(unique: &str, endpoint: Option<&str>) -> String {
    let Some(endpoint) = endpoint else {
        return unique.to_owned();
    };
    let mut id = format!("{unique}{MARKER}");
    for &byte in endpoint.as_bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'.' || byte == b'-' {
            id.push(char::from(byte));
        } else {
            id.push_str(&format!("_{byte:02X}"));
        }
    }
    id.push('_');
    id
}

/// The endpoint written into `id`, a client id or a member id (`<client id>-<uuid>`); `None`
/// when it holds none.
pub(crate) fn decode(id: &str) -> Option<String> {
    let start = id.rfind(MARKER)? + MARKER.len();
    let escaped = &id.as_bytes()[start..];
    let mut bytes = Vec::new();
    let mut at = 0;
    loop {
        match *escaped.get(at)? {
            b'_' => match escaped.get(at + 1..at + 3).and_then(hex_byte) {
                Some(byte) => {
                    bytes.push(byte);
                    at += 3;
                }
                None => break,
            },
            byte => {
                bytes.push(byte);
                at += 1;
            }
        }
    }
    // The closing `_`, then the end of a client id or the `-<uuid>` of a member id.
    if !matches!(escaped.get(at + 1), None | Some(b'-')) {
        return None;
    }
    String::from_utf8(bytes).ok().filter(|e| !e.is_empty())
}

/// The endpoint `member` advertised: from its client id, or from its member id where the
/// coordinator reports no client id.
pub(crate) fn of_member(member: &Member) -> Option<String> {
    if member.client_id.is_empty() {
        decode(&member.id)
    } else {
        decode(&member.client_id)
    }
}

fn hex_byte(digits: &[u8]) -> Option<u8> {
    let digit = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    };
    Some((digit(*digits.first()?)? << 4) | digit(*digits.get(1)?)?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn endpoints_round_trip_through_client_and_member_ids() {
        for endpoint in [
            "127.0.0.1:8080",
            "[::1]:443",
            "host_name.example:1",
            "a:9",
            "ünï:80",
        ] {
            let id = encode("my_at_app-12-345", Some(endpoint));
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
                "{id}"
            );
            assert_eq!(decode(&id).as_deref(), Some(endpoint), "{id}");
            let member_id = format!("{id}-0b6f1a2e-5d3c-4f7a-9e1b-2c3d4e5f6a7b");
            assert_eq!(decode(&member_id).as_deref(), Some(endpoint), "{member_id}");
            let member = Member {
                id: member_id,
                client_id: String::new(),
                partitions: BTreeSet::new(),
            };
            assert!(member.is(&id), "found by its member id's prefix");
            assert_eq!(of_member(&member).as_deref(), Some(endpoint));
        }
        assert_eq!(
            encode("app-1-2", Some("127.0.0.1:8080")),
            "app-1-2_at_127.0.0.1_3A8080_"
        );
    }

    #[test]
    fn ids_without_an_endpoint_decode_to_none() {
        assert_eq!(encode("app-1-2", None), "app-1-2");
        for id in [
            "app-1-2",
            "app-1-2-uuid",
            "a_at_",
            "a_at__",
            "a_at_x_3",
            "a_at_x_zz",
            "a_at_x",
            "a_at_x_y",
            "a_at_x_FF_",
        ] {
            assert_eq!(decode(id), None, "{id}");
        }
    }

    #[test]
    fn only_host_and_port_endpoints_are_accepted() {
        for good in ["127.0.0.1:8080", "localhost:1", "[::1]:65535"] {
            validate(good).expect(good);
        }
        for bad in [
            "",
            "host",
            ":80",
            "host:",
            "host:0",
            "host:65536",
            "a b:1",
            "h:x",
        ] {
            let err = validate(bad).expect_err(bad);
            assert!(err.to_string().contains("application_server"), "{err}");
        }
    }
}
