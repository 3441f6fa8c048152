#!/usr/bin/env bash
# The snapshot tests against a real S3-protocol server on loopback: installs s3s-fs (a small
# S3 server over a directory, from the crates registry) if missing, starts it on a free port
# over a temporary directory, runs the changelog's snapshot tests with the `s3` feature, and
# stops it.
#
#   scripts/s3-tests.sh [FILTER]             run them (the tests whose name holds FILTER,
#                                            default "snapshot")
#
# Environment:
#   STATESTORE_S3_PORT    the server's port (default 29400)
#   STATESTORE_S3_HOME    where s3s-fs is installed (default ${XDG_CACHE_HOME:-$HOME/.cache}/statestore-s3s)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${STATESTORE_S3_PORT:-29400}"
S3_HOME="${STATESTORE_S3_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/statestore-s3s}"
# 0.14.1: the newest s3s-fs that builds with the workspace's toolchain.
S3S_VERSION=0.14.1

log() { echo "s3-tests.sh: $*" >&2; }

if [[ ! -x "$S3_HOME/bin/s3s-fs" ]]; then
  log "installing s3s-fs $S3S_VERSION into $S3_HOME"
  CARGO_TARGET_DIR="$S3_HOME/target" cargo install s3s-fs --version "$S3S_VERSION" \
    --features binary --locked --root "$S3_HOME"
  rm -rf "$S3_HOME/target"
fi

DATA="$(mktemp -d "${TMPDIR:-/tmp}/statestore-s3.XXXXXX")"
"$S3_HOME/bin/s3s-fs" --host 127.0.0.1 --port "$PORT" \
  --access-key statestore --secret-key statestore-secret "$DATA" >"$DATA.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$DATA" "$DATA.log"' EXIT
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  sleep 0.1
done
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || { cat "$DATA.log" >&2; log "s3s-fs did not start"; exit 1; }

cd "$ROOT"
STATESTORE_S3_ENDPOINT="http://127.0.0.1:$PORT" STATESTORE_S3_ROOT="$DATA" STATESTORE_REQUIRE_S3=1 \
  cargo test -p statestore-changelog --features s3 --test local "${1:-snapshot}"
