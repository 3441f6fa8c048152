//! TLS, in the `secured_kafka` test binary: a broker of the test's own started with
//! `STATESTORE_BROKER_SECURITY=sasl_ssl` (`scripts/broker.sh` makes its certificates). An
//! application authenticated with SCRAM-SHA-256 over SASL_SSL, and one authenticated by its
//! client certificate on the mTLS listener, each process every record once; a client that
//! trusts another CA than the broker's, and clients on the mTLS listener without a
//! certificate or with one the broker does not trust, each end the run with an error naming
//! TLS within seconds, never a hang or a timeout.

use std::collections::BTreeMap;
use std::path::Path;

use statestore_tasks::TasksConfig;
use statestore_test_support::Cluster;

use super::{PARTITIONS, RECORDS, acl_command_as, assert_clear, assert_once_each, fails};
use crate::support::{bootstrap, config, produce_words_with, unique};

fn properties(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|&(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// The path of file `name` of the cluster's certificates, as a property value.
fn cert(certs: &Path, name: &str) -> String {
    certs.join(name).display().to_string()
}

/// SASL_SSL properties of `user` with `mechanism`, trusting the CA in file `ca`.
fn sasl_ssl(certs: &Path, ca: &str, mechanism: &str, user: &str) -> BTreeMap<String, String> {
    let password = format!("{user}-secret");
    properties(&[
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", mechanism),
        ("sasl.username", user),
        ("sasl.password", &password),
        ("ssl.ca.location", &cert(certs, ca)),
    ])
}

/// SSL properties trusting the cluster's CA, with the client certificate `client`
/// (`<client>.pem` and `<client>.key`) when there is one.
fn mtls(certs: &Path, client: Option<&str>) -> BTreeMap<String, String> {
    let mut properties = properties(&[
        ("security.protocol", "SSL"),
        ("ssl.ca.location", &cert(certs, "ca.pem")),
    ]);
    if let Some(client) = client {
        properties.insert(
            "ssl.certificate.location".to_owned(),
            cert(certs, &format!("{client}.pem")),
        );
        properties.insert(
            "ssl.key.location".to_owned(),
            cert(certs, &format!("{client}.key")),
        );
    }
    properties
}

/// A new input topic holding [`RECORDS`] words, made by the admin over SASL_SSL.
fn words(bootstrap: &str, admin: &BTreeMap<String, String>) -> String {
    let input = unique("tls-input");
    statestore_tasks::create_topic_with(bootstrap, admin, &input, PARTITIONS).expect("input topic");
    produce_words_with(bootstrap, admin, &input, RECORDS);
    input
}

/// Lets alice and carol do anything with every topic and group, with Apache Kafka's own
/// ACL tool over SASL_SSL: the cases here are about TLS, and so pass whatever
/// `allow.everyone.if.no.acl.found` the script sets.
fn grant_all(cluster: &Cluster, dir: &Path) {
    let admin = format!(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config=\
         org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"admin\" password=\"admin-secret\";\n\
         ssl.truststore.type=PEM\nssl.truststore.location={}\n",
        cert(cluster.certs(), "ca.pem")
    );
    let args = [
        "--add",
        "--allow-principal",
        "User:alice",
        "--allow-principal",
        "User:carol",
    ];
    let all = ["--operation", "All", "--topic", "*", "--group", "*"];
    acl_command_as(
        cluster.bootstrap(),
        dir,
        &admin,
        &[&args[..], &all].concat(),
    );
}

/// A word count as `properties`' principal through `bootstrap` on a new input topic:
/// processes each of its records once.
fn assert_exact(
    case: &str,
    cluster: &Cluster,
    dir: &Path,
    bootstrap: &str,
    properties: &BTreeMap<String, String>,
) {
    let admin = sasl_ssl(cluster.certs(), "ca.pem", "PLAIN", "admin");
    let input = words(cluster.bootstrap(), &admin);
    let config = TasksConfig {
        properties: properties.clone(),
        ..config(bootstrap, &unique("tls"), &input, dir)
    };
    assert_once_each(case, config);
}

#[test]
fn tls_clients_work_and_every_certificate_refusal_is_a_clear_error_in_seconds() {
    if bootstrap("tls_clients_work_and_every_certificate_refusal_is_a_clear_error_in_seconds")
        .is_none()
    {
        return;
    }
    let cluster = Cluster::start_sasl_ssl(1);
    let dir = tempfile::tempdir().expect("dir");
    grant_all(&cluster, dir.path());
    let certs = cluster.certs();

    let scram = sasl_ssl(certs, "ca.pem", "SCRAM-SHA-256", "alice");
    assert_exact(
        "SCRAM-SHA-256 over SASL_SSL",
        &cluster,
        &dir.path().join("s"),
        cluster.bootstrap(),
        &scram,
    );
    let carol = mtls(certs, Some("carol"));
    assert_exact(
        "mTLS as carol",
        &cluster,
        &dir.path().join("m"),
        cluster.ssl_bootstrap(),
        &carol,
    );

    // The failing runs need no records: an input topic, empty.
    let admin = sasl_ssl(certs, "ca.pem", "PLAIN", "admin");
    let input = unique("tls-refused");
    statestore_tasks::create_topic_with(cluster.bootstrap(), &admin, &input, PARTITIONS)
        .expect("input topic");
    let refused = |name: &str, bootstrap: &str, properties: BTreeMap<String, String>| {
        fails(TasksConfig {
            properties,
            ..config(bootstrap, &unique("tls"), &input, &dir.path().join(name))
        })
    };

    let wrong_ca = sasl_ssl(certs, "rogue-ca.pem", "SCRAM-SHA-256", "alice");
    let failed = refused("ca", cluster.bootstrap(), wrong_ca);
    assert_clear("trusting another CA", &failed, &["SSL", "certificate"]);

    let failed = refused("n", cluster.ssl_bootstrap(), mtls(certs, None));
    assert_clear("no client certificate", &failed, &["SSL", "certificate"]);

    let failed = refused("r", cluster.ssl_bootstrap(), mtls(certs, Some("rogue")));
    assert_clear(
        "a client certificate of another CA",
        &failed,
        &["SSL", "certificate"],
    );
}
