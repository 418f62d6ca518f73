#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust: Debian's memcached (the reference
# the wire transcripts are compared with), libmemcached-tools (memccapable),
# sasl2-bin and libsasl2-modules (memcached's SASL checks users in a sasldb that
# saslpasswd2 writes; PLAIN is a plugin), memjs from npm into target/node, and a
# Python virtualenv in target/pyenv with the clients the tests drive (PyMySQL,
# mysql-connector-python, SQLAlchemy (an ORM's flushes), pymemcache, python-memcached,
# pylibmc, python-binary-memcached and prometheus-client, the Prometheus project's
# parser, pinned).
# Called from the README's test command; safe to run every time.
#
# Idempotent: if both are present it does nothing, and `apt-get update` runs once,
# only when something is missing. Noninteractive, reads no stdin. Installing needs
# root (or passwordless sudo).
set -euo pipefail

packages=(memcached libmemcached-tools sasl2-bin libsasl2-modules)
binaries=(/usr/bin/memcached /usr/bin/memccapable /usr/sbin/saslpasswd2)

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

python_clients() {
    local venv
    venv="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/pyenv"
    if [[ -x "$venv/bin/python" ]] &&
        "$venv/bin/python" -c 'import pymysql, mysql.connector, sqlalchemy, alembic, pymemcache, memcache, pylibmc, bmemcached, prometheus_client' 2>/dev/null; then
        echo "install-test-deps: present: python clients in $venv"
        return
    fi
    echo "install-test-deps: python clients into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        PyMySQL==1.2.4 mysql-connector-python==26.10.0 SQLAlchemy==2.0.44 alembic==1.14.0 \
        pymemcache==4.0.0 python-memcached==1.62 \
        pylibmc==1.6.3 python-binary-memcached==0.33.0 prometheus-client==0.21.1
}
python_clients

# memjs, Node's binary-protocol client, pinned, into target/node (npm ships with Node).
node_clients() {
    local prefix
    prefix="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/node"
    if [[ -f "$prefix/node_modules/memjs/package.json" ]] &&
        grep -q '"version": "1.3.2"' "$prefix/node_modules/memjs/package.json"; then
        echo "install-test-deps: present: node clients in $prefix"
        return
    fi
    echo "install-test-deps: node clients into $prefix"
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --silent memjs@1.3.2
}
node_clients

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
