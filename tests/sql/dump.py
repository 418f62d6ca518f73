"""mysqldump round trips: Debian's mariadb-dump and mariadb client, unchanged.

Usage: dump.py KURA_PORT FRESH_KURA_PORT MARIADB_PORT

- Rows of several types (AUTO_INCREMENT ids, text with quotes, backslashes and
  non-ASCII characters, bytes of every value in a BLOB, doubles, unsigned BIGINTs,
  NULLs, defaults, unique and ordered keys) in database `shop` of the first Kura are
  dumped with `mariadb-dump --databases shop` (its defaults: table locks, the
  tablespace queries, versioned comments, user variables, DISABLE KEYS), and the
  file is restored with the `mariadb` client into the fresh Kura and into MariaDB,
  without --force. Every table reads back the same in all three, and the fresh
  Kura's next AUTO_INCREMENT id follows the restored rows.
- A database made in MariaDB (its `int(11)`, `DEFAULT NULL`, `AUTO_INCREMENT=n`,
  latin1 tables) is dumped by mariadb-dump and restored into the fresh Kura, and
  reads back the same.

Exits non-zero with the failing check.
"""
import decimal
import subprocess
import sys

from peer import check, connect


def run(port, statements):
    cur = connect(port).cursor()
    for s in statements:
        cur.execute(s)


def rows(port, table):
    cur = connect(port).cursor()
    cur.execute(f"SELECT * FROM {table} ORDER BY 1")
    # A DECIMAL as its text: Decimal('1.5') equals Decimal('1.50').
    text = lambda v: str(v) if isinstance(v, decimal.Decimal) else v
    return [tuple(text(v) for v in r) for r in cur.fetchall()]


def dump(port, database):
    out = subprocess.run(
        ["mariadb-dump", "-h", "127.0.0.1", "-P", str(port), "-u", "root",
         "--databases", database],
        capture_output=True,
    )
    if out.returncode != 0:
        sys.exit(f"mariadb-dump of {database} on port {port}: {out.stderr.decode()}")
    return out.stdout


def restore(port, text, what):
    out = subprocess.run(
        ["mariadb", "-h", "127.0.0.1", "-P", str(port), "-u", "root"],
        input=text,
        capture_output=True,
    )
    if out.returncode != 0:
        sys.exit(f"restoring {what} on port {port}: {out.stderr.decode(errors='replace')[:2000]}")


SHOP = [
    "CREATE DATABASE shop",
    "CREATE TABLE shop.items (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " sku CHAR(8) NOT NULL, name VARCHAR(40) DEFAULT 'unnamed', price DOUBLE,"
    " stock BIGINT UNSIGNED NOT NULL DEFAULT 0, notes TEXT, total DECIMAL(12,2) NOT NULL DEFAULT 0.50,"
    " UNIQUE KEY sku (sku), KEY price (price))",
    "CREATE TABLE shop.blobs (k VARCHAR(10) PRIMARY KEY, b BLOB)",
]


def shop_rows(cur):
    cur.execute(
        "INSERT INTO shop.items (sku, name, price, stock, notes, total) VALUES "
        "('a1', 'it''s', 1.5, 18446744073709551, 'back\\\\slash', 9999999999.99),"
        "('b2', NULL, -0.25, 0, 'caf\u00e9 \u2603', -0.05),"
        "('c3', 'tab\\there', NULL, 7, NULL, 12.5)"
    )
    cur.execute("INSERT INTO shop.items (sku) VALUES ('d4')")
    cur.execute(
        "INSERT INTO shop.blobs VALUES (%s, %s), (%s, %s), (%s, NULL)",
        ("all", bytes(range(256)), "empty", b"", "none"),
    )


def main(kura, fresh, mariadb):
    run(kura, SHOP)
    shop_rows(connect(kura).cursor())
    text = dump(kura, "shop")
    for port, what in ((fresh, "the fresh Kura"), (mariadb, "MariaDB")):
        run(port, ["DROP DATABASE IF EXISTS shop"])
        restore(port, text, f"Kura's dump into {what}")
        for table in ("shop.items", "shop.blobs"):
            check(f"{table} in {what}", rows(port, table), rows(kura, table))
    cur = connect(fresh).cursor()
    cur.execute("INSERT INTO shop.items (sku) VALUES ('e5')")
    check("the next id after the restore", cur.lastrowid, 5)

    run(mariadb, [
        "DROP DATABASE IF EXISTS legacy",
        "CREATE DATABASE legacy",
        "CREATE TABLE legacy.users (id int(11) NOT NULL AUTO_INCREMENT, email varchar(64)"
        " DEFAULT NULL, level int(11) NOT NULL DEFAULT '1', balance decimal(10,2) DEFAULT '0.00',"
        " PRIMARY KEY (id),"
        " UNIQUE KEY email (email), KEY level (level)) ENGINE=InnoDB AUTO_INCREMENT=10"
        " DEFAULT CHARSET=latin1",
        "INSERT INTO legacy.users (email, level, balance) VALUES ('ann@x.com', 3, 12.34),"
        " (NULL, 1, NULL), ('o''brien@x.com', 2, -7)",
    ])
    restore(fresh, dump(mariadb, "legacy"), "MariaDB's dump into Kura")
    check("legacy.users in Kura", rows(fresh, "legacy.users"), rows(mariadb, "legacy.users"))
    print("dumps of Kura restore into Kura and MariaDB, and MariaDB's into Kura")


main(*(int(p) for p in sys.argv[1:4]))
