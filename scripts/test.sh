#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need (Debian's
# memcached and libmemcached-tools, cargo-fuzz), then checks formatting and lints,
# runs a short smoke run of every fuzz target, and runs every test of the workspace,
# including the differential transcripts against real memcached, memccapable, the
# crash tests and a tiny run of every kura-bench workload.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-test-deps.sh
bash scripts/install-peers.sh

echo "== format and lints (at ${SECONDS} s)"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== fuzz smoke (at ${SECONDS} s)"
FUZZ_SECONDS="${FUZZ_SECONDS:-15}" bash scripts/fuzz-smoke.sh

echo "== tests (at ${SECONDS} s)"
# The benches' tiny runs and the transcripts start real servers: keep test binaries
# from fighting over two cores.
cargo test --workspace -- --test-threads=2
echo "== done (at ${SECONDS} s)"
