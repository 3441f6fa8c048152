//! Kerberos (SASL GSSAPI), in the `secured_kafka` test binary built with `--features gssapi`:
//! a broker of the test's own started with `STATESTORE_BROKER_SECURITY=kerberos`, for which
//! `scripts/broker.sh` runs an MIT Kerberos KDC on loopback (realm `STATESTORE.TEST`) and makes
//! the keytabs. An application that logs in as `alice@STATESTORE.TEST` with her keytab
//! (librdkafka runs `kinit`, then authenticates through Cyrus SASL's GSSAPI module) is
//! `User:alice` to the broker, and processes every record once under the ACLs the other SASL
//! cases grant her; a keytab holding a key of alice's the KDC has since changed, and the keytab
//! of a principal the KDC does not know, each end the run with an authentication error naming
//! the cause within seconds.
//!
//! The Kerberos library takes its configuration and its ticket cache from the environment
//! (`KRB5_CONFIG`, `KRB5CCNAME`), which a test cannot set in its own process (`set_var` is
//! unsafe under edition 2024, and the workspace forbids `unsafe`); so each case runs in a
//! process of its own: this test binary again, running the ignored test [`in_the_realm`] with
//! the realm's environment and a ticket cache of the case's own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use statestore_test_support::Cluster;

use super::{Withheld, application, assert_clear, assert_once_each, fails, granted};
use crate::support::bootstrap;

/// The case [`in_the_realm`] runs: `alice`, `stale` or `mallory`.
const CASE_ENV: &str = "STATESTORE_KERBEROS_CASE";
/// The cluster's bootstrap addresses, for [`in_the_realm`].
const BOOTSTRAP_ENV: &str = "STATESTORE_KERBEROS_BOOTSTRAP";
/// The realm's directory (see [`Cluster::kerberos`]), for [`in_the_realm`].
const REALM_ENV: &str = "STATESTORE_KERBEROS_REALM";
/// A directory for the case's state, for [`in_the_realm`].
const STATE_ENV: &str = "STATESTORE_KERBEROS_STATE";

/// What the error says when `kinit` got no ticket (kinit's own words, "Password incorrect" or
/// "Client ... not found in Kerberos database", go to stderr): librdkafka's authentication
/// error, GSSAPI's, and the Kerberos library's.
const KINIT_FAILED: &[&str] = &["Authentication", "GSSAPI", "No Kerberos credentials"];

/// GSSAPI properties of `principal` (of realm `STATESTORE.TEST`) with keytab `keytab` of the
/// realm's directory `realm`.
fn gssapi(realm: &Path, keytab: &str, principal: &str) -> BTreeMap<String, String> {
    let keytab = realm.join(keytab).display().to_string();
    let principal = format!("{principal}@STATESTORE.TEST");
    [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "GSSAPI"),
        ("sasl.kerberos.service.name", "kafka"),
        ("sasl.kerberos.keytab", &keytab),
        ("sasl.kerberos.principal", &principal),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect()
}

#[test]
fn kerberos_clients_work_and_a_wrong_key_or_principal_is_a_clear_error_in_seconds() {
    let test = "kerberos_clients_work_and_a_wrong_key_or_principal_is_a_clear_error_in_seconds";
    if bootstrap(test).is_none() {
        return;
    }
    let cluster = Cluster::start_kerberos(1);
    let dir = tempfile::tempdir().expect("dir");
    let realm = cluster.kerberos();
    for case in ["alice", "stale", "mallory"] {
        in_a_process(cluster.bootstrap(), &realm, dir.path(), case);
    }
    // The KDC gave alice a ticket for the broker: she authenticated with Kerberos, not with
    // another of the listener's mechanisms.
    let kdc_log = std::fs::read_to_string(realm.join("kdc.log")).expect("the KDC's log");
    let ticket = "alice@STATESTORE.TEST for kafka/127.0.0.1@STATESTORE.TEST";
    assert!(
        kdc_log
            .lines()
            .any(|line| line.contains("TGS_REQ") && line.contains(ticket)),
        "no ticket for the broker issued to alice in the KDC's log:\n{kdc_log}"
    );
}

/// Runs [`in_the_realm`]'s `case` in a process of its own, which must succeed.
fn in_a_process(bootstrap: &str, realm: &Path, dir: &Path, case: &str) {
    let exe = std::env::current_exe().expect("this test binary");
    let out = Command::new(exe)
        .args([
            "kerberos::in_the_realm",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("KRB5_CONFIG", realm.join("krb5.conf"))
        .env("KRB5CCNAME", format!("FILE:{}", dir.join(case).display()))
        .env(CASE_ENV, case)
        .env(BOOTSTRAP_ENV, bootstrap)
        .env(REALM_ENV, realm)
        .env(STATE_ENV, dir.join(format!("{case}-state")))
        .output()
        .expect("running this test binary again");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("--- case {case} ---\n{output}");
    assert!(out.status.success(), "case {case} failed:\n{output}");
}

/// One case of the test above, in the process it starts (`KRB5_CONFIG` and `KRB5CCNAME` set):
/// `alice` processes every record once; `stale` (alice with a key the KDC has replaced) and
/// `mallory` (a principal it does not know) each fail with a clear error within seconds.
#[test]
#[ignore = "run by the Kerberos test above, in a process of its own"]
fn in_the_realm() {
    let env = |name: &str| {
        std::env::var_os(name).unwrap_or_else(|| panic!("{name} not set: run by the test above"))
    };
    let case = env(CASE_ENV).into_string().expect("a case name");
    let bootstrap = env(BOOTSTRAP_ENV).into_string().expect("addresses");
    let (realm, dir) = (PathBuf::from(env(REALM_ENV)), PathBuf::from(env(STATE_ENV)));
    std::fs::create_dir_all(&dir).expect("the case's directory");
    match case.as_str() {
        "alice" => {
            let alice = gssapi(&realm, "alice.keytab", "alice");
            let config = granted(&bootstrap, &dir, "a", alice, Withheld::Nothing);
            assert_once_each("GSSAPI as alice", config);
        }
        "stale" => {
            let stale = gssapi(&realm, "stale.keytab", "alice");
            let failed = fails(application(&bootstrap, &dir, stale));
            assert_clear("alice's replaced key", &failed, KINIT_FAILED);
        }
        "mallory" => {
            let mallory = gssapi(&realm, "mallory.keytab", "mallory");
            let failed = fails(application(&bootstrap, &dir, mallory));
            assert_clear("a principal the KDC does not know", &failed, KINIT_FAILED);
        }
        other => panic!("no case {other}"),
    }
}
