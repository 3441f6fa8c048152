#!/usr/bin/env bash
# The peers benchmark: examples/partitioned-wordcount against Quix Streams (installed by pip
# into a virtualenv under ~/.cache) on the same broker and input, one instance each; see
# peers.py for what is measured. Not part of the test command.
#
#   benches/peers/run.sh [LINES [peers.py options]]   (default 20000 lines, about 200 000 records)
#   benches/peers/run.sh 60000 --threads-work-us 40 --threads-only   (1 against 2 processing
#       threads, each record given 40 us of CPU work, statestore alone)
#
# Environment: STATESTORE_KAFKA_BOOTSTRAP (default: starts scripts/broker.sh), PROFILE
# (default release), OUT (default target-independent ./peers-results), QUIX_VERSION (3.28.0).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LINES="${1:-20000}"
shift || true
PROFILE="${PROFILE:-release}"
OUT="${OUT:-$PWD/peers-results}"
VENV="${PEERS_VENV:-$HOME/.cache/statestore-peers-venv}"
export CXX="${CXX:-clang++}"

if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import quixstreams, matplotlib' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "quixstreams==${QUIX_VERSION:-3.28.0}" matplotlib
fi
cargo build --profile "$PROFILE" -q -p partitioned-wordcount --manifest-path "$ROOT/Cargo.toml"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET/$([[ $PROFILE == dev || $PROFILE == test ]] && echo debug || echo "$PROFILE")/partitioned-wordcount"

BOOTSTRAP="${STATESTORE_KAFKA_BOOTSTRAP:-$("$ROOT/scripts/broker.sh" start)}"
# The broker's process, when it runs here, for its CPU per record.
BROKER_PID=$("$ROOT/scripts/broker.sh" status 2>&1 | sed -n 's/.*pid \([0-9]*\).*/\1/p' | head -1)
"$VENV/bin/python" "$ROOT/benches/peers/peers.py" --bootstrap "$BOOTSTRAP" --wordcount "$BIN" \
  --lines "$LINES" --out "$OUT" ${BROKER_PID:+--broker-pid "$BROKER_PID"} "$@"
