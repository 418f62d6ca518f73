"""Real MySQL drivers and a memcached client on the same rows of a running Kura.

Usage: clients.py SQL_PORT MEMCACHED_PORT. Exits non-zero (with the failing check)
on the first difference from what MySQL would answer.
"""
import decimal
import sys

import mysql.connector
import pymemcache.client.base
import pymysql

sql_port, mc_port = int(sys.argv[1]), int(sys.argv[2])


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


# PyMySQL: autocommit off by default, so writes need COMMIT, as against MySQL.
db = pymysql.connect(host="127.0.0.1", port=sql_port, user="root", database="kura")
cur = db.cursor()
cur.execute(
    "CREATE TABLE drivers (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, "
    "email VARCHAR(64), score DOUBLE, UNIQUE KEY email (email), KEY score (score))"
)
cur.executemany(
    "INSERT INTO drivers (id, name, email, score) VALUES (%s, %s, %s, %s)",
    [(1, "ann", "ann@x.com", 1.5), (2, "bob", "bob@x.com", 2.25), (3, "cy", None, None)],
)
check(cur.rowcount, 3, "pymysql executemany rowcount")
db.commit()
cur.execute("SELECT name, score FROM drivers WHERE email = %s", ("bob@x.com",))
check(cur.fetchall(), (("bob", 2.25),), "pymysql select by email")
try:
    cur.execute("INSERT INTO drivers (id, name, email) VALUES (4, 'dup', 'ann@x.com')")
    raise SystemExit("pymysql: duplicate email accepted")
except pymysql.err.IntegrityError as e:
    check(e.args[0], 1062, "pymysql duplicate code")
db.rollback()

# mysql-connector-python with server-side prepared statements (the binary protocol).
cn = mysql.connector.connect(host="127.0.0.1", port=sql_port, user="root", database="kura")
pc = cn.cursor(prepared=True)
pc.execute("SELECT id, name, score FROM drivers WHERE id = ?", (2,))
check(pc.fetchall(), [(2, "bob", 2.25)], "connector prepared select")
pc.execute("UPDATE drivers SET score = ? WHERE id = ?", (9.75, 1))
check(pc.rowcount, 1, "connector prepared update rowcount")
cn.commit()
pc.execute("SELECT id FROM drivers WHERE score BETWEEN ? AND ? ORDER BY score", (2.0, 10.0))
check(pc.fetchall(), [(2,), (1,)], "connector prepared range")
pc.execute("SELECT COUNT(*), MAX(id) FROM drivers", ())
check(pc.fetchall(), [(3, 3)], "connector prepared aggregate")

# DECIMAL through the binary protocol: a Decimal parameter, and the exact value back
# as a Decimal with the column's scale.
pc.execute("CREATE TABLE ledger (id INT PRIMARY KEY, amount DECIMAL(12,2))", ())
pc.execute("INSERT INTO ledger VALUES (?, ?), (?, ?)", (1, decimal.Decimal("1234567.5"), 2, "0.005"))
cn.commit()
pc.execute("SELECT id, amount FROM ledger WHERE amount > ? ORDER BY id", (decimal.Decimal("0.001"),))
rows = [(i, str(a)) for i, a in pc.fetchall()]
check(rows, [(1, "1234567.50"), (2, "0.01")], "connector prepared DECIMAL")

# memcached and SQL on the same rows, both ways.
mc = pymemcache.client.base.Client(("127.0.0.1", mc_port))
check(mc.get("@@drivers.1"), b"ann|ann@x.com|9.75", "memcached reads a row SQL wrote")
check(mc.get("@@drivers_by_email.bob@x.com"), b"2|bob|2.25", "memcached reads through the index")
check(mc.set("@@drivers.7", b"gus|gus@x.com|7", noreply=False), True, "memcached set")
cur.execute("SELECT name, score FROM drivers WHERE id = 7")
check(cur.fetchall(), (("gus", 7.0),), "SQL reads a row memcached wrote")
cur.execute("SELECT _flags, _exptime FROM drivers WHERE id = 7")
check(cur.fetchall(), ((0, 0),), "SQL reads the item's flags and exptime")
# pymemcache sends noreply by default: wait for the reply, or the SELECT may race it.
check(mc.delete("@@drivers.7", noreply=False), True, "memcached delete")
cur.execute("SELECT COUNT(*) FROM drivers WHERE id = 7")
check(cur.fetchall(), ((0,),), "SQL no longer sees a row memcached deleted")
# A query of more than 16 MiB spans several protocol frames; the reply follows the last.
big = pymysql.connect(host="127.0.0.1", port=sql_port, user="root", max_allowed_packet=64 << 20)
bc = big.cursor()
bc.execute("SELECT LENGTH(%s)", ("x" * (17 << 20),))
check(bc.fetchall(), ((17 << 20,),), "a 17 MiB query")
print("clients: ok")
