"""A table moved between shards while SQL and memcached writers run.

Usage: table_move.py A B AM BM FLAGS ROWS [crash]

A, B: the SQL ports of shard a's and b's primaries; AM, BM: their memcached ports.
Table `players` (id, name, email UNIQUE, KEY name) lives on a with rows 0..ROWS-1
(name `n<id % 50>`, email `<id>@x`). Writers, each on ids of its own:
  - SQL through A, autocommit: inserts, updates of email and name, deletes, and an
    insert of another row's email (which must get 1062);
  - SQL through B, transactions of an update and an insert (COMMIT, or a 1213 that
    rolled it back: then nothing of it is made);
  - a prepared statement through A (mysql-connector): updates of names;
  - memcached through AM: `@@players.<id>` sets, and a set of another row's email
    (which must be refused).
FLAGS/started is made once they run; they stop 1.5 s after FLAGS/moved appears (the
test's `kura cluster move-table` done), at most 120 s in. Each logs what it was
told was done. Then, through both nodes: every row holds its last acknowledged
values (deleted rows are gone, no row is there that no one wrote), each email once,
lookups through the unique index (SQL and `@@players_by_email`) and the name index
find the rows, and a duplicate email is still refused (1062, NOT_STORED).

With `crash` (A and B then both a's replica's SQL port, AM and BM its memcached
port), nodes are SIGKILLed and restarted meanwhile: a write that fails for
want of a server (a lost connection, 1105 from a node passing it on, 1180 from a
primary whose replica is down) may or may not have been made, and its writer connects again and goes on; the checks are the same.

Exits non-zero with the failing check.
"""
import os
import random
import sys
import threading
import time

import mysql.connector
import pymemcache.client.base
import pymemcache.exceptions
import pymysql

STOP_AFTER_MOVED = 1.5
AT_MOST = 120.0


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def connect(address):
    host, port = address.rsplit(":", 1)
    return pymysql.connect(host=host, port=int(port), user="app", password="secret",
                           database="kura", autocommit=True)


def memcached(address):
    host, port = address.rsplit(":", 1)
    return pymemcache.client.base.Client((host, int(port)), timeout=10,
                                         default_noreply=False)


def rows(conn, sql, args=None):
    with conn.cursor() as c:
        c.execute(sql, args)
        return [tuple(r) for r in c.fetchall()]


