#!/usr/bin/env bash
# The main job: open every backend by name and exercise it. The dev profile is enough here
# (dependencies are built optimised, see Cargo.toml) and shares the test build cache.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo run -p statestore --example tour
