#!/usr/bin/env bash
# Every check and every test: formatting, lints, the whole workspace's tests (the conformance
# suite on every backend and changelog, the kill -9 crash tests, the torn-tail tests) and the
# Kafka integration tests against Apache Kafka on loopback, started here and stopped after (the
# tests that kill brokers start three-node clusters of their own through scripts/broker.sh);
# then Kerberos, the `gssapi` feature, against a KDC of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# RocksDB's C++ compiles with clang (setup.sh installs it): unoptimised under the test profile
# it takes 44% less CPU than with g++ (see Cargo.toml). A plain `cargo test` without this
# CXX rebuilds RocksDB with g++.
export CXX="${CXX:-clang++}"

# The broker (Apache Kafka's jars, from Maven Central) and the Kerberos test's KDC and client
# tools (Debian's krb5-kdc, krb5-admin-server, krb5-user, libsasl2-modules-gssapi-mit) install
# in the background while the workspace compiles.
broker_log=$(mktemp "${TMPDIR:-/tmp}/statestore-broker-install.XXXXXX")
STATESTORE_BROKER_SECURITY=kerberos scripts/broker.sh install >"$broker_log" 2>&1 &
broker_install=$!

# The build cache is shared by every checkout, and a doc test finds the dependencies of the
# crate under test by name in it: a build of a workspace crate left by another checkout (or
# other features) fails it with E0460. A new checkout rebuilds the workspace crates anyway.
workspace_packages=$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(" ".join("-p " + p["name"] for p in json.load(sys.stdin)["packages"]))')
# shellcheck disable=SC2086
cargo clean -q $workspace_packages

cargo fmt --all -- --check
# Clippy under the test profile: `cargo test` builds every dependency under it, and a build
# script's output is keyed by profile, so under `dev` RocksDB and librdkafka would be compiled
# a second time.
cargo clippy --workspace --all-targets --profile test -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --profile test
# Every crate that can be published packages: metadata, a version on each path dependency,
# only the files its build needs. Without verifying (which would build RocksDB again outside
# this workspace's profiles): about 15 s, mostly reading the crates.io index. --allow-dirty:
# it checks the files as they are, committed or not.
publishable=$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(" ".join("-p " + p["name"] for p in json.load(sys.stdin)["packages"] if p["publish"] != []))')
# shellcheck disable=SC2086
cargo package --quiet --no-verify --allow-dirty $publishable

if ! wait "$broker_install"; then
    cat "$broker_log" >&2
    echo "test.sh: installing the broker or the Kerberos packages failed" >&2
    exit 1
fi
rm -f "$broker_log"
STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)
export STATESTORE_KAFKA_BOOTSTRAP
# Without it a Kafka test that finds no broker passes without running (a plain `cargo test`
# on a machine without one); here that is a failure.
export STATESTORE_REQUIRE_KAFKA=1
trap 'scripts/broker.sh stop' EXIT

workspace_status=0
cargo test --workspace --no-fail-fast || workspace_status=$?

# Kerberos: librdkafka built again with Cyrus SASL (the `gssapi` feature; no other test shares
# this build of it and its dependents), its lints (the Kerberos test module exists only with
# the feature), and only the test that needs it: an MIT KDC on loopback and a broker with
# GSSAPI, both of the test's own. After the workspace's tests: a second build of a workspace
# crate in the cache would fail their doc tests with E0460 (see above).
cargo clippy -p statestore-tasks --features gssapi --all-targets --profile test -- -D warnings
cargo test -p statestore-tasks --features gssapi --test secured_kafka -- kerberos::
exit "$workspace_status"
