#!/usr/bin/env bash
# Installs the Debian packages kura-bench and the compatibility tests run against:
# the peers Kura is measured beside, the tools that drive them, a TrueType font for
# kura-bench's PNG charts, and iproute2's `ip` for the tests' network namespaces.
#
# Idempotent: packages already installed are left alone, and `apt-get update` runs
# only when something is missing. Noninteractive, reads no stdin; must run as root
# (or through sudo).
#
#   scripts/install-peers.sh            # memcached, libmemcached-tools, mariadb, redis, fonts, iproute2,
#                                       # etcd (the cluster tests), protoc and the .proto files it imports
#                                       # (etcd-client's build), and
#                                       # nutcracker (the ring oracle)
#   scripts/install-peers.sh pkg ...    # exactly these packages
set -euo pipefail

packages=(memcached libmemcached-tools mariadb-server mariadb-client redis-server fonts-dejavu-core iproute2 etcd-server protobuf-compiler libprotobuf-dev nutcracker sysbench)
if [[ $# -gt 0 && "$1" != "--all" ]]; then
    packages=("$@")
fi

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-peers: all present: ${packages[*]}"
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
        sudo=(sudo -n)
    else
        echo "install-peers: must run as root to install: ${missing[*]}" >&2
        exit 1
    fi
fi

echo "install-peers: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q </dev/null
# Peers are started by the bench on their own ports; none should start on install.
# policy-rc.d keeps the packages' init scripts from starting services here.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
    created_policy=1
fi
status=0
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null || status=$?
if [[ $created_policy -eq 1 ]]; then
    "${sudo[@]}" rm -f "$policy"
fi
exit $status
