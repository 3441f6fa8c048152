#!/usr/bin/env bash
# The main job: open every backend by name and exercise it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo run --release -p statestore --example tour
