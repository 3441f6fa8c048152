#!/usr/bin/env bash
# Measures the scale-out figures of docs/kafka.md with the release build of partitioned-wordcount:
#   1. restore of the 4 tasks' changelogs into a fresh state directory, one task after another
#      (--restore-parallelism 1) against all 4 at once (--restore-parallelism 4), from the
#      changelog topics and then from the same changelogs in local files (`local-restore`);
#   2. failover with 0 and with 1 standby replica: from the kill -9 of an instance (a follower
#      of the group, then its leader) to the first record the survivor processes on each of the
#      victim's tasks.
#
#   examples/partitioned-wordcount/figures.sh [KEYS]    (default 1000000 distinct keys)
#
# Environment: STATESTORE_KAFKA_BOOTSTRAP (default 127.0.0.1:19092), BACKEND (default rocksdb),
# SESSION_TIMEOUT_MS (default 10000), PROFILE (default release; `test` for the test build, whose
# dependencies are optimised too), STATIC (set: every instance a static member, with its own
# group.instance.id), STANDBYS (the standby counts whose failover is measured,
# default "0 1"; empty runs no failover), RESTORE (default 1; 0 skips the restore figures),
# BROKER_PID (the broker's process on this machine: the restore figures then add the CPU time
# the broker and the instance used from the instance's start to its last restored task),
# GUARANTEES (processing guarantees to measure the word count under, one after the other on the
# same input, e.g. "at_least_once exactly_once_v2": records/s and CPU per record, each record
# sending one output, with a 1 s commit interval; then the restart of a static member after a
# kill -9, to its first record; default none), LINES (lines of 8 words they count, default
# 100000).
# Builds the example first.
set -euo pipefail

KEYS="${1:-1000000}"
BROKER="${STATESTORE_KAFKA_BOOTSTRAP:-127.0.0.1:19092}"
BACKEND="${BACKEND:-rocksdb}"
SESSION="${SESSION_TIMEOUT_MS:-10000}"
STANDBYS="${STANDBYS-0 1}"
KILLS="${KILLS-follower leader}"
RESTORE="${RESTORE:-1}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROFILE="${PROFILE:-release}"
cargo build --profile "$PROFILE" -q -p partitioned-wordcount --manifest-path "$ROOT/Cargo.toml"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$([[ $PROFILE == dev || $PROFILE == test ]] && echo debug || echo "$PROFILE")/partitioned-wordcount"
WORK=$(mktemp -d)
RUN="$$-$(date +%s)"
TOPIC="figures-words-$RUN"
APP="figures-$RUN"
declare -A PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT


ms() { date +%s%3N; }

