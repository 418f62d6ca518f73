"""Transactions through real clients against a running Kura.

Usage: transactions.py CASE SQL_PORT MEMCACHED_PORT [MARIADB_PORT] [--seed N]

Cases:
  lost_update    B reads a row in a transaction, A (autocommit) increments it, B writes
                 it and commits: B's COMMIT must answer 1213 and A's update stays;
                 a phantom in a range read counts under SERIALIZABLE only.
  locking_reads  SELECT ... FOR UPDATE / FOR SHARE / LOCK IN SHARE MODE / NOWAIT are
                 accepted and checked at COMMIT; SKIP LOCKED is refused (1235).
  model_sql      four threads of BEGIN / SELECT v (by key or by a scan) / UPDATE v+1 and
                 a ledger row / COMMIT, retrying on 1213: each counter ends at the commits acknowledged for
                 it, and the ledger holds exactly the acknowledged transactions.
  model_mixed    the same with a fifth thread doing 60 memcached gets / cas (v+1) on
                 the same rows through @@counters.<id>.
  found_rows     CLIENT_FOUND_ROWS: rows affected of UPDATEs (same value, new value,
                 no row) with and without the flag, compared with MariaDB's.
  sqlalchemy     SQLAlchemy's ORM flushes an UPDATE that sets a row to what it holds.

Exits non-zero with the failing check. Randomised cases print their seed.
"""
import random
import sys
import threading

import pymemcache.client.base
import pymysql
from pymysql.constants import CLIENT

args = [a for a in sys.argv[1:] if not a.startswith("--")]
seed = None
if "--seed" in sys.argv:
    seed = int(sys.argv[sys.argv.index("--seed") + 1])
    args.remove(str(seed))
case, sql_port, mc_port = args[0], int(args[1]), int(args[2])
mariadb_port = int(args[3]) if len(args) > 3 else None
if seed is None:
    seed = random.randrange(1 << 32)


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


def connect(port=sql_port, **kw):
    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", database="kura", autocommit=True, **kw
    )


def error_code(f):
    try:
        f()
    except pymysql.err.MySQLError as e:
        return e.args[0]
    return None


def players(db):
    c = db.cursor()
    c.execute("DROP TABLE IF EXISTS players")
    c.execute(
        "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, "
        "level INT NOT NULL, KEY level (level))"
    )
    c.execute("INSERT INTO players VALUES (1, 'ann', 5), (2, 'bob', 7), (3, 'cy', 5)")


def lost_update():
    a, b = connect(), connect()
    players(a)
    ca, cb = a.cursor(), b.cursor()
    cb.execute("BEGIN")
    cb.execute("SELECT level FROM players WHERE id = 1")
    check(cb.fetchall(), ((5,),), "B reads")
    ca.execute("UPDATE players SET level = level + 1 WHERE id = 1")
    check(ca.rowcount, 1, "A's update")
    cb.execute("UPDATE players SET level = 10 WHERE id = 1")
    check(error_code(lambda: cb.execute("COMMIT")), 1213, "B's COMMIT")
    ca.execute("SELECT level FROM players WHERE id = 1")
    check(ca.fetchall(), ((6,),), "A's update stays")
    # PyMySQL's default (autocommit off): the transaction starts at the SELECT.
    c = pymysql.connect(host="127.0.0.1", port=sql_port, user="root", database="kura")
    cc = c.cursor()
    cc.execute("SELECT level FROM players WHERE id = 2")
    check(cc.fetchall(), ((7,),), "autocommit-off read")
    ca.execute("UPDATE players SET level = level + 1 WHERE id = 2")
    cc.execute("UPDATE players SET level = 10 WHERE id = 2")
    check(error_code(c.commit), 1213, "autocommit-off commit")
    ca.execute("SELECT level FROM players WHERE id = 2")
    check(ca.fetchall(), ((8,),), "A's second update stays")
    # Under READ COMMITTED (the default) a plain SELECT's range is not checked, as
    # InnoDB's consistent read locks nothing; under SERIALIZABLE it sees a row
    # inserted into it.
    cb.execute("BEGIN")
    cb.execute("SELECT COUNT(*) FROM players WHERE level BETWEEN 5 AND 6")
    check(cb.fetchall(), ((2,),), "B counts a range")
    ca.execute("INSERT INTO players VALUES (4, 'di', 5)")
    cb.execute("UPDATE players SET level = 7 WHERE id = 2")
    cb.execute("COMMIT")
    cb.execute("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE")
    cb.execute("BEGIN")
    cb.execute("SELECT COUNT(*) FROM players WHERE level BETWEEN 5 AND 6")
    check(cb.fetchall(), ((3,),), "B counts a range")
    ca.execute("INSERT INTO players VALUES (5, 'ed', 5)")
    cb.execute("UPDATE players SET name = 'two' WHERE id = 3")
    check(error_code(lambda: cb.execute("COMMIT")), 1213, "COMMIT after a phantom")
    ca.execute("SELECT name FROM players WHERE id = 3")
    check(ca.fetchall(), (("cy",),), "nothing of B's applied")


