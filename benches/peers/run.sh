#!/usr/bin/env bash
# The peers benchmark: examples/partitioned-wordcount (statestore) against the same application
# in Kafka Streams 4.4 (kafka-streams/, built here with Maven), Quix Streams (installed by pip
# into a virtualenv) and a bare librdkafka consumer (bare-consumer/), on one Apache Kafka broker
# and one input topic, one instance at a time; see peers.py for what is measured. Not part of
# the test command.
#
#   benches/peers/run.sh [LINES] [peers.py options]
#       (default: 300 000 lines of 8 words, 2.4M records; 1M keys for restore and failover)
#   benches/peers/run.sh --lines 25000 --keys 100000      a quick run (200 000 records)
#   benches/peers/run.sh --systems statestore,kafka-streams --parts throughput --thread-counts 1
#   benches/peers/run.sh --systems statestore,kafka-streams --parts failover --standbys 0 \
#       --failover-repeats 3      each failover 3 times, the systems alternating: the median
#       and the range (one run cannot separate two systems: the session timeout and the killed
#       instance's heartbeat phase spread a failover over 1.5-3.5 s)
#   benches/peers/run.sh --systems statestore,kafka-streams --parts throughput,rekey
#       the one-sub-topology count beside the count re-keyed through a repartition topic
#   benches/peers/run.sh 60000 --threads-work-us 40 --threads-only   (1 against 2 processing
#       threads, each record given 40 us of CPU work, statestore alone)
#
# Environment:
#   STATESTORE_KAFKA_BOOTSTRAP  a running broker to use; without it this starts an Apache Kafka
#                               broker of its own on PEERS_KAFKA_PORT (default 39092) through
#                               scripts/broker.sh and stops it at the end
#   STATESTORE_BROKER_STATE     that broker's state file (for its pid: the broker CPU figures)
#   PROFILE                     cargo profile of the Rust binaries (default release)
#   OUT                         where results go (default ./peers-results)
#   QUIX_VERSION                (default 3.28.0)
#   PEERS_VENV                  the Python virtualenv (default ~/.cache/statestore-peers-venv)
#   PEERS_KS_CACHE              where the Kafka Streams jars are built and kept
#                               (default ~/.cache/statestore-peers-ks)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/benches/peers"
ARGS=()
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  ARGS=(--lines "$1")
  shift
fi
PROFILE="${PROFILE:-release}"
OUT="${OUT:-$PWD/peers-results}"
VENV="${PEERS_VENV:-$HOME/.cache/statestore-peers-venv}"
KS_CACHE="${PEERS_KS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/statestore-peers-ks}"
export CXX="${CXX:-clang++}"
log() { echo "run.sh: $*" >&2; }

if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import quixstreams, matplotlib' 2>/dev/null; then
  log "installing Quix Streams and matplotlib into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "quixstreams==${QUIX_VERSION:-3.28.0}" matplotlib
fi

log "building partitioned-wordcount and peers-bare-consumer ($PROFILE)"
cargo build --profile "$PROFILE" -q -p partitioned-wordcount -p peers-bare-consumer \
  --manifest-path "$ROOT/Cargo.toml"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/$([[ $PROFILE == dev || $PROFILE == test ]] && echo debug || echo "$PROFILE")"

# The Kafka Streams word count: built once per version of its sources, outside the clone.
KS_HASH=$(cat "$HERE/kafka-streams/pom.xml" $(find "$HERE/kafka-streams/src" -name '*.java' | sort) |
  sha256sum | cut -c1-12)
KS_BUILD="$KS_CACHE/$KS_HASH"
if [[ ! -f "$KS_BUILD/.complete" ]]; then
  command -v mvn >/dev/null || "$ROOT/scripts/broker.sh" install
  log "building the Kafka Streams word count with Maven into $KS_BUILD"
  rm -rf "$KS_BUILD"
  mkdir -p "$KS_CACHE"
  mvn -q -B -Dstyle.color=never -f "$HERE/kafka-streams/pom.xml" -Dpeers.build="$KS_BUILD" \
    package dependency:copy-dependencies >"$KS_BUILD.log" 2>&1 ||
    { cat "$KS_BUILD.log" >&2; log "the Maven build failed"; exit 1; }
  touch "$KS_BUILD/.complete"
fi

if [[ -z "${STATESTORE_KAFKA_BOOTSTRAP:-}" ]]; then
  export STATESTORE_KAFKA_PORT="${PEERS_KAFKA_PORT:-39092}"
  export STATESTORE_BROKER_STATE="${TMPDIR:-/tmp}/statestore-peers-broker-$STATESTORE_KAFKA_PORT.env"
  trap '"$ROOT/scripts/broker.sh" stop' EXIT
  BOOTSTRAP=$("$ROOT/scripts/broker.sh" start)
else
  BOOTSTRAP="$STATESTORE_KAFKA_BOOTSTRAP"
fi
# The broker's process, when it runs here, for its CPU per record.
BROKER_PID=$("$ROOT/scripts/broker.sh" status 2>&1 | sed -n 's/.*pid \([0-9]*\).*/\1/p' | head -1)
[[ -n "$BROKER_PID" ]] || log "no broker process found here: no broker CPU figures"
"$VENV/bin/python" "$HERE/peers.py" --bootstrap "$BOOTSTRAP" \
  --wordcount "$TARGET/partitioned-wordcount" --bare-consumer "$TARGET/peers-bare-consumer" \
  --ks-classpath "$KS_BUILD/peers-kafka-streams.jar:$KS_BUILD/lib/*" \
  --out "$OUT" ${BROKER_PID:+--broker-pid "$BROKER_PID"} "${ARGS[@]}" "$@"
