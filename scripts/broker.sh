#!/usr/bin/env bash
# A local Kafka-protocol broker (tansu) on loopback for the Kafka changelog's integration tests.
#
#   scripts/broker.sh install  install tansu if missing (nothing else)
#   scripts/broker.sh start    install tansu if missing, start it, print the bootstrap address
#   scripts/broker.sh stop     stop it and remove its working directory
#   scripts/broker.sh status   print the bootstrap address and pid; exit 1 when not running
#
# Typical use:
#   export STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)
#   cargo test -p statestore-changelog
#   scripts/broker.sh stop
#
# Every command is idempotent: `start` on a running broker prints its address again, `stop`
# without one does nothing. The broker keeps its records in SQLite (`sqlite://tansu.db`) in a
# fresh `mktemp -d` directory; tansu's `memory://` engine is never used because it loses
# records. Progress goes to stderr; stdout carries only the address.
#
# Environment:
#   STATESTORE_KAFKA_PORT     port to listen on (default 19092)
#   STATESTORE_BROKER_STATE   state file (default ${TMPDIR:-/tmp}/statestore-broker.env)
#   STATESTORE_BROKER_WAIT    seconds to wait for the port to accept connections (default 60)
set -euo pipefail

PORT="${STATESTORE_KAFKA_PORT:-19092}"
STATE="${STATESTORE_BROKER_STATE:-${TMPDIR:-/tmp}/statestore-broker.env}"
WAIT="${STATESTORE_BROKER_WAIT:-60}"

log() { echo "broker.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Loads BROKER_PID, BROKER_DIR and BROKER_ADDR from the state file; false when the broker it
# names is not running.
load_state() {
  [[ -f "$STATE" ]] || return 1
  # shellcheck disable=SC1090
  source "$STATE"
  [[ -n "${BROKER_PID:-}" ]] && alive "$BROKER_PID"
}

# True when process $1 runs (a killed broker may linger as a zombie until its parent reaps it).
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ "$stat" != Z* ]]
}

tansu_bin() {
  if command -v tansu >/dev/null 2>&1; then
    command -v tansu
  elif [[ -x "$HOME/.cargo/bin/tansu" ]]; then
    echo "$HOME/.cargo/bin/tansu"
  else
    return 1
  fi
}

install_tansu() {
  tansu_bin >/dev/null && return 0
  log "tansu not found; installing it (cargo install tansu --locked --features libsql, ~9 min)"
  cargo install tansu --locked --features libsql >&2
  tansu_bin >/dev/null || die "cargo install tansu finished but no tansu binary was found"
}

start() {
  if load_state; then
    log "already running (pid $BROKER_PID, dir $BROKER_DIR)"
    echo "$BROKER_ADDR"
    return 0
  fi
  # A state file whose broker died (a reboot, a kill): drop its directory and start afresh.
  [[ -n "${BROKER_DIR:-}" && -d "$BROKER_DIR" ]] && rm -rf "$BROKER_DIR"
  rm -f "$STATE"
  port_open "$PORT" && die "port $PORT is already in use; set STATESTORE_KAFKA_PORT to a free port"
  install_tansu
  local bin dir addr pid
  bin=$(tansu_bin)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/statestore-broker.XXXXXX")
  addr="127.0.0.1:$PORT"
  (
    cd "$dir"
    # Its own session, so a Ctrl-C meant for the tests does not stop the broker mid-run.
    exec setsid "$bin" broker \
      --listener-url "tcp://$addr" \
      --advertised-listener-url "tcp://$addr" \
      --storage-engine "sqlite://tansu.db" \
      >"$dir/broker.log" 2>&1
  ) &
  pid=$!
  printf 'BROKER_PID=%s\nBROKER_DIR=%q\nBROKER_ADDR=%s\n' "$pid" "$dir" "$addr" >"$STATE"
  local waited=0
  until port_open "$PORT"; do
    if ! alive "$pid"; then
      tail -n 20 "$dir/broker.log" >&2 || true
      rm -f "$STATE"
      die "tansu exited before listening on $addr (log above, dir $dir)"
    fi
    if ((waited >= WAIT * 10)); then
      stop
      die "tansu did not accept connections on $addr within ${WAIT}s"
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  log "tansu listening on $addr (pid $pid, dir $dir, log $dir/broker.log)"
  echo "$addr"
}

stop() {
  if [[ -f "$STATE" ]]; then
    # shellcheck disable=SC1090
    source "$STATE"
    if [[ -n "${BROKER_PID:-}" ]] && alive "$BROKER_PID"; then
      kill "$BROKER_PID" 2>/dev/null || true
      for _ in $(seq 50); do
        alive "$BROKER_PID" || break
        sleep 0.1
      done
      kill -9 "$BROKER_PID" 2>/dev/null || true
      log "stopped tansu (pid $BROKER_PID)"
    fi
    [[ -n "${BROKER_DIR:-}" && -d "$BROKER_DIR" ]] && rm -rf "$BROKER_DIR"
    rm -f "$STATE"
  else
    log "not running"
  fi
}

status() {
  if load_state; then
    echo "$BROKER_ADDR"
    log "running (pid $BROKER_PID, dir $BROKER_DIR)"
  else
    log "not running"
    return 1
  fi
}

case "${1:-}" in
  install) install_tansu ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: $0 install|start|stop|status" >&2
    exit 2
    ;;
esac
