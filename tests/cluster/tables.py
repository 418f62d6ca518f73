"""Tables placed on shards, through the clients users run.

Usage: tables.py CASE ARGS...

Cases:
  sql A B A2 AM BM  A, B: the SQL ports of shard a's and b's primaries; A2: shard
                    a's replica's SQL port; AM, BM: the memcached ports of a's and b's
                    primaries. Table `players` was created through A (so lives on a),
                    `scores` through B. As user `app` (a password), through B:
                    players' rows written and read (on a), a duplicate unique key
                    refused with 1062, transactions committed and rolled back there,
                    SET and USE carried along; a statement or transaction over both
                    shards refused with 1235 and nothing of it made; prepared
                    statements (mysql-connector) on players run on a, in a
                    transaction too, and one over both shards refused; CREATE
                    TABLE players refused as existing (1050). Through A2: scores (on b) read and written.
                    Through memcached: `@@players.<id>` set and read through BM,
                    `@@scores.<id>` through AM, each landing on its table's shard.

  lost B FLAGS       Through B: BEGIN and an UPDATE of players (the transaction runs on
                    a), then FLAGS/begun is made and FLAGS/killed awaited (a's primary
                    SIGKILLed meanwhile, its replica taking over): the next statement
                    gets 1105 and the transaction's change is not on a.

Exits non-zero with the failing check.
"""
import os
import sys
import time

import mysql.connector
import pymemcache.client.base
import pymysql


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def connect(address, user="app", password="secret"):
    host, port = address.rsplit(":", 1)
    return pymysql.connect(
        host=host, port=int(port), user=user, password=password, database="kura",
        autocommit=True,
    )


def rows(conn, sql, args=None):
    with conn.cursor() as c:
        c.execute(sql, args)
        return [tuple(r) for r in c.fetchall()]


def refused(conn, sql, code):
    try:
        rows(conn, sql)
    except pymysql.err.MySQLError as e:
        check(f"{sql}: error code", e.args[0], code)
        return e.args[1]
    sys.exit(f"{sql}: no error, want {code}")


def memcached(address):
    host, port = address.rsplit(":", 1)
    return pymemcache.client.base.Client((host, int(port)), timeout=10, default_noreply=False)