def locking_reads():
    a, b = connect(), connect()
    players(a)
    ca, cb = a.cursor(), b.cursor()
    for suffix in ["FOR UPDATE", "FOR SHARE", "LOCK IN SHARE MODE", "FOR UPDATE NOWAIT"]:
        cb.execute("BEGIN")
        cb.execute(f"SELECT level FROM players WHERE id = 3 {suffix}")
        check(cb.fetchall(), ((5,),), f"{suffix}: read")
        ca.execute("UPDATE players SET level = level + 1 WHERE id = 3")
        cb.execute("UPDATE players SET level = 100 WHERE id = 3")
        check(error_code(lambda: cb.execute("COMMIT")), 1213, f"{suffix}: COMMIT")
        ca.execute("UPDATE players SET level = 5 WHERE id = 3")
        # Unchanged meanwhile, it commits.
        cb.execute("BEGIN")
        cb.execute(f"SELECT level FROM players WHERE id = 3 {suffix}")
        cb.execute("UPDATE players SET level = level WHERE id = 3")
        cb.execute("COMMIT")
    # A locking read alone is checked at COMMIT too.
    cb.execute("BEGIN")
    cb.execute("SELECT level FROM players WHERE id = 1 FOR UPDATE")
    ca.execute("UPDATE players SET level = 50 WHERE id = 1")
    check(error_code(lambda: cb.execute("COMMIT")), 1213, "locking read alone")
    code = error_code(lambda: cb.execute("SELECT level FROM players FOR UPDATE SKIP LOCKED"))
    check(code, 1235, "SKIP LOCKED")


def model(mixed):
    rng = random.Random(seed)
    print(f"model seed {seed}", flush=True)
    setup = connect()
    c = setup.cursor()
    c.execute("DROP TABLE IF EXISTS counters")
    c.execute("DROP TABLE IF EXISTS ledger")
    c.execute("CREATE TABLE counters (id INT PRIMARY KEY, v INT NOT NULL)")
    c.execute("CREATE TABLE ledger (id INT PRIMARY KEY, counter INT NOT NULL)")
    rows = [1, 2, 3]
    c.execute("INSERT INTO counters VALUES (1, 0), (2, 0), (3, 0)")
    per_thread = 50
    acked = {r: 0 for r in rows}
    acked_mc = {r: 0 for r in rows}
    retries = [0]
    missed = [0]
    lock = threading.Lock()
    failures = []
    # Each transaction reads its counter by key, or by a scan of the table (`id + 0`
    # is no key), which every write to the table then conflicts with.
    reads = [
        "SELECT v FROM counters WHERE id = %s",
        "SELECT v FROM counters WHERE id + 0 = %s",
    ]
    plans = [
        [(rng.choice(rows), reads[rng.random() < 0.2]) for _ in range(per_thread)]
        for _ in range(4)
    ]
    mc_target = 60

    def sql_worker(n):
        try:
            db = pymysql.connect(host="127.0.0.1", port=sql_port, user="root", database="kura")
            cur = db.cursor()
            for i, (row, read) in enumerate(plans[n]):
                while True:
                    try:
                        cur.execute(read, (row,))
                        found = cur.fetchone()
                        if found is None:
                            # A scan can miss a row a writer moves while it reads the
                            # log: the transaction's COMMIT must then be refused.
                            with lock:
                                missed[0] += 1
                            cur.execute("INSERT INTO ledger VALUES (%s, -1)", (-1 - n,))
                            db.commit()
                            failures.append(f"sql worker {n}: committed after missing row {row}")
                            return
                        (v,) = found
                        cur.execute("UPDATE counters SET v = %s WHERE id = %s", (v + 1, row))
                        cur.execute(
                            "INSERT INTO ledger VALUES (%s, %s)", (n * 100000 + i, row)
                        )
                        db.commit()
                        break
                    except pymysql.err.OperationalError as e:
                        if e.args[0] != 1213:
                            raise
                        with lock:
                            retries[0] += 1
                        db.rollback()
                with lock:
                    acked[row] += 1
        except Exception as e:  # reported by the main thread
            failures.append(f"sql worker {n}: {e!r}")

    stop = threading.Event()

    def mc_worker():
        try:
            mc = pymemcache.client.base.Client(("127.0.0.1", mc_port), default_noreply=False)
            mrng = random.Random(seed + 1)
            # A bounded number: while it writes, a transaction that scanned the table
            # commits only between two of its writes.
            while not stop.is_set() and sum(acked_mc.values()) < mc_target:
                row = mrng.choice(rows)
                key = f"@@counters.{row}"
                value, cas = mc.gets(key)
                if mc.cas(key, str(int(value) + 1).encode(), cas):
                    with lock:
                        acked_mc[row] += 1
        except Exception as e:
            failures.append(f"memcached worker: {e!r}")

    threads = [threading.Thread(target=sql_worker, args=(n,)) for n in range(4)]
    mc_thread = threading.Thread(target=mc_worker) if mixed else None
    if mc_thread:
        mc_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    if mc_thread:
        mc_thread.join()
    if failures:
        raise SystemExit("\n".join(failures))
    c.execute("SELECT id, v FROM counters ORDER BY id")
    final = dict(c.fetchall())
    c.execute("SELECT counter, COUNT(*) FROM ledger GROUP BY counter ORDER BY counter")
    ledger = dict(c.fetchall())
    want = {r: acked[r] + acked_mc[r] for r in rows}
    print(
        f"model: {sum(acked.values())} SQL commits, {sum(acked_mc.values())} memcached cas, "
        f"{retries[0]} retries on 1213 ({missed[0]} after a scan missed the row), "
        f"counters {final}",
        flush=True,
    )
    check(final, want, f"counters (seed {seed}) against acknowledged increments")
    check(ledger, {r: acked[r] for r in rows if acked[r]}, f"ledger rows (seed {seed})")
    if mixed:
        check(sum(acked_mc.values()) > 0, True, "memcached wrote the rows too")


