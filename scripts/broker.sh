#!/usr/bin/env bash
# A local Kafka-protocol broker on loopback for the Kafka integration tests: nisshi 0.8.1 (the
# default), or tansu 0.6.0 with two fixes (STATESTORE_BROKER=tansu).
#
#   scripts/broker.sh install  build the broker if missing (nothing else; see below)
#   scripts/broker.sh start    build it if missing, start it, print the bootstrap address
#   scripts/broker.sh stop     stop it and remove its working directory
#   scripts/broker.sh status   print the bootstrap address and pid; exit 1 when not running
#   scripts/broker.sh bin      print the broker's path; exit 1 when it is not built
#
# Typical use:
#   export STATESTORE_KAFKA_BOOTSTRAP=$(scripts/broker.sh start)
#   cargo test -p statestore-changelog
#   scripts/broker.sh stop
#
# Every command is idempotent: `start` on a running broker prints its address again, `stop`
# without one does nothing. The broker keeps its records in SQLite (`sqlite://<name>.db`) in a
# fresh `mktemp -d` directory; the tests never use a `memory://` engine (tansu's loses
# records). Progress goes to stderr; stdout carries only the address.
#
# Environment:
#   STATESTORE_BROKER         nisshi (default) or tansu; the tests turn on the tansu workarounds
#                             (`TasksConfig::tansu_workarounds`) when it is tansu
#   STATESTORE_KAFKA_PORT     port to listen on (default 19092)
#   STATESTORE_BROKER_ENGINE  sqlite (default) or memory: nisshi's in-memory engine, which
#                             serves fetches about ten times faster, for benchmarks only
#   STATESTORE_BROKER_STATE   state file (default ${TMPDIR:-/tmp}/statestore-broker.env)
#   STATESTORE_BROKER_WAIT    seconds to wait for the port to accept connections (default 60)
#   STATESTORE_BROKER_HOME    where the patched tansu is built and kept
#                             (default ${XDG_CACHE_HOME:-$HOME/.cache}/statestore-broker)
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

# The broker is tansu 0.6.0 built from its crates.io sources with two fixes to tansu-storage's
# SQLite engine (`tansu-storage-0.6.0/src/lite.rs`), under its own name, so an unpatched
# `tansu` on the PATH or in ~/.cargo/bin is never used.
#
# 1. DescribeGroups always failed: `describe_groups` reads the group's stored JSON text and maps
#    it with `serde_json::Value::from`, which makes a JSON *string* of it rather than parsing
#    it, so decoding that into a `GroupDetail` fails. The one-line fix parses the text, as
#    `update_group` in the same file already does:
#      .map(serde_json::Value::from)
#      -> .and_then(|text| serde_json::from_str::<serde_json::Value>(text).map_err(Error::from))
#    (`limbo.rs` has the same bug; only `sqlite://`, the libsql feature, is used here.)
# 2. A fetch looked up each record's headers with a full scan of the `header` table, which
#    has no index and holds the headers of every record of every topic: a fetch of N records
#    cost N scans of the broker's whole history (3.7 ms a record at 47k headers), so a 10k-record
#    restore outlived its 30 s timeout, and fetches slowed down all day. The fix adds one DDL
#    entry, `create index if not exists header_topition_offset_id on header (topition,
#    offset_id)`, which also indexes an existing database when the broker starts.
#
# Upstream, tansu continues as nisshi, the default broker below.
#
# Bump TANSU_BUILD whenever the patch changes: it names the install directory, so every
# machine (CI too) builds the new one once. Build flags alone (the optimisation level) do not
# change what the broker does, and need no bump.
TANSU_VERSION=0.6.0
TANSU_BUILD="tansu-$TANSU_VERSION-statestore.2"
BROKER_HOME="${STATESTORE_BROKER_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/statestore-broker}"
TANSU_ROOT="$BROKER_HOME/$TANSU_BUILD"

tansu_bin() {
  [[ -x "$TANSU_ROOT/bin/tansu" ]] || return 1
  echo "$TANSU_ROOT/bin/tansu"
}

# nisshi 0.8.1 (tansu's successor) from crates.io, unpatched: its consumer-group coordinator
# keeps the group when its leader dies, where tansu 0.6 can stall it. It needs rustc 1.96,
# which Debian bookworm's security suite carries as rustc-web and cargo-web
# (/usr/bin/rustc and /usr/bin/cargo, beside rustup's toolchain, which stays the default).
NISSHI_VERSION=0.8.1
NISSHI_ROOT="$BROKER_HOME/nisshi-$NISSHI_VERSION"

nisshi_bin() {
  [[ -x "$NISSHI_ROOT/bin/nisshi" ]] || return 1
  echo "$NISSHI_ROOT/bin/nisshi"
}

