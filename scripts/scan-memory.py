"""The resident set of a Kura under a memory limit while SQL scans a table larger than
the limit: the figure issue 40 asks for ("during any scan the resident set stays
within -m plus 10%"). A benchmark: it prints what it measured and asserts nothing.

    target/pyenv/bin/python scripts/scan-memory.py [--rows 500000] [--memory-mib 64]

Starts target/release/kura (`-m MiB --durability interval`, its own data directory
under target/, ports of its own), loads ROWS rows of (id INT, v INT, s VARCHAR(100))
in 1,000-row INSERTs, then for each query resets the process's peak resident set
(`/proc/PID/clear_refs`, 5), runs the query, and reads the peak (`VmHWM`); then the
same for range reads through the memcached port (`get @@t.@>=...`). Needs
PyMySQL (scripts/install-test-deps.sh puts it in target/pyenv).
"""

import argparse
import os
import shutil
import socket
import tempfile
import time

import pymysql

import kuraproc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERIES = [
    "SELECT count(*) FROM t",
    "SELECT sum(v), max(s) FROM t",
    "SELECT id, s FROM t WHERE v = -1",
    "SELECT id FROM t ORDER BY id DESC LIMIT 10",
    "SELECT count(*) FROM t WHERE id BETWEEN 1000 AND 200000",
    "UPDATE t SET s = 'none' WHERE v = -1",
    "DELETE FROM t WHERE v = -1",
    "UPDATE t SET v = v + 1 WHERE v = 7",
]
# Range reads through the memcached port (docs/tables.md, "Ranges"): at most 1,000
# rows a reply.
RANGE_GETS = [
    "get @@t.@>=0",
    "get @@t.@>=100000@<100500",
]


def memcached_get(port, command):
    """Sends one text `get` and returns the reply's bytes, up to its final END."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(command.encode() + b"\r\n")
        reply = b""
        while not reply.endswith(b"\r\nEND\r\n") and reply != b"END\r\n":
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            reply += chunk
        return reply


def status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--memory-mib", type=int, default=64)
    ap.add_argument("--kura", default=os.path.join(ROOT, "target/release/kura"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="scan-memory.", dir=os.path.join(ROOT, "target"))
    proc, port, mc_port = kuraproc.start_both(
        args.kura, os.path.join(work, "data"), args.memory_mib)
    try:
        db = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
        cur = db.cursor()
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(100))")
        start = time.time()
        for base in range(0, args.rows, 1000):
            values = ",".join(
                f"({i},{i % 1000},'{('row%08d' % i) * 8}')"
                for i in range(base, min(base + 1000, args.rows)))
            cur.execute(f"INSERT INTO t VALUES {values}")
        print(f"scan-memory: {args.rows} rows loaded in {time.time() - start:.0f} s; "
              f"kura -m {args.memory_mib}; resident {status(proc.pid, 'VmRSS'):.0f} MiB "
              f"(limit + 10% = {args.memory_mib * 1.1:.0f} MiB)")
        time.sleep(2)
        for q in QUERIES:
            with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
                f.write("5")
            start = time.time()
            cur.execute(q)
            rows = cur.fetchall()
            took = time.time() - start
            if cur.description is None:
                shown = f"{cur.rowcount} rows changed"
            else:
                shown = rows[0] if len(rows) == 1 else f"{len(rows)} rows"
            print(f"{q:<58} peak {status(proc.pid, 'VmHWM'):6.1f} MiB  {took:6.2f} s  -> {shown}")
        for command in RANGE_GETS:
            with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
                f.write("5")
            start = time.time()
            reply = memcached_get(mc_port, command)
            took = time.time() - start
            shown = f"{reply.count(b'ROW ')} rows, {len(reply)} bytes"
            print(f"{command:<58} peak {status(proc.pid, 'VmHWM'):6.1f} MiB  {took:6.2f} s  -> {shown}")
        db.close()
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