class Writers:
    def __init__(self, flags, filled, crash):
        self.flags = flags
        self.crash = crash
        self.began = time.monotonic()
        # id -> (name, email) as last acknowledged, or None once deleted.
        self.acked = {i: (f"n{i % 50}", f"{i}@x") for i in range(filled)}
        # ids a writer tried and was not told the outcome of: any of their values.
        self.unsure = {}
        self.lock = threading.Lock()
        self.when = {}
        self.errors = []
        self.counts = {"sql": 0, "txn": 0, "txn_1213": 0, "prepared": 0, "memcached": 0,
                       "dup_1062": 0, "dup_refused": 0, "retried": 0, "reconnected": 0}

    def going(self):
        if self.crash:
            # At most about 100 writes a second each: a target copying at a bounded
            # rate catches up.
            time.sleep(0.01)
        moved = os.path.join(self.flags, "moved")
        if time.monotonic() - self.began > AT_MOST:
            return False
        if os.path.exists(moved):
            return time.time() - os.path.getmtime(moved) < STOP_AFTER_MOVED
        return True

    def ack(self, i, value):
        with self.lock:
            self.acked[i] = value
            self.unsure.pop(i, None)

    def maybe(self, i, value):
        with self.lock:
            self.unsure.setdefault(i, []).append(value)

    def fail(self, what):
        with self.lock:
            self.errors.append(what)

    def count(self, what):
        with self.lock:
            self.counts[what] += 1

    def lost(self, e):
        """Whether `e` is a server gone away, which a crash run rides out."""
        if not self.crash:
            return False
        if isinstance(e, (pymysql.err.OperationalError, pymysql.err.InterfaceError,
                          mysql.connector.errors.OperationalError,
                          mysql.connector.errors.InterfaceError,
                          OSError, pymemcache.exceptions.MemcacheError)):
            return True
        code = getattr(e, "errno", None) or (e.args[0] if getattr(e, "args", None) else None)
        # 1180: made on a primary whose replica did not confirm it in time.
        return code in (1105, 1180, 2006, 2013)

    def again(self, make):
        """A new connection by `make`, once the server is back (None: time is up)."""
        self.count("reconnected")
        time.sleep(0.05)
        while self.going():
            try:
                return make()
            except Exception:  # noqa: BLE001 - down still: try again
                time.sleep(0.1)
        return None

    def sql_autocommit(self, a):
        conn = connect(a)
        rng = random.Random(1)
        next_id = 100_000
        while self.going():
            kind = rng.random()
            try:
                if kind < 0.4:
                    i = next_id
                    next_id += 1
                    value = (f"n{i % 50}", f"{i}@x")
                    self.maybe(i, value)
                    rows(conn, "INSERT INTO players (id, name, email) VALUES (%s, %s, %s)",
                         (i, *value))
                    self.ack(i, value)
                elif kind < 0.7 and next_id > 100_000:
                    i = rng.randrange(100_000, next_id)
                    value = (f"n{rng.randrange(50)}", f"{i}.{rng.randrange(10**9)}@x")
                    self.maybe(i, value)
                    n = conn.cursor().execute(
                        "UPDATE players SET name = %s, email = %s WHERE id = %s", (*value, i))
                    if n == 1:
                        self.ack(i, value)
                    else:
                        with self.lock:
                            self.unsure[i].pop()
                elif kind < 0.8 and next_id > 100_000:
                    i = rng.randrange(100_000, next_id)
                    self.maybe(i, None)
                    rows(conn, "DELETE FROM players WHERE id = %s", (i,))
                    self.ack(i, None)
                else:
                    # Another row's email: refused, before and after the move.
                    try:
                        rows(conn, "INSERT INTO players (id, name, email) VALUES (%s, 'd', %s)",
                             (900_000 + rng.randrange(10_000), f"{rng.randrange(100)}@x"))
                        self.fail("an insert of a taken email was made")
                    except pymysql.err.IntegrityError as e:
                        if e.args[0] != 1062:
                            raise
                        self.count("dup_1062")
                self.count("sql")
            except pymysql.err.MySQLError as e:
                if self.lost(e):
                    conn = self.again(lambda: connect(a))
                    if conn is None:
                        return
                    continue
                self.fail(f"autocommit through A: {e}")
                return

    def sql_transactions(self, b):
        conn = connect(b)
        rng = random.Random(2)
        next_id = 200_000
        while self.going():
            i = next_id
            next_id += 1
            old = rng.randrange(100, 1000)
            inserted = (f"n{i % 50}", f"{i}@x")
            updated = (f"t{rng.randrange(50)}", f"{old}.{i}@x")
            self.maybe(i, inserted)
            self.maybe(old, updated)
            began = time.time()
            try:
                rows(conn, "BEGIN")
                rows(conn, "UPDATE players SET name = %s, email = %s WHERE id = %s",
                     (*updated, old))
                rows(conn, "INSERT INTO players (id, name, email) VALUES (%s, %s, %s)",
                     (i, *inserted))
                rows(conn, "COMMIT")
                self.when[i] = (began, time.time())
                self.ack(i, inserted)
                self.ack(old, updated)
                self.count("txn")
            except pymysql.err.MySQLError as e:
                if self.lost(e):
                    # Made or not: both stay possible.
                    conn = self.again(lambda: connect(b))
                    if conn is None:
                        return
                    continue
                if e.args[0] != 1213:
                    self.fail(f"a transaction through B: {e}")
                    return
                # Rolled back whole: neither change is made.
                self.count("txn_1213")
                with self.lock:
                    self.unsure[i].pop()
                    self.unsure[old].pop()
                try:
                    rows(conn, "ROLLBACK")
                except pymysql.err.MySQLError:
                    pass

    def prepared(self, a):
        host, port = a.rsplit(":", 1)
        conn = mysql.connector.connect(host=host, port=int(port), user="app",
                                       password="secret", database="kura", autocommit=True)
        cursor = conn.cursor(prepared=True)
        rng = random.Random(3)
        while self.going():
            i = rng.randrange(1000, 1500)
            with self.lock:
                email = self.acked[i][1]
            value = (f"p{rng.randrange(50)}", email)
            self.maybe(i, value)
            try:
                cursor.execute("UPDATE players SET name = %s WHERE id = %s", (value[0], i))
                self.ack(i, value)
                self.count("prepared")
            except mysql.connector.Error as e:
                # A statement prepared on a before the table moved: refused after it,
                # never made (docs/cluster.md).
                if e.errno in (1412, 1146):
                    with self.lock:
                        self.unsure[i].pop()
                    self.count("retried")
                    cursor.close()
                    cursor = conn.cursor(prepared=True)
                    continue
                if self.lost(e):
                    conn = self.again(lambda: mysql.connector.connect(
                        host=host, port=int(port), user="app", password="secret",
                        database="kura", autocommit=True))
                    if conn is None:
                        return
                    cursor = conn.cursor(prepared=True)
                    continue
                self.fail(f"a prepared statement through A: {e}")
                return

    def memcached_sets(self, am):
        client = memcached(am)
        rng = random.Random(4)
        next_id = 300_000
        while self.going():
            try:
                if rng.random() < 0.5:
                    i = next_id
                    next_id += 1
                else:
                    i = rng.randrange(1500, 2000)
                value = (f"m{rng.randrange(50)}", f"{i}.{rng.randrange(10**9)}@x")
                self.maybe(i, value)
                if client.set(f"@@players.{i}", f"{value[0]}|{value[1]}".encode()):
                    self.ack(i, value)
                else:
                    self.fail(f"set @@players.{i} not stored")
                    return
                if rng.random() < 0.05:
                    if client.set(f"@@players.{950_000 + i % 1000}", f"d|{rng.randrange(100)}@x".encode()):
                        self.fail("a memcached set of a taken email was made")
                    self.count("dup_refused")
                self.count("memcached")
            except Exception as e:  # noqa: BLE001 - a refusal is a failed check
                if self.lost(e):
                    client = self.again(lambda: memcached(am))
                    if client is None:
                        return
                    continue
                self.fail(f"memcached through AM: {e!r}")
                return


