#!/usr/bin/env bash
# The main job: `statestore compare` at its default (quick) scale, every workload on every
# backend, in a release build. It prints a table and a recommendation per workload and writes
# results.json, results.csv and SVG charts to compare-results/ (or --out DIR). Arguments are
# passed on: scripts/run.sh --workloads ycsb_a,ycsb_b --backends rocksdb,redb --records 1000000
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
if [ ! -x "$CARGO_TARGET_DIR/release/statestore" ]; then
    # Said before the wait, so a first run does not look hung. RocksDB alone by g++ at
    # opt-level 2 took 28 and 46 CPU-minutes on the 2-core development machine (2026-12-01);
    # release builds it at 3. A first run there took 49:54, 48 minutes of it RocksDB.
    echo "run.sh: first build of the release binary. It compiles RocksDB's C++ fully" \
        "optimised (roughly 30 to 50 CPU-minutes): on 2 cores expect 15 to 25 minutes," \
        "up to 50 while other builds share them. Later runs reuse it from" \
        "$CARGO_TARGET_DIR and start at once; compare itself then takes about 2 minutes." >&2
fi
cargo build --release -p statestore-cli
"$CARGO_TARGET_DIR/release/statestore" compare "$@"
