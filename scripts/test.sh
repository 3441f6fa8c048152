#!/usr/bin/env bash
# Every check and every test: formatting, lints, the whole workspace's tests (the conformance
# suite on every backend and changelog, the kill -9 crash tests, the torn-tail tests) and the
# Kafka integration tests against a real broker on loopback, started here and stopped after.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)
export STATESTORE_KAFKA_BOOTSTRAP
trap 'scripts/broker.sh stop' EXIT

cargo test --workspace --no-fail-fast