# True when /usr/bin/rustc is at least 1.96.
new_enough_rustc() {
  local version
  version=$(/usr/bin/rustc --version 2>/dev/null | awk '{print $2}') || return 1
  [[ -n "$version" ]] && [[ "$(printf '%s\n1.96.0\n' "$version" | sort -V | head -n 1)" == 1.96.0 ]]
}

build_nisshi() {
  if ! new_enough_rustc; then
    log "installing rustc-web and cargo-web (rustc 1.96) from Debian's security suite for nisshi"
    local sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq rustc-web cargo-web >&2
    new_enough_rustc || die "rustc-web did not bring rustc 1.96 to /usr/bin/rustc"
  fi
  log "building nisshi $NISSHI_VERSION into $NISSHI_ROOT: about 500 crates, unoptimised," \
    "about 16 CPU-minutes (8 min on 2 idle cores)"
  local started=$SECONDS
  work=$(mktemp -d "${TMPDIR:-/tmp}/statestore-nisshi-build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_TARGET_DIR="$work/target" RUSTC=/usr/bin/rustc \
    /usr/bin/cargo install nisshi --version "$NISSHI_VERSION" --locked --root "$NISSHI_ROOT" >&2
  rm -rf "$work"
  trap - EXIT
  log "built nisshi $NISSHI_VERSION in $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s"
}

BROKER="${STATESTORE_BROKER:-nisshi}"
case "$BROKER" in
  nisshi | tansu) ;;
  *) die "STATESTORE_BROKER must be nisshi or tansu, not '$BROKER'" ;;
esac

broker_bin() { "${BROKER}_bin"; }

# Builds the broker unless it is there.
install_broker() {
  broker_bin >/dev/null && return 0
  mkdir -p "$BROKER_HOME"
  # Two installs at once (test.sh and a manual start) would build twice: the second waits.
  exec 9>"$BROKER_HOME/install.lock"
  flock 9
  broker_bin >/dev/null || "build_$BROKER"
  exec 9>&-
  broker_bin >/dev/null || die "the $BROKER build finished but its binary is missing"
}

# Replaces the one occurrence of $2 in file $1 with $3; fails unless $2 occurs exactly once
# and $3 is there afterwards.
replace_once() {
  local file=$1 old=$2 new=$3 text
  [[ $(grep -cF "$old" "$file") == 1 ]] ||
    die "expected one '$old' in $file; the patch does not fit these sources"
  text=$(<"$file")
  printf '%s\n' "${text/"$old"/"$new"}" >"$file"
  grep -qF "$new" "$file" || die "patching $file failed"
}

