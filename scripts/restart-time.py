"""How long a Kura with a large table takes to serve again after SIGKILL: the restart
figure issue 40 asks for (10,000,000 rows with a unique and an ordered index, serving
within 2 s). A benchmark: it prints what it measured and asserts nothing.

    target/pyenv/bin/python scripts/restart-time.py [--rows 10000000] [--memory-mib 256] \
        [--restarts 1] [--keep]

Starts target/release/kura (`-m MiB --durability interval`, its own data directory
under target/, ports of its own), creates
`t (id INT PRIMARY KEY, email VARCHAR(40), lvl INT, UNIQUE KEY email (email), KEY lvl (lvl))`,
loads ROWS rows in 1,000-row INSERTs over four connections, waits for the
maintenance thread's checkpoint, kills the process with SIGKILL, starts it again on
the same directory and times, from the start: the SQL port listening, a row by
primary key, a row by email, and a range of 10 by lvl; RESTARTS times over (each
after another SIGKILL). `--keep` leaves the data directory (its path is printed) for
a restart by hand, under perf say. Needs PyMySQL
(scripts/install-test-deps.sh puts it in target/pyenv).
"""

import argparse
import os
import shutil
import signal
import tempfile
import threading
import time

import pymysql

import kuraproc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--memory-mib", type=int, default=256)
    ap.add_argument("--kura", default=os.path.join(ROOT, "target/release/kura"))
    ap.add_argument("--restarts", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="restart-time.", dir=os.path.join(ROOT, "target"))
    data = os.path.join(work, "data")
    proc = None
    try:
        proc, port = kuraproc.start(args.kura, data, args.memory_mib)
        db = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
        db.cursor().execute(
            "CREATE TABLE t (id INT PRIMARY KEY, email VARCHAR(40), lvl INT, "
            "UNIQUE KEY email (email), KEY lvl (lvl))")
        loaded = time.time()
        counts = [0, 0, 0, 0]
        refused = []

        def load(part, parts):
            conn = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
            cur = conn.cursor()
            for base in range(part * 1000, args.rows, parts * 1000):
                values = ",".join(
                    f"({i},'p{i}@example.com',{i % 1000})"
                    for i in range(base, min(base + 1000, args.rows)))
                try:
                    counts[part] += cur.execute(f"INSERT INTO t VALUES {values}")
                except pymysql.MySQLError as e:
                    refused.append(str(e))
                    break
            conn.close()

        threads = [threading.Thread(target=load, args=(p, 4)) for p in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"restart-time: {sum(counts)} of {args.rows} rows loaded in "
              f"{time.time() - loaded:.0f} s (kura -m {args.memory_mib})")
        for why in sorted(set(refused)):
            print(f"restart-time: the load stopped: {why}")
        # The maintenance thread checkpoints the index every 60 s by default, and
        # commits the ordered keyspace every second.
        time.sleep(65)
        for restart in range(args.restarts):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            began = time.time()
            proc, port = kuraproc.start(args.kura, data, args.memory_mib)
            listening = time.time() - began
            db = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
            cur = db.cursor()
            marks = [("SQL port listening", listening)]
            for what, q in [
                ("a row by primary key", "SELECT email FROM t WHERE id = 4242"),
                ("a row by email", "SELECT id FROM t WHERE email = 'p777@example.com'"),
                ("a range of 10 by lvl", "SELECT id FROM t WHERE lvl = 5 ORDER BY lvl LIMIT 10"),
                ("a range of 10 by id", "SELECT id FROM t WHERE id BETWEEN 5000 AND 5009"),
            ]:
                cur.execute(q)
                rows = cur.fetchall()
                marks.append((f"{what} ({len(rows)} rows)", time.time() - began))
            db.close()
            for what, at in marks:
                print(f"restart-time: restart {restart + 1}: {what:<32} {at:6.2f} s after the start")
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        if args.keep:
            print(f"restart-time: the data directory is kept: {data}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
