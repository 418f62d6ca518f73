"""AUTO_INCREMENT against MariaDB's, through PyMySQL.

Usage: auto_increment.py CASE KURA_SQL_PORT [MEMCACHED_PORT] [MARIADB_PORT]

Cases:
  agrees      one transcript sent to both servers (database `kura` on Kura, `mysql` on
              MariaDB): inserts leaving the column out, NULL, 0 and explicit values,
              several rows at once, INSERT IGNORE, REPLACE, ON DUPLICATE KEY UPDATE, a
              rolled-back transaction, LAST_INSERT_ID(), 0 kept under sql_mode's
              NO_AUTO_VALUE_ON_ZERO, the type's end (167) and a
              table whose auto column is not a key (1075). Each statement's rows
              affected, cursor.lastrowid (the OK packet's insert id), rows and error
              code must be the same.
  concurrent  on Kura: eight connections insert 150 rows each at once; every row gets
              its own id and each connection's LAST_INSERT_ID() is its own last id.
              Then a row written through memcached with id 5000 moves the next id past it.
  restarted   on Kura, after the server was killed and started again: the next id is
              one past the highest row (5001).

Exits non-zero with the failing check.
"""
import sys
import threading

import pymemcache.client.base

from peer import check, compare, connect, run, verdict


TRANSCRIPT = [
    "DROP TABLE IF EXISTS ai",
    "DROP TABLE IF EXISTS ov",
    "DROP TABLE IF EXISTS big",
    "CREATE TABLE ai (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT)",
    "INSERT INTO ai (v) VALUES (1)",
    "SELECT LAST_INSERT_ID()",
    "INSERT INTO ai (v) VALUES (2),(3),(4)",
    "SELECT LAST_INSERT_ID()",
    "INSERT INTO ai (id, v) VALUES (10, 5)",
    "SELECT LAST_INSERT_ID()",
    "INSERT INTO ai (id, v) VALUES (0, 6), (NULL, 7)",
    "INSERT INTO ai VALUES (NULL, 8)",
    "INSERT INTO ai (id, v) VALUES (5, 9)",
    "INSERT INTO ai (v) VALUES (10)",
    "INSERT INTO ai (id, v) VALUES (1, 11)",
    "INSERT INTO ai (v) VALUES (12)",
    "UPDATE ai SET v = 0 WHERE id = 1",
    "SELECT LAST_INSERT_ID()",
    "INSERT INTO ai (id, v) VALUES (NULL, 13) ON DUPLICATE KEY UPDATE v = 99",
    "INSERT INTO ai (id, v) VALUES (1, 13) ON DUPLICATE KEY UPDATE v = 99",
    "REPLACE INTO ai (id, v) VALUES (NULL, 14)",
    "INSERT IGNORE INTO ai (id, v) VALUES (1, 15)",
    "INSERT IGNORE INTO ai (id, v) VALUES (NULL, 15)",
    "BEGIN",
    "INSERT INTO ai (v) VALUES (16)",
    "ROLLBACK",
    "INSERT INTO ai (v) VALUES (17)",
    "INSERT INTO ai (id, v) VALUES (40, 18), (41, 19)",
    "INSERT INTO ai (v) SELECT v + 100 FROM ai WHERE id < 4",
    "SELECT * FROM ai ORDER BY id",
    "SELECT LAST_INSERT_ID(), LAST_INSERT_ID() + 1",
    # mysqldump's files restore a row whose id is 0 so.
    "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'",
    "INSERT INTO ai (id, v) VALUES (0, 20)",
    "SET sql_mode = DEFAULT",
    "INSERT INTO ai (id, v) VALUES (0, 21)",
    "SELECT * FROM ai WHERE v >= 20 ORDER BY id",
    "CREATE TABLE ov (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT)",
    "INSERT INTO ov VALUES (2147483646, 1)",
    "INSERT INTO ov (v) VALUES (2)",
    "INSERT INTO ov (v) VALUES (3)",
    "SELECT * FROM ov ORDER BY id",
    "CREATE TABLE big (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, v INT NOT NULL PRIMARY KEY, KEY (id))",
    "INSERT INTO big (v) VALUES (1), (2)",
    "INSERT INTO big (id, v) VALUES (100, 3)",
    "INSERT INTO big (v) VALUES (4)",
    "SELECT * FROM big ORDER BY v",
    "CREATE TABLE nk (id INT NOT NULL AUTO_INCREMENT, v INT, PRIMARY KEY (v))",
    "DROP TABLE IF EXISTS ai",
    "DROP TABLE IF EXISTS ov",
    "DROP TABLE IF EXISTS big",
]


def agrees(kura_port, mariadb_port):
    kura = connect(kura_port, "kura")
    mariadb = connect(mariadb_port, "mysql")
    outcome = lambda conn, s: run(conn, s, lastrowid=True)
    verdict(compare(kura, mariadb, TRANSCRIPT, outcome), len(TRANSCRIPT))


def concurrent(kura_port, memcached_port):
    setup = connect(kura_port, "kura")
    cur = setup.cursor()
    cur.execute("DROP TABLE IF EXISTS seq")
    cur.execute(
        "CREATE TABLE seq (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, who INT NOT NULL)"
    )
    threads, per = 8, 150
    ids = [[] for _ in range(threads)]
    last = [None] * threads
    errors = []

    def insert(t):
        try:
            conn = connect(kura_port, "kura")
            c = conn.cursor()
            for _ in range(per):
                c.execute("INSERT INTO seq (who) VALUES (%s)", (t,))
                ids[t].append(c.lastrowid)
            c.execute("SELECT LAST_INSERT_ID()")
            last[t] = c.fetchone()[0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    workers = [threading.Thread(target=insert, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    check("errors", errors, [])
    every = [i for each in ids for i in each]
    check("distinct ids", len(set(every)), threads * per)
    for t in range(threads):
        check(f"connection {t}'s LAST_INSERT_ID()", last[t], ids[t][-1])
    cur.execute("SELECT id, who FROM seq")
    rows = dict(cur.fetchall())
    check("rows", len(rows), threads * per)
    for t in range(threads):
        for i in ids[t]:
            check(f"row {i}'s writer", rows.get(i), t)
    # A row written through memcached with an explicit id: the next id is past it.
    mc = pymemcache.client.base.Client(("127.0.0.1", memcached_port))
    check("memcached set", mc.set("@@seq.5000", b"9", noreply=False), True)
    cur.execute("INSERT INTO seq (who) VALUES (10)")
    check("the id after memcached's row", cur.lastrowid, 5001)
    print(f"{len(every)} concurrent ids distinct; memcached's row moved the next id")


def restarted(kura_port):
    cur = connect(kura_port, "kura").cursor()
    cur.execute("INSERT INTO seq (who) VALUES (11)")
    check("the id after a restart", cur.lastrowid, 5002)
    cur.execute("SELECT max(id), count(*) FROM seq")
    check("rows after the restart", cur.fetchone(), (5002, 8 * 150 + 3))
    print("the next id after a restart follows the highest row")


case, port = sys.argv[1], int(sys.argv[2])
if case == "agrees":
    agrees(port, int(sys.argv[3]))
elif case == "concurrent":
    concurrent(port, int(sys.argv[3]))
elif case == "restarted":
    restarted(port)
else:
    sys.exit(f"unknown case {case}")
