#!/usr/bin/env bash
# Measures how fast one instance of the partitioned word count processes a filled topic: the
# release build counts LINES lines of 8 words (one record per word, PARTITIONS partitions) from the
# start of the topic, each record sending one output, commit interval 1 s, and reports
#   records/s       from the end of its first batch to its last record (`--stop-after-records`)
#   CPU per record  the instance's, every thread, over the same span
#   broker CPU      the broker's CPU per record over about the same span (from the first
#                   record's line in the log to the last one's, sampled every 20 ms)
# One fresh application per run, on one topic produced once.
#
#   examples/partitioned-wordcount/throughput.sh [LINES]     (default 300000: 2.4M records)
#
# Environment:
#   STATESTORE_KAFKA_BOOTSTRAP  the broker (default 127.0.0.1:19092)
#   STATESTORE_BROKER_STATE     scripts/broker.sh's state file, to find the broker's process
#                               (default that script's default); BROKER_PID overrides it
#   GUARANTEES                  processing guarantees, one run each (default at_least_once)
#   THREADS                     processing threads, one run each (default "1 2")
#   PARTITIONS                  partitions of the input topic, so tasks (default 4)
#   DISTINCT_KEYS               1: LINES records of distinct keys instead of lines of words, so
#                               the state grows by a key per record
#   REKEY                       1: the re-keyed word count instead: LINES records of lines with no
#                               key (`produce --unkeyed-lines`), split and re-keyed by word through
#                               a repartition topic, then counted (`run --rekey`: each word sends
#                               its new count); the records counted are the LINES * 8 words.
#                               Kafka Streams' DSL version beside it: benches/peers/run.sh
#                               --systems statestore,kafka-streams --parts rekey
#   BINS                        "name=path ..." builds to run side by side, in turn (default
#                               the release build of this checkout, named "this")
#   RUNS                        rounds of every combination, interleaved (default 1)
#   BARE                        a program run first on the same topic as
#                               `$BARE BOOTSTRAP TOPIC RECORDS PARTITIONS`, printing the rate
#                               of a bare consumer: the limit the instance is measured against
#   ARGS                        more arguments for `partitioned-wordcount run` (e.g.
#                               `--property fetch.queue.backoff.ms=1000`)
#   KEEP_LOGS                   a directory to copy each instance's log to
# Prints one line per run, and the load average before each.
set -euo pipefail

LINES="${1:-300000}"
DISTINCT_KEYS="${DISTINCT_KEYS:-0}"
REKEY="${REKEY:-0}"
RECORDS=$((DISTINCT_KEYS == 1 ? LINES : LINES * 8))
BROKER="${STATESTORE_KAFKA_BOOTSTRAP:-127.0.0.1:19092}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GUARANTEES="${GUARANTEES:-at_least_once}"
THREADS="${THREADS:-1 2}"
PARTITIONS="${PARTITIONS:-4}"
RUNS="${RUNS:-1}"
if [[ -z "${BINS:-}" ]]; then
  cargo build --release -q -p partitioned-wordcount --manifest-path "$ROOT/Cargo.toml"
  BINS="this=${CARGO_TARGET_DIR:-$ROOT/target}/release/partitioned-wordcount"
fi
read -r -a BUILDS <<<"$BINS"
FIRST_BIN="${BUILDS[0]#*=}"
if [[ -z "${BROKER_PID:-}" ]]; then
  # shellcheck disable=SC1090
  BROKER_DIR=$(. "${STATESTORE_BROKER_STATE:-${TMPDIR:-/tmp}/statestore-broker.env}" && echo "$BROKER_DIR")
  BROKER_PID=$(cat "$BROKER_DIR/node1/pid")
fi
WORK=$(mktemp -d)
RUN="$$-$(date +%s)"
TOPIC="throughput-$RUN"
PID=""
trap '[[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

# cpu PID: the user and system CPU time of process PID so far, in clock ticks.
cpu() { cut -d')' -f2 "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
TICKS=$(getconf CLK_TCK)

echo "producing $LINES lines to $TOPIC" >&2
SHAPE=()
((DISTINCT_KEYS == 1)) && SHAPE+=(--distinct-keys)
((REKEY == 1)) && SHAPE+=(--unkeyed-lines)
"$FIRST_BIN" produce --bootstrap "$BROKER" --topic "$TOPIC" --lines "$LINES" \
  --partitions "$PARTITIONS" "${SHAPE[@]}" 2>/dev/null
if [[ -n "${BARE:-}" ]]; then
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  $BARE "$BROKER" "$TOPIC" "$RECORDS" "$PARTITIONS"
fi

# measure NAME BIN GUARANTEE THREADS: one instance from the start of the topic.
measure() {
  local name=$1 bin=$2 guarantee=$3 threads=$4 app="$TOPIC-$1-$3-$4-$5"
  local log="$WORK/$app.log" deadline=$((SECONDS + 900)) before="" after=""
  "$bin" produce --bootstrap "$BROKER" --topic "$app-out" --lines 0 2>/dev/null
  local load command=("$bin" run) extra=()
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  : >"$log"
  ((REKEY == 1)) && command+=(--rekey)
  read -r -a extra <<<"${ARGS:-}"
  "${command[@]}" --bootstrap "$BROKER" --topic "$TOPIC" --application-id "$app" \
    --state-dir "$WORK/$app" --commit-interval-ms 1000 --threads "$threads" \
    --processing-guarantee "$guarantee" --output-topic "$app-out" \
    --stop-after-records "$RECORDS" "${extra[@]}" 2>"$log" &
  PID=$!
  until grep -q "^reached" "$log"; do
    if [[ -z "$before" ]] && grep -q "^first record" "$log"; then
      before=$(cpu "$BROKER_PID")
    fi
    if ((SECONDS >= deadline)) || ! kill -0 "$PID" 2>/dev/null; then
      echo "$name: the instance ended or timed out:" >&2
      tail -n 5 "$log" >&2
      exit 1
    fi
    sleep 0.02
  done
  after=$(cpu "$BROKER_PID")
  wait "$PID"
  PID=""
  rm -rf "${WORK:?}/$app"
  local line
  line=$(grep "^reached" "$log")
  awk -v b=$((after - before)) -v hz="$TICKS" -v n="$RECORDS" -v line="$line" \
    -v what="$name $guarantee threads $threads" -v load="$load" \
    'BEGIN { sub(/^reached [0-9]+ records: /, "", line);
             printf "%-40s %s, broker %.3f us CPU per record (load %s)\n", what, line, b / hz * 1e6 / n, load }'
  if [[ -n "${KEEP_LOGS:-}" ]]; then cp "$log" "$KEEP_LOGS/"; fi
}

for ((round = 1; round <= RUNS; round++)); do
  for guarantee in $GUARANTEES; do
    for threads in $THREADS; do
      for build in "${BUILDS[@]}"; do
        measure "${build%%=*}" "${build#*=}" "$guarantee" "$threads" "$round"
      done
    done
  done
done