def sql(a, b, a2, am, bm):
    on_a, on_b = connect(a), connect(b)
    # Rows of players (on a) written through b, read back through both.
    for i in range(1, 21):
        rows(on_b, "INSERT INTO players (id, name, email) VALUES (%s, %s, %s)",
             (i, f"p{i}", f"p{i}@x"))
    want = [(i, f"p{i}", f"p{i}@x") for i in range(1, 21)]
    check("players through b", rows(on_b, "SELECT id, name, email FROM players ORDER BY id"), want)
    check("players on a", rows(on_a, "SELECT id, name, email FROM players ORDER BY id"), want)
    # The unique index holds, through b: the row and its entry are one write on a.
    message = refused(on_b, "INSERT INTO players (id, name, email) VALUES (99, 'x', 'p3@x')", 1062)
    check("1062 names the entry", "p3@x" in message, True)
    check("no row 99", rows(on_a, "SELECT COUNT(*) FROM players WHERE id = 99"), [(0,)])
    # A transaction through b runs whole on a.
    rows(on_b, "BEGIN")
    rows(on_b, "UPDATE players SET name = 'renamed' WHERE id = 1")
    rows(on_b, "INSERT INTO players (id, name, email) VALUES (21, 'p21', 'p21@x')")
    check("read inside", rows(on_b, "SELECT name FROM players WHERE id = 1"), [("renamed",)])
    check("not yet on a", rows(on_a, "SELECT COUNT(*) FROM players WHERE id = 21"), [(0,)])
    rows(on_b, "COMMIT")
    check("committed on a", rows(on_a, "SELECT name FROM players WHERE id IN (1, 21) ORDER BY id"),
          [("renamed",), ("p21",)])
    rows(on_b, "START TRANSACTION")
    rows(on_b, "DELETE FROM players WHERE id = 21")
    rows(on_b, "ROLLBACK")
    check("rolled back", rows(on_a, "SELECT COUNT(*) FROM players WHERE id = 21"), [(1,)])
    # pymysql's own transactions (autocommit off, commit()).
    off = connect(b)
    off.autocommit(False)
    rows(off, "UPDATE players SET name = 'by-commit' WHERE id = 2")
    check("uncommitted", rows(on_a, "SELECT name FROM players WHERE id = 2"), [("p2",)])
    off.commit()
    check("commit()", rows(on_a, "SELECT name FROM players WHERE id = 2"), [("by-commit",)])
    rows(off, "UPDATE players SET name = 'not-kept' WHERE id = 2")
    off.rollback()
    check("rollback()", rows(on_a, "SELECT name FROM players WHERE id = 2"), [("by-commit",)])
    off.close()
    # SET and USE go along.
    rows(on_b, "SET @want = 3")
    check("@want on a", rows(on_b, "SELECT name FROM players WHERE id = @want"), [("p3",)])
    rows(on_b, "USE kura")
    check("after USE", rows(on_b, "SELECT COUNT(*) FROM players"), [(21,)])
    # Over both shards: refused, nothing made.
    rows(on_b, "INSERT INTO scores (id, points) VALUES (1, 10)")
    refused(on_b, "SELECT * FROM players JOIN scores ON players.id = scores.id", 1235)
    rows(on_b, "BEGIN")
    rows(on_b, "INSERT INTO scores (id, points) VALUES (2, 20)")
    message = refused(on_b, "INSERT INTO players (id, name, email) VALUES (30, 'a', 'a@x')", 1235)
    check("1235 names the shard", "shard a" in message, True)
    rows(on_b, "ROLLBACK")
    check("score 2 rolled back", rows(on_b, "SELECT COUNT(*) FROM scores"), [(1,)])
    check("player 30 not made", rows(on_a, "SELECT COUNT(*) FROM players WHERE id = 30"), [(0,)])
    rows(on_b, "BEGIN")
    rows(on_b, "INSERT INTO players (id, name, email) VALUES (31, 'b', 'b@x')")
    refused(on_b, "UPDATE scores SET points = 0", 1235)
    rows(on_b, "COMMIT")
    check("player 31 made", rows(on_a, "SELECT COUNT(*) FROM players WHERE id = 31"), [(1,)])
    check("scores kept", rows(on_b, "SELECT points FROM scores"), [(10,)])
    # Prepared statements (mysql-connector's server-side ones) on players, through b:
    # prepared and run on a; in a transaction too; over both shards, refused.
    host, port = b.rsplit(":", 1)
    prepared = mysql.connector.connect(
        host=host, port=int(port), user="app", password="secret", database="kura",
        autocommit=True,
    )
    cursor = prepared.cursor(prepared=True)
    cursor.execute("SELECT name, email FROM players WHERE id = %s", (4,))
    check("prepared select", [tuple(r) for r in cursor.fetchall()], [("p4", "p4@x")])
    cursor.execute("SELECT name FROM players WHERE id = %s", (5,))
    check("prepared again", [tuple(r) for r in cursor.fetchall()], [("p5",)])
    prepared.start_transaction()
    cursor.execute("UPDATE players SET name = %s WHERE id = %s", ("prep", 6))
    check("not yet on a", rows(on_a, "SELECT name FROM players WHERE id = 6"), [("p6",)])
    prepared.commit()
    check("prepared commit", rows(on_a, "SELECT name FROM players WHERE id = 6"), [("prep",)])
    try:
        cursor.execute("SELECT * FROM players JOIN scores ON players.id = scores.id WHERE players.id = %s", (1,))
        sys.exit("a prepared statement over both shards was not refused")
    except mysql.connector.Error as e:
        check("prepared over both shards", e.errno, 1235)
    # A transaction that wrote here through a prepared statement cannot move on.
    prepared.start_transaction()
    cursor.execute("INSERT INTO scores (id, points) VALUES (%s, %s)", (50, 5))
    plain = prepared.cursor()
    try:
        plain.execute("UPDATE players SET name = 'x' WHERE id = 7")
        sys.exit("a transaction that wrote scores on b went on to players on a")
    except mysql.connector.Error as e:
        check("a prepared write here, then another shard", e.errno, 1235)
    prepared.rollback()
    check("score 50 rolled back", rows(on_b, "SELECT COUNT(*) FROM scores WHERE id = 50"), [(0,)])
    check("player 7 kept", rows(on_a, "SELECT name FROM players WHERE id = 7"), [("p7",)])
    plain.close()
    cursor.close()
    prepared.close()
    # The name is a's: CREATE TABLE through b goes there.
    refused(on_b, "CREATE TABLE players (id INT PRIMARY KEY)", 1050)
    # Through a's replica (its connection passed on to a's primary): scores, on b.
    on_a2 = connect(a2)
    rows(on_a2, "INSERT INTO scores (id, points) VALUES (3, 30)")
    check("scores through a2", rows(on_a2, "SELECT id, points FROM scores ORDER BY id"),
          [(1, 10), (3, 30)])
    # memcached's table keys go to their table's shard.
    through_b, through_a = memcached(bm), memcached(am)
    check("@@players.4 through b", through_b.get("@@players.4"), b"p4|p4@x")
    check("set @@players.40 through b", through_b.set("@@players.40", b"forty|40@x"), True)
    check("players 40 on a", rows(on_a, "SELECT name, email FROM players WHERE id = 40"),
          [("forty", "40@x")])
    check("@@players_by_email through b", through_b.get("@@players_by_email.p5@x"), b"5|p5")
    check("set @@scores.4 through a", through_a.set("@@scores.4", b"40"), True)
    check("scores 4 on b", rows(on_b, "SELECT points FROM scores WHERE id = 4"), [(40,)])
    check("@@scores.1 through a", through_a.get("@@scores.1"), b"10")
    print("tables on shards: ok")


def lost(b, flags):
    conn = connect(b)
    rows(conn, "BEGIN")
    rows(conn, "UPDATE players SET name = 'lost' WHERE id = 8")
    open(os.path.join(flags, "begun"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(flags, "killed")):
        if time.monotonic() > deadline:
            sys.exit("a's primary was never killed")
        time.sleep(0.05)
    try:
        rows(conn, "UPDATE players SET name = 'lost' WHERE id = 9")
        rows(conn, "COMMIT")
        sys.exit("a transaction went on after the primary it ran on failed over")
    except pymysql.err.MySQLError as e:
        check("the lost transaction's next statement", e.args[0], 1105)
    fresh = connect(b)
    check("player 8 as before", rows(fresh, "SELECT name FROM players WHERE id IN (8, 9)"),
          [("p8",), ("p9",)])
    print("a transaction on a failed-over primary: lost there, 1105")


if __name__ == "__main__":
    case, args = sys.argv[1], sys.argv[2:]
    {"sql": sql, "lost": lost}[case](*args)
