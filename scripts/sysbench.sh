#!/usr/bin/env bash
# sysbench's OLTP workloads against Kura's SQL port and a private MariaDB, side by
# side in one run on this machine: the same tables, the same rows, one after the other.
#
#   scripts/sysbench.sh [TEST ...]          # default: oltp_point_select oltp_read_only oltp_read_write
#
# Settings (environment): ROWS (100000), THREADS (16), SECONDS_EACH (20),
# KURA_MEMORY_MIB (0 = no limit), MARIADB_POOL (the InnoDB buffer pool, 1G),
# DURABILITY (Kura's --durability, fsync; MariaDB matches it with
# innodb_flush_log_at_trx_commit=1 for fsync and 2 otherwise), RUN_OPTIONS (more
# options for each run, e.g. `--point_selects=0 --sum_ranges=0` to measure one
# kind of statement).
#
# sysbench runs as a new user would, with its defaults (database `sbtest`, which
# the script makes on both servers first; AUTO_INCREMENT ids). Prints one line per server and test: transactions/s,
# queries/s, the 95th-percentile latency and the server's CPU time per transaction
# (user and system, from /proc/PID/stat), the machine's context switches per
# transaction (/proc/stat) and the ratio Kura/MariaDB.
# Needs a release build (`cargo build --release -p kura-server`); installs
# sysbench and MariaDB through Debian if missing. Servers listen on loopback ports
# of their own and are stopped by PID at the end. Benchmarks, not tests: nothing is
# asserted.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/install-peers.sh sysbench mariadb-server mariadb-client >/dev/null

rows=${ROWS:-100000}
threads=${THREADS:-16}
seconds=${SECONDS_EACH:-20}
memory=${KURA_MEMORY_MIB:-0}
pool=${MARIADB_POOL:-1G}
durability=${DURABILITY:-fsync}
tests=("$@")
if [[ ${#tests[@]} -eq 0 ]]; then
    tests=(oltp_point_select oltp_read_only oltp_read_write)
fi
kura=${KURA_BIN:-$root/target/release/kura}
[[ -x "$kura" ]] || { echo "sysbench.sh: build $kura first (cargo build --release -p kura-server)" >&2; exit 1; }

# Not on tmpfs, where fsync does nothing.
work=$(mktemp -d "$root/target/sysbench.XXXXXX")
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# A process's CPU time so far, in clock ticks: user, then system (/proc/PID/stat).
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
# The machine's context switches so far (sysbench's and the server's together; a
# server's connection threads are gone by the time a run ends, and their counts with them).
switches() { awk '/^ctxt/ {print $2}' /proc/stat; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Kura: its own data directory and ports; the SQL port's root has no password.
kura_port=$(free_port)
sql_port=$(free_port)
"$kura" -p "$kura_port" --sql-port "$sql_port" -m "$memory" --durability "$durability" \
    --data-dir "$work/kura" >"$work/kura.log" 2>&1 &
pids+=($!)

# MariaDB: as the SQL tests start it (testkit's mariadb.rs), with a real buffer pool.
flush=2
[[ "$durability" == fsync ]] && flush=1
mkdir -p "$work/mariadb/tmp"
mariadb-install-db --no-defaults --datadir="$work/mariadb/data" --tmpdir="$work/mariadb/tmp" \
    --user=root --auth-root-authentication-method=normal --skip-test-db >/dev/null
maria_port=$(free_port)
mariadbd --no-defaults --datadir="$work/mariadb/data" --tmpdir="$work/mariadb/tmp" \
    --socket="$work/mariadb/sock" --pid-file="$work/mariadb/pid" --port="$maria_port" \
    --bind-address=127.0.0.1 --user=root --skip-grant-tables --skip-name-resolve \
    --innodb-buffer-pool-size="$pool" --innodb-flush-log-at-trx-commit="$flush" \
    --skip-log-bin --performance-schema=OFF --max-connections=200 \
    >"$work/mariadb.log" 2>&1 &
pids+=($!)

wait_port() {
    for _ in $(seq 1 300); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "sysbench.sh: nothing listens on port $1" >&2
    cat "$work"/*.log >&2
    exit 1
}
wait_port "$sql_port"
wait_port "$maria_port"
# sysbench's own database, made as its users make it.
for port in "$sql_port" "$maria_port"; do
    mariadb --no-defaults -h 127.0.0.1 -P "$port" -u root -e "CREATE DATABASE sbtest"
done

common=(--db-driver=mysql --mysql-host=127.0.0.1 --mysql-user=root
    --tables=1 --table-size="$rows")
echo "sysbench.sh: $(date -u +%F) commit $(git rev-parse --short HEAD), $rows rows, $threads threads, ${seconds}s each, kura -m $memory --durability $durability${RUN_OPTIONS:+, run options $RUN_OPTIONS}"
for server in kura mariadb; do
    port=$sql_port
    [[ $server == mariadb ]] && port=$maria_port
    sysbench oltp_read_only "${common[@]}" --mysql-port="$port" prepare >"$work/$server.prepare" 2>&1 ||
        { echo "sysbench.sh: prepare on $server failed:" >&2; cat "$work/$server.prepare" >&2; exit 1; }
done
declare -A tps
for test in "${tests[@]}"; do
    for server in kura mariadb; do
        port=$sql_port
        [[ $server == mariadb ]] && port=$maria_port
        pid=${pids[0]}
        [[ $server == mariadb ]] && pid=${pids[1]}
        before=$(cpu_ticks "$pid")
        cs_before=$(switches)
        # shellcheck disable=SC2086
        out=$(sysbench "$test" "${common[@]}" --mysql-port="$port" --threads="$threads" \
            --time="$seconds" --report-interval=0 ${RUN_OPTIONS:-} run 2>&1) ||
            { echo "sysbench.sh: $test on $server failed:" >&2; echo "$out" >&2; exit 1; }
        after=$(cpu_ticks "$pid")
        cs_after=$(switches)
        t=$(awk '/transactions:/ {gsub(/\(/,"",$3); print $3}' <<<"$out")
        q=$(awk '/queries:/ && /per sec/ {gsub(/\(/,"",$3); print $3}' <<<"$out")
        p95=$(awk '/95th percentile:/ {print $3}' <<<"$out")
        errors=$(awk '/ignored errors:/ {print $3}' <<<"$out")
        tps[$server]=$t
        n=$(awk '/transactions:/ {print $2}' <<<"$out")
        cpu=$(python3 -c "import os,sys; b,a=sys.argv[1].split(),sys.argv[2].split(); hz=os.sysconf('SC_CLK_TCK'); n=int(sys.argv[3]); print(f'{(int(a[0])-int(b[0]))/hz/n*1e6:.0f} us user {(int(a[1])-int(b[1]))/hz/n*1e6:.0f} us system')" "$before" "$after" "$n")
        cs=$(( (cs_after - cs_before) / n ))
        printf '%-18s %-8s %10s tps %12s qps  p95 %8s ms  ignored errors %s  cpu/tx %s  switches/tx %s\n' \
            "$test" "$server" "$t" "$q" "$p95" "$errors" "$cpu" "$cs"
    done
    python3 -c "import sys; k,m=float(sys.argv[1]),float(sys.argv[2]); print(f'{sys.argv[3]:<18} kura/mariadb {k/m:.2f}')" \
        "${tps[kura]}" "${tps[mariadb]}" "$test"
done
