#!/usr/bin/env bash
# The main job: `statestore compare` at its default (quick) scale, every workload on every
# backend, in a release build. It prints a table and a recommendation per workload and writes
# results.json, results.csv and SVG charts to compare-results/ (or --out DIR). Arguments are
# passed on: scripts/run.sh --workloads ycsb_a,ycsb_b --backends rocksdb,redb --records 1000000
set -euo pipefail

# RocksDB's C++, compiled fully optimised, is most of a first run: 30 to 50 CPU-minutes on the
# development machine, during which cargo prints little. Said before the build starts, so a
# first run does not look hung; silent once RocksDB is in the build cache.
first_build_notice() {
    local target_dir=$1
    if compgen -G "$target_dir/release/deps/liblibrocksdb_sys-*.rlib" >/dev/null; then
        return
    fi
    local cores
    cores=$(nproc 2>/dev/null || echo 1)
    cat >&2 <<EOF
run.sh: first build. Before compare runs, cargo compiles the release binary, and with it the
C++ of RocksDB fully optimised (and librdkafka's C): 30 to 50 CPU-minutes, so about
$((30 / cores)) to $((50 / cores)) minutes on this machine's $cores cores, longer while other builds share them.
It is built once, into $target_dir; later runs start compare at once,
which then takes about 2 minutes. The build does not overlap the measurements.
EOF
}

main() {
    cd "$(dirname "$0")/.."
    source scripts/setup.sh
    first_build_notice "$CARGO_TARGET_DIR"
    local started=$SECONDS
    cargo build --release -p statestore-cli
    if ((SECONDS - started >= 60)); then
        echo "run.sh: the build took $(((SECONDS - started) / 60)) min; compare starts now" >&2
    fi
    "$CARGO_TARGET_DIR/release/statestore" compare "$@"
}

# Sourced (to test `first_build_notice`), it only defines the functions.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
