#!/usr/bin/env bash
# The main job: `statestore compare` at its default (quick) scale, every workload on every
# backend, in a release build. It prints a table and a recommendation per workload and writes
# results.json, results.csv and SVG charts to compare-results/ (or --out DIR). Arguments are
# passed on: scripts/run.sh --workloads ycsb_a,ycsb_b --backends rocksdb,redb --records 1000000
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p statestore-cli
"$CARGO_TARGET_DIR/release/statestore" compare "$@"
