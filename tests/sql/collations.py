"""Collations against MariaDB's: case-insensitive text (the default, as MariaDB's
`utf8mb4_general_ci`) and `utf8mb4_bin`, in keys, comparisons, order, LIKE and
the catalog, then the same rule through the memcached door.

Usage: collations.py load|check KURA_SQL_PORT MARIADB_PORT KURA_MEMCACHED_PORT

`load` makes the databases and tables in both servers and compares every
statement; `check` (after Kura restarts) compares the reads again, so the
collations outlive a restart. Each statement's rows (or error code) must be the
same in both; every difference is printed. Exits non-zero with the failing check.
"""
import socket
import sys

from peer import check, compare, connect, verdict

SETUP = [
    "DROP DATABASE IF EXISTS co",
    "CREATE DATABASE co CHARACTER SET utf8mb4",
    "DROP DATABASE IF EXISTS cb",
    "CREATE DATABASE cb COLLATE utf8mb4_bin",
]

LOAD = [
    # The database's default: case-insensitive, accents folded, trailing spaces not
    # counted; one column binary.
    "CREATE TABLE co.users (id INT PRIMARY KEY, email VARCHAR(64), name VARCHAR(32),"
    " nick VARCHAR(16) COLLATE utf8mb4_bin, note TEXT, UNIQUE KEY email (email), KEY name (name),"
    " KEY nick (nick))",
    "INSERT INTO co.users VALUES (1, 'Bob@X.com', 'bob', 'Bobby', 'First'),"
    " (2, 'alice@y.org', 'Alice', 'al', 'second'), (3, 'carol@z.net', '\u00c9clair', 'Cc', 'THIRD'),"
    " (4, 'dave@w.io', 'dave ', 'dd', 'fourth'), (5, 'erin@v.io', 'Zo\u00eb', 'ZZ', NULL)",
    "INSERT INTO co.users VALUES (6, 'BOB@x.COM', 'other', 'o', 'x')",
    "INSERT INTO co.users VALUES (6, 'frank@u.io', 'Bob', 'bobby', 'x')",
    "INSERT INTO co.users VALUES (7, 'Frank@U.io', 'frank', 'f', 'x') ON DUPLICATE KEY UPDATE name = 'dup'",
    "INSERT INTO co.users VALUES (8, 'FRANK@u.IO', 'frank', 'f', 'x') ON DUPLICATE KEY UPDATE name = 'Frank'",
    "UPDATE co.users SET note = 'changed' WHERE email = 'ALICE@Y.ORG'",
    "UPDATE co.users SET email = 'Alice@Y.org' WHERE id = 2",
    "UPDATE co.users SET email = 'bob@x.com' WHERE id = 2",
    "CREATE TABLE co.codes (code VARCHAR(8) PRIMARY KEY, v INT)",
    "INSERT INTO co.codes VALUES ('abc', 1), ('Abd', 2), ('\u00e9t\u00e9', 3)",
    "INSERT INTO co.codes VALUES ('ABC', 9)",
    "INSERT INTO co.codes VALUES ('abc ', 9)",
    "INSERT INTO co.codes VALUES ('ete', 9)",
    "REPLACE INTO co.codes VALUES ('ABD', 4)",
    "UPDATE co.codes SET code = 'ABC' WHERE code = 'abc'",
    "INSERT IGNORE INTO co.codes VALUES ('aBc', 5), ('x', 6)",
    "DELETE FROM co.codes WHERE code = 'X'",
    # A table of a binary database: its text compares as bytes unless it says so.
    "CREATE TABLE cb.words (w VARCHAR(16) PRIMARY KEY, ci VARCHAR(16) COLLATE utf8mb4_general_ci,"
    " UNIQUE KEY ci (ci))",
    "INSERT INTO cb.words VALUES ('apple', 'One'), ('Apple', 'two'), ('APPLE', 'three')",
    "INSERT INTO cb.words VALUES ('cherry', 'ONE')",
    "INSERT INTO cb.words VALUES ('banana', 'Two')",
    "INSERT INTO cb.words VALUES ('banana', 'three')",
    # Names MySQL does not know, and pairs that do not go together.
    "CREATE TABLE co.bad1 (s VARCHAR(4) COLLATE klingon_ci PRIMARY KEY)",
    "CREATE TABLE co.bad2 (s VARCHAR(4) CHARACTER SET latin1 COLLATE utf8mb4_bin PRIMARY KEY)",
    "CREATE TABLE co.bad3 (s VARCHAR(4) CHARACTER SET klingon PRIMARY KEY)",
    "CREATE DATABASE bad4 COLLATE klingon_ci",
]

