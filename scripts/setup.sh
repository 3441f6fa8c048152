#!/usr/bin/env bash
# Installs what a fresh Debian machine with only a Rust toolchain lacks. Idempotent: every
# step checks before it acts. Sourced by run.sh and test.sh.
set -euo pipefail

need_apt=()
# libssl-dev, libcurl4-openssl-dev and pkg-config: librdkafka's TLS, SCRAM and OIDC against
# Debian's OpenSSL and libcurl (security updates come with the system's); libsasl2-dev: the
# `gssapi` feature's Cyrus SASL.
for pkg in libclang-dev clang make pkg-config libssl-dev libcurl4-openssl-dev libsasl2-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    echo "setup: installing ${need_apt[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# One build cache outside the clone, so a fresh clone (and CI) reuses RocksDB and librdkafka.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/statestore-target}"
