#!/usr/bin/env bash
# Short fuzzing run of every cargo-fuzz target in fuzz/, for CI and before a
# commit that touches a parser. A crash, a timeout or an out-of-memory fails it.
#
#   scripts/fuzz-smoke.sh                 # every target, 20 s each
#   FUZZ_SECONDS=120 scripts/fuzz-smoke.sh
#   scripts/fuzz-smoke.sh parse_meta      # only these targets
#
# Targets come from `cargo fuzz list`, so a new file in fuzz/fuzz_targets/
# (with its [[bin]] in fuzz/Cargo.toml) is picked up without editing this.
# Installs cargo-fuzz if it is missing. libFuzzer needs nightly flags; on a
# stable toolchain RUSTC_BOOTSTRAP=1 unlocks them. Crash inputs land in
# fuzz/artifacts/<target>/; replay one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-20}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz
fi

cd "$root/fuzz"
if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz-smoke: no fuzz targets found" >&2
    exit 1
fi

failed=()
for target in "${targets[@]}"; do
    echo "fuzz-smoke: ${target} for ${seconds}s" >&2
    # -rss_limit_mb and -timeout turn leaks and stalls into failures too.
    if ! cargo fuzz run "$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1; then
        failed+=("$target")
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz-smoke: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} targets ran ${seconds}s without a crash" >&2