def main(a, b, am, bm, flags, filled, mode="live"):
    w = Writers(flags, int(filled), mode == "crash")
    threads = [
        threading.Thread(target=w.sql_autocommit, args=(a,)),
        threading.Thread(target=w.sql_transactions, args=(b,)),
        threading.Thread(target=w.prepared, args=(a,)),
        threading.Thread(target=w.memcached_sets, args=(am,)),
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    open(os.path.join(flags, "started"), "w").close()
    for t in threads:
        t.join()
    if w.errors:
        sys.exit("writers: " + "; ".join(w.errors[:5]))
    if not os.path.exists(os.path.join(flags, "moved")):
        sys.exit("the table was never moved")
    print("writers:", w.counts)

    for name, address in (("through b", b), ("through a", a)):
        conn = connect(address)
        got = {r[0]: (r[1], r[2]) for r in rows(conn, "SELECT id, name, email FROM players")}
        wrong = [i for i, value in w.acked.items()
                 if got.get(i) not in [value] + w.unsure.get(i, [])]
        if wrong:
            i = wrong[0]
            sys.exit(f"{name}: {len(wrong)} rows not as acknowledged ({wrong[:20]}...): "
                     f"row {i} is {got.get(i)!r}, acknowledged {w.acked[i]!r} "
                     f"(or one of {w.unsure.get(i, [])!r}); "
                     f"times {[w.when.get(j) for j in wrong[:4]]}")
        for i in got:
            if i not in w.acked and i not in w.unsure:
                sys.exit(f"{name}: row {i}, which no one wrote")
        emails = [e for (_, e) in got.values()]
        check(f"{name}: emails are unique", len(set(emails)), len(emails))
        check(f"{name}: no email twice (SQL)",
              rows(conn, "SELECT email FROM players GROUP BY email HAVING COUNT(*) > 1"), [])
        sample = random.Random(5).sample(sorted(got), 200)
        for i in sample:
            check(f"{name}: row {i} by its email",
                  rows(conn, "SELECT id FROM players WHERE email = %s", (got[i][1],)), [(i,)])
        by_name = {}
        for i, (n, _) in got.items():
            by_name.setdefault(n, []).append(i)
        for n in ("n7", "m3", "t4", "p5"):
            check(f"{name}: rows named {n} through the name index",
                  sorted(r[0] for r in rows(conn, "SELECT id FROM players WHERE name = %s", (n,))),
                  sorted(by_name.get(n, [])))
        taken = got[sample[0]][1]
        try:
            rows(conn, "INSERT INTO players (id, name, email) VALUES (999999, 'd', %s)", (taken,))
            sys.exit(f"{name}: a duplicate email was inserted after the move")
        except pymysql.err.IntegrityError as e:
            check(f"{name}: a duplicate email after the move", e.args[0], 1062)
    for address in (am, bm):
        client = memcached(address)
        i = sample[1]
        check(f"@@players_by_email through {address}",
              client.get(f"@@players_by_email.{got[i][1]}"), f"{i}|{got[i][0]}".encode())
        check(f"a duplicate email through {address}",
              client.set(f"@@players.{999_998}", f"d|{got[i][1]}".encode()), False)
    print(f"table moved under writers: {len(got)} rows, every acknowledged write there")


if __name__ == "__main__":
    main(*sys.argv[1:])
