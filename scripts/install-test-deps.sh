#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust: Debian's memcached (the reference
# the wire transcripts are compared with) and libmemcached-tools (memccapable).
# Called from the README's test command; safe to run every time.
#
# Idempotent: if both are present it does nothing, and `apt-get update` runs once,
# only when something is missing. Noninteractive, reads no stdin. Installing needs
# root (or passwordless sudo).
set -euo pipefail

packages=(memcached libmemcached-tools)
binaries=(/usr/bin/memcached /usr/bin/memccapable)

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

missing=()
for pkg in "${packages[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
for bin in "${binaries[@]}"; do
    if [[ ! -x "$bin" && ${#missing[@]} -eq 0 ]]; then
        # Packaged but the binary is gone: reinstall everything we need.
        missing=("${packages[@]}")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-test-deps: present: ${packages[*]}"
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        echo "install-test-deps: need root to install: ${missing[*]}" >&2
        exit 1
    fi
fi

echo "install-test-deps: installing ${missing[*]}"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    --reinstall "${missing[@]}" </dev/null

for bin in "${binaries[@]}"; do
    if [[ ! -x "$bin" ]]; then
        echo "install-test-deps: $bin still missing after install" >&2
        exit 1
    fi
done
echo "install-test-deps: done"