def found_rows():
    results = {}
    boot = pymysql.connect(host="127.0.0.1", port=mariadb_port, user="root")
    boot.cursor().execute("CREATE DATABASE IF NOT EXISTS kura")
    for name, port in [("kura", sql_port), ("mariadb", mariadb_port)]:
        plain = connect(port)
        flagged = connect(port, client_flag=CLIENT.FOUND_ROWS)
        players(plain)
        out = []
        for label, db in (("without FOUND_ROWS", plain), ("with FOUND_ROWS", flagged)):
            cur = db.cursor()
            for sql in [
                "UPDATE players SET level = 5 WHERE id = 1",
                "UPDATE players SET level = 6 WHERE id = 1",
                "UPDATE players SET level = 5 WHERE level BETWEEN 5 AND 6",
                "UPDATE players SET level = level WHERE id IN (1, 2, 3)",
                "UPDATE players SET level = 9 WHERE id = 99",
                "INSERT INTO players VALUES (1, 'ann', 5) ON DUPLICATE KEY UPDATE level = 5",
                "INSERT INTO players VALUES (1, 'ann', 5) ON DUPLICATE KEY UPDATE level = 8",
            ]:
                cur.execute(sql)
                out.append((f"{label}: {sql}", cur.rowcount))
            cur.execute("BEGIN")
            cur.execute("UPDATE players SET level = level WHERE id = 2")
            out.append((f"{label}: the same in a transaction", cur.rowcount))
            cur.execute("COMMIT")
            cur.execute("UPDATE players SET level = 5 WHERE id = 1")
        results[name] = out
    print(f"found_rows: kura {results['kura']}\nmariadb {results['mariadb']}", flush=True)
    for (sql, got), (_, want) in zip(results["kura"], results["mariadb"]):
        check(got, want, f"rows affected by {sql!r} (kura, mariadb)")


def sqlalchemy():
    from sqlalchemy import Integer, String, create_engine
    from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

    class Base(DeclarativeBase):
        pass

    class Player(Base):
        __tablename__ = "players"
        id: Mapped[int] = mapped_column(Integer, primary_key=True)
        name: Mapped[str] = mapped_column(String(32))
        level: Mapped[int] = mapped_column(Integer)

    players(connect())
    engine = create_engine(f"mysql+pymysql://root@127.0.0.1:{sql_port}/kura")
    with Session(engine) as session:
        p = session.get(Player, 1)
        # Set to what it holds through a column expression: the ORM writes the row and
        # checks that the UPDATE matched it.
        p.level = Player.level + 0
        session.commit()
        p = session.get(Player, 3)
        p.level = 11
        session.commit()
    with Session(engine) as session:
        check(session.get(Player, 3).level, 11, "sqlalchemy update")
        check(session.get(Player, 1).level, 5, "sqlalchemy unchanged update")


{
    "lost_update": lost_update,
    "locking_reads": locking_reads,
    "model_sql": lambda: model(False),
    "model_mixed": lambda: model(True),
    "found_rows": found_rows,
    "sqlalchemy": sqlalchemy,
}[case]()
print(f"{case}: ok")