# Applies both fixes to the tansu-storage sources in directory $1.
patch_storage() {
  local file="$1/src/lite.rs"
  local bug='.map(serde_json::Value::from)'
  local line
  line=$(grep -nF "$bug" "$file" | cut -d: -f1)
  [[ -n "$line" ]] && sed -n "$((line - 30)),${line}p" "$file" | grep -q 'async fn describe_groups' ||
    die "'$bug' is not in describe_groups of $file; the patch does not fit these sources"
  replace_once "$file" "$bug" \
    '.and_then(|text| serde_json::from_str::<serde_json::Value>(text).map_err(Error::from))'
  local header='("040-header.sql", include_sql!("ddl/040-header.sql")),'
  replace_once "$file" "$header" "$header
        (\"041-header-index.sql\", include_sql!(\"ddl/041-header-index.sql\")),"
  echo 'create index if not exists header_topition_offset_id on header (topition, offset_id);' \
    >"$1/src/ddl/041-header-index.sql"
}

# One line per [[package]] entry of the Cargo.lock $1.
lock_entries() { awk 'BEGIN { RS = "" } { gsub(/\n/, " "); print }' "$1"; }

build_tansu() {
  command -v cargo >/dev/null || die "cargo is needed to build the broker"
  log "building $TANSU_BUILD (tansu $TANSU_VERSION with the two fixes described in broker.sh) into" \
    "$TANSU_ROOT: a build of about 400 crates, unoptimised, about 10 CPU-minutes (5 min on 2 idle cores)"
  local started=$SECONDS
  work=$(mktemp -d "${TMPDIR:-/tmp}/statestore-tansu-build.XXXXXX")
  # A failed build leaves nothing behind (its target directory holds gigabytes).
  trap 'rm -rf "$work"' EXIT

  # The crate sources come from crates.io through cargo itself: `cargo fetch` for a throwaway
  # package that depends on both leaves their .crate archives in cargo's registry cache.
  mkdir -p "$work/fetch/src"
  : >"$work/fetch/src/lib.rs"
  printf '%s\n' \
    '[package]' 'name = "statestore-tansu-fetch"' 'version = "0.0.0"' 'edition = "2021"' \
    '[dependencies]' \
    "tansu = { version = \"=$TANSU_VERSION\", default-features = false }" \
    "tansu-storage = { version = \"=$TANSU_VERSION\", default-features = false }" \
    '[workspace]' >"$work/fetch/Cargo.toml"
  cargo fetch --manifest-path "$work/fetch/Cargo.toml" \
    --target "$(rustc -vV | sed -n 's/^host: //p')" >&2
  local crate archive
  for crate in tansu tansu-storage; do
    archive=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/cache" \
      -name "$crate-$TANSU_VERSION.crate" | head -n 1)
    [[ -n "$archive" ]] || die "cargo fetch left no $crate-$TANSU_VERSION.crate"
    tar -xzf "$archive" -C "$work"
  done
  local src="$work/tansu-$TANSU_VERSION" storage="$work/tansu-storage-$TANSU_VERSION"
  patch_storage "$storage"

  # tansu's own Cargo.lock pins every dependency. The patch must turn only tansu-storage's
  # entry into a path entry: resolve once without --locked, check that nothing else moved,
  # then build with --locked.
  printf '\n[workspace]\n\n[patch.crates-io]\ntansu-storage = { path = "%s" }\n' "$storage" \
    >>"$src/Cargo.toml"
  cp "$src/Cargo.lock" "$work/Cargo.lock.orig"
  cargo metadata --format-version 1 --manifest-path "$src/Cargo.toml" >/dev/null
  local moved
  moved=$(diff <(lock_entries "$work/Cargo.lock.orig") <(lock_entries "$src/Cargo.lock") |
    grep '^[<>]' | grep -vF 'name = "tansu-storage"' || true)
  [[ -z "$moved" ]] || die "the patch moved other entries of tansu's Cargo.lock: $moved"
  diff -q "$work/Cargo.lock.orig" "$src/Cargo.lock" >/dev/null &&
    die "tansu-storage is still the crates.io one in Cargo.lock; the patch was not applied"

  # Its own target directory, removed afterwards: tansu's build must not fill the workspace's
  # shared cache. Unoptimised: the build took 4:57 on 2 idle cores against 9:33 at opt-level 1
  # (`cargo install --timings`: 489 unit-seconds against 1080; 27 CPU-minutes at the default
  # of 3), and the broker serves the tests nearly as fast: the Kafka test binaries took 186 s
  # against 182 s (kafka_conformance, kafka_log, kafka_restore, tasks_kafka, failover). The
  # Kafka cases of the `changelog` bench measure the broker's rate, so the figures docs/benchmarks.md
  # gives for them come from a broker built at 1 or 3.
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_TARGET_DIR="$work/target" cargo install --locked --path "$src" --features libsql \
    --root "$TANSU_ROOT" >&2
  rm -rf "$work"
  trap - EXIT
  log "built $TANSU_BUILD in $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s"
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
  install_broker
  local bin dir addr pid
  bin=$(broker_bin)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/statestore-broker.XXXXXX")
  addr="127.0.0.1:$PORT"
  local engine="sqlite://$BROKER.db"
  if [[ "${STATESTORE_BROKER_ENGINE:-sqlite}" == memory ]]; then
    [[ "$BROKER" == nisshi ]] || die "STATESTORE_BROKER_ENGINE=memory is for nisshi only"
    engine="memory://nisshi/"
  fi
  (
    cd "$dir"
    # Its own session, so a Ctrl-C meant for the tests does not stop the broker mid-run.
    exec setsid "$bin" broker \
      --listener-url "tcp://$addr" \
      --advertised-listener-url "tcp://$addr" \
      --storage-engine "$engine" \
      >"$dir/broker.log" 2>&1
  ) &
  pid=$!
  printf 'BROKER_PID=%s\nBROKER_DIR=%q\nBROKER_ADDR=%s\n' "$pid" "$dir" "$addr" >"$STATE"
  local waited=0
  until port_open "$PORT"; do
    if ! alive "$pid"; then
      tail -n 20 "$dir/broker.log" >&2 || true
      rm -f "$STATE"
      die "$BROKER exited before listening on $addr (log above, dir $dir)"
    fi
    if ((waited >= WAIT * 10)); then
      stop
      die "$BROKER did not accept connections on $addr within ${WAIT}s"
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  log "$BROKER listening on $addr (pid $pid, dir $dir, log $dir/broker.log)"
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
      log "stopped the broker (pid $BROKER_PID)"
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
  install) install_broker ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  bin) broker_bin || die "$BROKER is not built; scripts/broker.sh install builds it" ;;
  *)
    echo "usage: $0 install|start|stop|status|bin" >&2
    exit 2
    ;;
esac