# cpu PID: the user and system CPU time of process PID so far, in clock ticks.
cpu() { cut -d')' -f2 "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
TICKS=$(getconf CLK_TCK)

# start NAME [ARGS...]: an instance with its own state directory; it stops when NAME.in closes.
start() {
  local name=$1
  shift
  mkfifo "$WORK/$name.in"
  "$BIN" run --bootstrap "$BROKER" --topic "$TOPIC" --application-id "$APP" \
    --backend "$BACKEND" --session-timeout-ms "$SESSION" --commit-interval-ms 1000 \
    --num-standby-replicas "${REPLICAS:-0}" ${STATIC:+--group-instance-id "$APP-$name"} \
    --state-dir "$WORK/$name" --stop-on-stdin-eof "$@" <"$WORK/$name.in" \
    2>"$WORK/$name.log" &
  PIDS[$name]=$!
  eval "exec {fd_$name}>\"$WORK/$name.in\""
}

stop() {
  local fd="fd_$1"
  eval "exec ${!fd}>&-"
  wait "${PIDS[$1]}"
  unset "PIDS[$1]"
}

# wait_for NAME COUNT REGEX: until NAME's log has COUNT lines matching REGEX (10 min at most).
wait_for() {
  local deadline=$((SECONDS + 600))
  until (($(grep -cE "$3" "$WORK/$1.log" || true) >= $2)); do
    if ((SECONDS >= deadline)) || ! kill -0 "${PIDS[$1]}" 2>/dev/null; then
      echo "$1 ended or timed out waiting for $3:" >&2
      grep -v "^processed" "$WORK/$1.log" | tail -n 5 >&2
      exit 1
    fi
    sleep 0.2
  done
}

if ((RESTORE)); then
  echo "producing $KEYS distinct keys to $TOPIC" >&2
  "$BIN" produce --bootstrap "$BROKER" --topic "$TOPIC" --lines "$KEYS" --distinct-keys
  start load
  wait_for load 1 "^processed $KEYS "
  stop load

  for parallelism in 1 4; do
    [[ -n "${BROKER_PID:-}" ]] && broker_before=$(cpu "$BROKER_PID")
    start "restore$parallelism" --restore-parallelism "$parallelism"
    wait_for "restore$parallelism" 4 "^assigned"
    cpu_note=""
    if [[ -n "${BROKER_PID:-}" ]]; then
      cpu_note=$(awk -v b=$(($(cpu "$BROKER_PID") - broker_before)) \
        -v i="$(cpu "${PIDS[restore$parallelism]}")" -v hz="$TICKS" \
        'BEGIN { printf "; CPU time of the broker %.1f s, of the instance %.1f s", b / hz, i / hz }')
    fi
    stop "restore$parallelism"
    restored=$(grep -m1 "^assigned" "$WORK/restore$parallelism.log" | sed -E 's/.* in ([0-9]+) ms\)$/\1/')
    echo "restore of 4 tasks ($KEYS keys), restore_parallelism $parallelism: $restored ms$cpu_note"
    grep "^assigned" "$WORK/restore$parallelism.log" | sed -E 's/^assigned ([^ ]+) .*\(restored (.*) in .*$/  \1: \2/'
  done
  # The same restores from changelogs in local files: what parallelism gains without a broker.
  "$BIN" local-restore --dir "$WORK/local" --keys "$KEYS" --backend "$BACKEND" 2>/dev/null
fi

# failover REPLICAS KILLED: on a topic and application of its own, holding KEYS keys. The
# instance that joins first leads the group: the survivor to kill a follower, the victim to kill
# the leader. The first one counts every key; the second joins, takes two tasks, and both count
# a second round of KEYS / 2 keys; then the victim is killed and one record per task follows.
# Without a standby the survivor restores what the victim wrote since it last held its tasks;
# with one, its copies followed the changelog and it restores only what they lack.
failover() {
  local REPLICAS=$1 KILLED=$2 TOPIC="$TOPIC-failover$1$2" APP="$APP-failover$1$2" survivor victim
  survivor="survivor$1$2" victim="victim$1$2"
  local first_in=$survivor second_in=$victim
  [[ $KILLED == leader ]] && first_in=$victim second_in=$survivor
  "$BIN" produce --bootstrap "$BROKER" --topic "$TOPIC" --lines "$KEYS" --distinct-keys
  start "$first_in"
  wait_for "$first_in" 1 "^processed $KEYS "
  start "$second_in"
  wait_for "$second_in" 1 "^assigned"
  wait_for "$first_in" 1 "^revoked"
  "$BIN" produce --bootstrap "$BROKER" --topic "$TOPIC" --from "$KEYS" --lines $((KEYS * 3 / 2)) \
    --distinct-keys
  processed() { grep "^processed" "$WORK/$1.log" | tail -n 1 | cut -d' ' -f2; }
  local deadline=$((SECONDS + 600))
  until (($(processed "$survivor") + $(processed "$victim") >= KEYS * 3 / 2)); do
    ((SECONDS < deadline)) || { echo "the second round was not processed" >&2; exit 1; }
    sleep 0.5
  done
  local victim_tasks
  victim_tasks=$(grep "^processed" "$WORK/$victim.log" | tail -n 1 | sed -E 's/ standby .*//' |
    grep -oE "partition: [0-9]+" | awk '{ print "0_" $2 }')
  if ((REPLICAS)); then
    # The copies are in place when the survivor lists the victim's tasks as its standbys.
    deadline=$((SECONDS + 120))
    until grep "^processed" "$WORK/$survivor.log" | tail -n 1 |
      grep -qF "standby [$(grep "^processed" "$WORK/$victim.log" | tail -n 1 |
        sed -E 's/.* tasks \[([^]]*)\].*/\1/')]"; do
      ((SECONDS < deadline)) || { echo "no standby of the victim's tasks" >&2; exit 1; }
      sleep 0.5
    done
  fi
  # The victim commits every second, and a standby copy catches up every second.
  sleep 3
  local before killed first=0 task line at
  before=$(wc -l <"$WORK/$survivor.log")
  killed=$(ms)
  kill -9 "${PIDS[$victim]}"
  wait "${PIDS[$victim]}" 2>/dev/null || true
  unset "PIDS[$victim]"
  "$BIN" produce --bootstrap "$BROKER" --topic "$TOPIC" --from $((KEYS * 3 / 2)) \
    --lines $((KEYS * 3 / 2 + 64)) --distinct-keys
  # The failover ends with the survivor's first record on the last of the victim's tasks.
  for task in $victim_tasks; do
    deadline=$((SECONDS + 600))
    until line=$(tail -n +"$((before + 1))" "$WORK/$survivor.log" | grep -m1 "^first record of $task "); do
      ((SECONDS < deadline)) || { echo "the survivor never processed $task" >&2; exit 1; }
      sleep 0.2
    done
    at=$(sed -E 's/.* at ([0-9]+) ms$/\1/' <<<"$line")
    ((at > first)) && first=$at
  done
  local assigned
  assigned=$(tail -n +"$((before + 1))" "$WORK/$survivor.log" | grep "^assigned" |
    grep -E "^assigned ($(echo $victim_tasks | tr ' ' '|')) " | tr '\n' ';')
  stop "$survivor"
  echo "failover of the $KILLED with $REPLICAS standby replicas ($KEYS keys, session timeout $SESSION ms):" \
    "$((first - killed)) ms from kill -9 to the first record on the last of the victim's tasks" \
    "($(echo $victim_tasks)); survivor: $assigned"
}