READS = [
    "SELECT id, email FROM co.users ORDER BY id",
    "SELECT id FROM co.users WHERE email = 'bob@X.COM'",
    "SELECT id FROM co.users WHERE email IN ('CAROL@z.net', 'nobody', 'ALICE@y.org') ORDER BY id",
    "SELECT id, name FROM co.users ORDER BY name, id",
    "SELECT id, name FROM co.users ORDER BY name DESC, id",
    "SELECT id FROM co.users WHERE name = 'BOB' ORDER BY id",
    "SELECT id FROM co.users WHERE name = 'eclair'",
    "SELECT id FROM co.users WHERE name = 'dave'",
    "SELECT id FROM co.users WHERE name BETWEEN 'b' AND 'E' ORDER BY id",
    "SELECT id FROM co.users WHERE name > 'd' ORDER BY name, id",
    "SELECT id FROM co.users WHERE name < 'C' ORDER BY name DESC, id LIMIT 2",
    "SELECT id FROM co.users WHERE name LIKE 'B%' ORDER BY id",
    "SELECT id FROM co.users WHERE name LIKE '\u00e9c%' ORDER BY id",
    "SELECT id FROM co.users WHERE name NOT LIKE '%O%' ORDER BY id",
    "SELECT id FROM co.users WHERE email LIKE 'ALICE%'",
    "SELECT id FROM co.users WHERE note LIKE 'f%' ORDER BY id",
    "SELECT id FROM co.users WHERE note = 'third'",
    "SELECT id FROM co.users WHERE note REGEXP '^f' ORDER BY id",
    "SELECT id FROM co.users WHERE nick NOT REGEXP '^b' ORDER BY id",
    "SELECT id FROM co.users WHERE name LIKE 'b|%' ESCAPE '|' ORDER BY id",
    "SELECT id FROM co.users WHERE nick LIKE 'b%' ORDER BY id",
    "SELECT id FROM co.users WHERE nick = 'BOBBY'",
    "SELECT id, nick FROM co.users ORDER BY nick",
    "SELECT LOWER(name), COUNT(*) FROM co.users GROUP BY name ORDER BY name",
    "SELECT COUNT(DISTINCT name), COUNT(DISTINCT nick), COUNT(DISTINCT email) FROM co.users",
    "SELECT MIN(name), MAX(name), MIN(nick), MAX(nick) FROM co.users WHERE id < 6",
    "SELECT code, v FROM co.codes ORDER BY code",
    "SELECT v FROM co.codes WHERE code = 'ABD'",
    "SELECT v FROM co.codes WHERE code = 'ETE'",
    "SELECT v FROM co.codes WHERE code = 'abc   '",
    "SELECT code FROM co.codes WHERE code >= 'AB' AND code < 'ac' ORDER BY code",
    "SELECT w, ci FROM cb.words ORDER BY w",
    "SELECT w FROM cb.words WHERE w = 'APPLE'",
    "SELECT w FROM cb.words WHERE w LIKE 'a%'",
    "SELECT w FROM cb.words WHERE ci = 'one'",
    "SELECT COLUMN_NAME, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA IN ('co', 'cb') ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
    "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA IN ('co', 'cb') ORDER BY TABLE_NAME",
    "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM"
    " information_schema.SCHEMATA WHERE SCHEMA_NAME IN ('co', 'cb') ORDER BY SCHEMA_NAME",
    "SHOW CREATE DATABASE cb",
    "SHOW COLLATION LIKE 'utf8mb4_general_ci'",
    "SHOW CHARACTER SET LIKE 'utf8mb4'",
]


def memcached(port, commands):
    """Sends `commands` and `quit` to Kura's memcached port; returns the whole reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"".join(c + b"\r\n" for c in commands) + b"quit\r\n")
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return reply
            reply += chunk


def door(port):
    """The same rule through memcached: a row found by its key or unique value in
    another case, and a range in the collation's order."""
    got = memcached(
        port,
        [
            b"get @@co.codes.abd",
            b"get @@co.users_by_email.ALICE@y.ORG",
            b"get @@co.users_by_name.@>=A@<f",
            b"get @@cb.words.apple",
        ],
    )
    want = b"VALUE @@co.codes.abd 0 1\r\n4\r\nEND\r\nVALUE @@co.users_by_email.ALICE@y.ORG 0 "
    check("the memcached door finds rows in another case", got[: len(want)], want)
    check("the row found by its email in another case", got.split(b"\r\n")[4][:2], b"2|")
    rows = got.split(b"\r\n")
    order = [line for line in rows if line.startswith(b"@@co.users.")]
    check("a range through memcached in the collation's order", order,
          [b"@@co.users.2", b"@@co.users.1", b"@@co.users.4", b"@@co.users.3"])
    check("a binary key stays binary", got.count(b"@@cb.words.apple"), 1)


def main():
    step, kura_port, mariadb_port, memcached_port = sys.argv[1], *map(int, sys.argv[2:5])
    kura, mariadb = connect(kura_port), connect(mariadb_port)
    failed = total = 0
    if step == "load":
        for conn in (kura, mariadb):
            for statement in SETUP:
                conn.cursor().execute(statement)
        failed += compare(kura, mariadb, LOAD)
        total += len(LOAD)
    failed += compare(kura, mariadb, READS)
    total += len(READS)
    door(memcached_port)
    verdict(failed, total)


if __name__ == "__main__":
    main()
