#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 60), one after the other,
# and prints libFuzzer's closing figures (executions, coverage) for each. Needs the nightly
# toolchain; installs cargo-fuzz if missing. Builds go to fuzz/target (sanitizer flags rebuild
# everything anyway, so the shared cache would not help). Each run starts from the small
# corpus kept in fuzz/corpus/<target>/ and grows a copy of it in fuzz/target/corpus/<target>/,
# so the repository's corpus changes only by hand (`cargo +nightly fuzz cmin`, then pick a few
# dozen files); a crash leaves its input in fuzz/artifacts/<target>/ and fails the script: copy it to
# changelog/tests/fuzz-regressions/<target>/, where `cargo test` replays it.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo +nightly fuzz build

failed=()
for target in $(cargo +nightly fuzz list); do
    echo "== $target: ${seconds}s"
    log="target/fuzz-$target.log"
    work="target/corpus/$target"
    mkdir -p "$work"
    cp -n corpus/"$target"/* "$work"/
    if cargo +nightly fuzz run "$target" "$work" -- -max_total_time="$seconds" >"$log" 2>&1; then
        grep -E '^#[0-9]+.*(DONE|cov:)' "$log" | tail -n 1
        grep -E '^Done [0-9]+ runs' "$log"
    else
        failed+=("$target")
        grep -E 'panicked at|ERROR|Test unit written' "$log" | head -n 5
    fi
done

if ((${#failed[@]})); then
    echo "crashed: ${failed[*]} (inputs in fuzz/artifacts/)"
    exit 1
fi