# guarantee NAME: one static member counts the GLINES lines of GTOPIC under processing
# guarantee NAME, each record sending one output; then it is killed with SIGKILL and started
# again on its state directory, and 10 more lines follow (which the next guarantee counts too).
guarantee() {
  local name="g_$1" records=$((GLINES * 8)) started done first ticks
  local args=(--processing-guarantee "$1" --output-topic "$TOPIC-out-$1")
  APP="$APP-$1" STATIC=1 start "$name" "${args[@]}"
  started=$(ms)
  wait_for "$name" 1 "^processed $records "
  done=$(ms)
  ticks=$(cpu "${PIDS[$name]}")
  first=$(grep "^first record" "$WORK/$name.log" | sed -E 's/.* at ([0-9]+) ms$/\1/' | sort -n | head -n 1)
  awk -v n="$records" -v ms=$((done - first)) -v t="$ticks" -v hz="$TICKS" -v g="$1" -v s=$((first - started)) \
    'BEGIN { printf "%s: %d records in %d ms from the first record (%.0f records/s), %.1f us CPU per record (instance, start included); first record %d ms after start\n", g, n, ms, n * 1000 / ms, t * 1e6 / hz / n, s }'
  kill -9 "${PIDS[$name]}"
  wait "${PIDS[$name]}" 2>/dev/null || true
  unset "PIDS[$name]"
  mv "$WORK/$name.in" "$WORK/$name.in.killed"
  mv "$WORK/$name.log" "$WORK/$name.log.killed"
  "$BIN" produce --bootstrap "$BROKER" --topic "$GTOPIC" --from "$GLINES" --lines $((GLINES + 10)) \
    2>/dev/null
  GLINES=$((GLINES + 10))
  started=$(ms)
  APP="$APP-$1" STATIC=1 start "$name" "${args[@]}"
  wait_for "$name" 1 "^first record"
  first=$(grep -m1 "^first record" "$WORK/$name.log" | sed -E 's/.* at ([0-9]+) ms$/\1/')
  echo "$1: restart after kill -9 to the first record: $((first - started)) ms"
  stop "$name"
}

if [[ -n "${GUARANTEES:-}" ]]; then
  GLINES="${LINES:-100000}"
  GTOPIC="$TOPIC-guarantees"
  "$BIN" produce --bootstrap "$BROKER" --topic "$GTOPIC" --lines "$GLINES" 2>/dev/null
  for g in $GUARANTEES; do
    TOPIC="$GTOPIC" guarantee "$g"
  done
fi

for replicas in $STANDBYS; do
  for killed in $KILLS; do
    failover "$replicas" "$killed"
  done
done
