"""MySQL statements beyond SELECT/INSERT that tools and ORMs send, against MariaDB's.

Usage: statements.py KURA_SQL_PORT MARIADB_PORT

One transcript to both (Kura's database `kura`, MariaDB's `st`): UPDATE and DELETE
with ORDER BY and LIMIT, UPDATE of a join, DELETE of one table of a join, RENAME
TABLE (and a name taken, 1050), TRUNCATE TABLE (and AUTO_INCREMENT starting again),
TINYINT, SMALLINT, MEDIUMINT (signed and unsigned) and BOOL at their ends and
past them (1264); DROP INDEX and ALTER TABLE DROP KEY (the unique value free
after, 1091 for none); DATE, DATETIME(p) and TIMESTAMP read in MySQL's forms,
refused when no calendar has them (1292), compared as times and kept in order,
DEFAULT and ON UPDATE CURRENT_TIMESTAMP; SQL_CALC_FOUND_ROWS and FOUND_ROWS();
ALTER TABLE CHANGE, MODIFY and RENAME COLUMN to wider types and new names, DROP
COLUMN; ENUM (members, their order, 1265, 1291, 1067, its wire type); DECIMAL
(exact text, rounding, 1264, 1366, order, keys of it, its wire type); DEFAULT in
VALUES, and 1364 for a NOT NULL column with no default left to it;
SHOW WARNINGS and SHOW COUNT(*) WARNINGS after an error (its
level and code); SHOW ENGINES (InnoDB the default); SHOW TABLE STATUS, SHOW CHARACTER SET, SHOW COLLATION, SHOW
CREATE DATABASE (their
first columns; the rest are each server's own); several statements in one query
(CLIENT_MULTI_STATEMENTS), to the first error. Rows affected, rows and error codes
must be the same.

Exits non-zero with the failing check.
"""
import decimal
import sys

import pymysql
from pymysql.constants import CLIENT

from peer import check, compare, connect, mariadb_database, run, verdict

TRANSCRIPT = [
    "DROP TABLE IF EXISTS s1",
    "DROP TABLE IF EXISTS s2",
    "DROP TABLE IF EXISTS s3",
    "CREATE TABLE s1 (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT, w VARCHAR(10), KEY v (v))",
    "INSERT INTO s1 (v, w) VALUES (10, 'a'), (20, 'b'), (30, 'c'), (40, 'd'), (50, 'e')",
    "CREATE TABLE s2 (id INT PRIMARY KEY, x INT)",
    "INSERT INTO s2 VALUES (1, 100), (3, 300), (5, 500)",
    "UPDATE s1 SET v = v + 1 ORDER BY id DESC LIMIT 2",
    "UPDATE s1 SET w = 'z' WHERE v < 40 ORDER BY v LIMIT 1",
    "SELECT * FROM s1 ORDER BY id",
    "DELETE FROM s1 ORDER BY v DESC LIMIT 1",
    "DELETE FROM s1 WHERE w <> 'z' ORDER BY id LIMIT 1",
    "SELECT * FROM s1 ORDER BY id",
    "UPDATE s1 JOIN s2 ON s1.id = s2.id SET s1.v = s2.x WHERE s2.x < 400",
    "UPDATE s1 AS a INNER JOIN s2 AS b ON a.id = b.id SET a.w = 'j'",
    "SELECT * FROM s1 ORDER BY id",
    "DELETE s1 FROM s1 JOIN s2 ON s1.id = s2.id WHERE s2.x > 200",
    "DELETE FROM a USING s1 AS a JOIN s2 AS b ON a.id = b.id",
    "SELECT * FROM s1 ORDER BY id",
    "INSERT INTO s1 (v, w) VALUES ('x', 'y')",
    "SHOW COUNT(*) WARNINGS",
    "RENAME TABLE s2 TO s3",
    "SELECT * FROM s3 ORDER BY id",
    "SELECT * FROM s2",
    "CREATE TABLE s2 (id INT PRIMARY KEY)",
    "RENAME TABLE s2 TO s3",
    "RENAME TABLE nosuch TO s4",
    "TRUNCATE TABLE s1",
    "SELECT count(*) FROM s1",
    "INSERT INTO s1 (v, w) VALUES (1, 'again')",
    "SELECT * FROM s1",
    "TRUNCATE s3",
    "SELECT count(*) FROM s3",
    "DROP TABLE s1, s2, s3",
    # Integer types a ported schema uses.
    "CREATE TABLE ints (id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, t TINYINT,"
    " s SMALLINT, su SMALLINT UNSIGNED, m MEDIUMINT, mu MEDIUMINT UNSIGNED, b BOOL,"
    " bb BOOLEAN NOT NULL DEFAULT 0, KEY s (s))",
    "INSERT INTO ints (t, s, su, m, mu, b) VALUES (-128, -32768, 65535, -8388608, 16777215, TRUE)",
    "INSERT INTO ints (t, s, su, m, mu, b) VALUES (127, 32767, 0, 8388607, 0, FALSE)",
    "INSERT INTO ints (t) VALUES (128)",
    "INSERT INTO ints (su) VALUES (-1)",
    "INSERT INTO ints (m) VALUES (8388608)",
    "INSERT INTO ints (s) VALUES (40000)",
    "SELECT * FROM ints ORDER BY id",
    "SELECT id FROM ints WHERE s BETWEEN -40000 AND 0",
    "SELECT COLUMN_NAME, DATA_TYPE, NUMERIC_PRECISION FROM information_schema.COLUMNS"
    " WHERE TABLE_NAME = 'ints' AND TABLE_SCHEMA = DATABASE() ORDER BY ORDINAL_POSITION",
    "DROP TABLE ints",
    # Dates and times.
    "CREATE TABLE ev (id INT PRIMARY KEY, d DATE, at DATETIME NOT NULL, ms DATETIME(3),"
    " ts TIMESTAMP NULL, KEY at (at))",
    "INSERT INTO ev VALUES (1, '2024-02-29', '2024-02-29 23:59:59', '2024-02-29 23:59:59.123456',"
    " '2024-03-01 00:00:00')",
    "INSERT INTO ev VALUES (2, '2024-1-5', '2024-01-05T10:20', '2024-01-05 10:20:30', NULL)",
    "INSERT INTO ev VALUES (3, 20231231, 20231231235959, '2023-12-31', '1999-12-31 12:00:00')",
    "INSERT INTO ev VALUES (4, '2023-02-29', '2024-01-01 00:00:00', NULL, NULL)",
    "INSERT INTO ev VALUES (5, '2024-01-01', '2024-13-01 00:00:00', NULL, NULL)",
    "INSERT INTO ev VALUES (6, '2024-01-01', 'soon', NULL, NULL)",
    "INSERT INTO ev VALUES (7, '2024-01-01', '2024-01-01', NULL, '1969-01-01 00:00:00')",
    "SELECT * FROM ev ORDER BY at",
    "SELECT id FROM ev WHERE at BETWEEN '2024-01-01' AND '2024-02-29 23:59:59' ORDER BY id",
    "SELECT id FROM ev WHERE at >= '2024-01-05 10:20:00' ORDER BY at DESC",
    "SELECT id FROM ev WHERE d = '2024-01-05'",
    "SELECT id FROM ev WHERE at = '2024-01-05 10:20'",
    "SELECT id, d < '2024-01-01' FROM ev ORDER BY id",
    "SELECT CAST(MIN(at) AS CHAR), CAST(MAX(d) AS CHAR) FROM ev",
    "DROP TABLE ev",
    "CREATE TABLE tsd (id INT PRIMARY KEY, v INT, created DATETIME NOT NULL DEFAULT"
    " CURRENT_TIMESTAMP, updated TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE"
    " CURRENT_TIMESTAMP)",
    "INSERT INTO tsd (id, v) VALUES (1, 1), (2, 2)",
    "SELECT id, created > '2020-01-01', updated > '2020-01-01', created <= NOW() FROM tsd ORDER BY id",
    "UPDATE tsd SET updated = '2001-01-01 00:00:00'",
    "UPDATE tsd SET v = v WHERE id = 1",
    "UPDATE tsd SET v = 5 WHERE id = 2",
    "SELECT id, v, updated > '2020-01-01' FROM tsd ORDER BY id",
    "ALTER TABLE tsd ADD COLUMN seen DATETIME DEFAULT '2024-01-01 00:00:00'",
    "SELECT DISTINCT seen FROM tsd",
    "DROP TABLE tsd",
    # Dropping indexes, as migrations do.
    "CREATE TABLE di (id INT PRIMARY KEY, email VARCHAR(20), lvl INT, UNIQUE KEY email (email),"
    " KEY lvl (lvl))",
    "INSERT INTO di VALUES (1, 'a@x', 5), (2, 'b@x', 7), (3, 'c@x', 5)",
    "INSERT INTO di VALUES (4, 'a@x', 1)",
    "DROP INDEX email ON di",
    "INSERT INTO di VALUES (4, 'a@x', 1)",
    "SELECT id FROM di WHERE email = 'a@x' ORDER BY id",
    "ALTER TABLE di DROP KEY lvl",
    "SELECT id FROM di WHERE lvl BETWEEN 4 AND 6 ORDER BY id",
    "DROP INDEX lvl ON di",
    "ALTER TABLE di DROP INDEX nosuch",
    "CREATE UNIQUE INDEX email ON di (email)",
    "CREATE INDEX lvl ON di (lvl)",
    "SELECT id FROM di WHERE lvl = 5 ORDER BY id",
    # FOUND_ROWS(): what the last SELECT returned, or would have without its LIMIT.
    "SELECT SQL_CALC_FOUND_ROWS id FROM di WHERE lvl > 1 ORDER BY id LIMIT 2",
    "SELECT FOUND_ROWS()",
    "SELECT FOUND_ROWS()",
    "SELECT SQL_CALC_FOUND_ROWS id FROM di ORDER BY id DESC LIMIT 1 OFFSET 1",
    "SELECT FOUND_ROWS()",
    "SELECT id FROM di WHERE id < 3",
    "SELECT FOUND_ROWS()",
    "DROP TABLE di",
]

# Columns changed in place, as migrations change them: each ALTER's outcome alone
# (MariaDB copies the table and counts its rows as affected; Kura rewrites none),
# and the rows and column types after.
ALTER_COLUMNS = [
    "CREATE TABLE ac (id INT PRIMARY KEY, n SMALLINT, s VARCHAR(5), t VARCHAR(10), u INT UNSIGNED,"
    " KEY n (n))",
    "INSERT INTO ac VALUES (1, 7, 'abc', NULL, 3), (2, -5, 'xy', 'q', 4)",
    "ALTER TABLE ac MODIFY n INT",
    "ALTER TABLE ac MODIFY COLUMN s VARCHAR(20) NOT NULL DEFAULT 'z'",
    "ALTER TABLE ac CHANGE s label VARCHAR(30)",
    "ALTER TABLE ac RENAME COLUMN label TO tag",
    "ALTER TABLE ac RENAME COLUMN nosuch TO x",
    "ALTER TABLE ac CHANGE tag n INT",
    "ALTER TABLE ac MODIFY nosuch INT",
    "ALTER TABLE ac MODIFY n BIGINT",
    "ALTER TABLE ac MODIFY u BIGINT UNSIGNED",
    "ALTER TABLE ac CHANGE COLUMN t t TEXT",
    "SELECT * FROM ac ORDER BY id",
    "SELECT id FROM ac WHERE n = -5",
    "INSERT INTO ac (id, n, t) VALUES (3, 5000000000, 'w')",
    "SELECT * FROM ac ORDER BY id",
    "SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE FROM information_schema.COLUMNS"
    " WHERE TABLE_NAME = 'ac' AND TABLE_SCHEMA = DATABASE() ORDER BY ORDINAL_POSITION",
    "DROP TABLE ac",
    # A DECIMAL to more digits of the same scale, its index kept.
    "CREATE TABLE ad (id INT PRIMARY KEY, m DECIMAL(6,2), KEY m (m))",
    "INSERT INTO ad VALUES (1, 1234.5), (2, -0.25)",
    "INSERT INTO ad VALUES (3, 12345678.9)",
    "ALTER TABLE ad MODIFY m DECIMAL(10,2)",
    "INSERT INTO ad VALUES (3, 12345678.9)",
    "SELECT * FROM ad ORDER BY m",
    "SELECT id FROM ad WHERE m > 1000 ORDER BY id",
    "DROP TABLE ad",
    # Columns dropped (with their indexes), rows written before and after, a column
    # added after.
    "CREATE TABLE dc (id INT PRIMARY KEY, a VARCHAR(5), b INT, c VARCHAR(8), e INT,"
    " UNIQUE KEY c (c), KEY b (b))",
    "INSERT INTO dc VALUES (1, 'x', 10, 'c1', 100), (2, 'y', 20, 'c2', 200)",
    "ALTER TABLE dc DROP COLUMN b",
    "SELECT * FROM dc ORDER BY id",
    "INSERT INTO dc VALUES (3, 'z', 'c3', 300)",
    "ALTER TABLE dc DROP COLUMN nosuch",
    "ALTER TABLE dc DROP COLUMN IF EXISTS nosuch",
    "ALTER TABLE dc ADD COLUMN f INT DEFAULT 7",
    "ALTER TABLE dc DROP a, DROP COLUMN c",
    "INSERT INTO dc VALUES (4, 400, 8)",
    "INSERT INTO dc VALUES (5, 'x', 'y', 9)",
    "SELECT * FROM dc ORDER BY id",
    "SELECT id FROM dc WHERE e > 150 ORDER BY id",
    "SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_NAME = 'dc'"
    " AND TABLE_SCHEMA = DATABASE()",
    "ALTER TABLE dc ADD COLUMN c VARCHAR(8)",
    "UPDATE dc SET c = 'again' WHERE id = 1",
    "SELECT * FROM dc ORDER BY id",
    "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_NAME = 'dc'"
    " AND TABLE_SCHEMA = DATABASE() ORDER BY ORDINAL_POSITION",
    "DROP TABLE dc",
]


def outcome_alone(conn, statement):
    """An ALTER's outcome without its rows affected; any other statement's in full."""
    out = run(conn, statement)
    if statement.startswith("ALTER") and out[0] == "ok":
        return ("ok",)
    return out


# ENUM: members matched under the column's collation and stored as declared, a
# number as a member's place, anything else 1265; ordered by the members' places;
# 1291 for a member twice, 1067 for a DEFAULT that is none. Each result's column
# types are compared too (an ENUM is a string on the wire).
ENUMS = [
    "DROP TABLE IF EXISTS e1",
    "DROP TABLE IF EXISTS e2",
    "CREATE TABLE e1 (id INT PRIMARY KEY, st ENUM('new','active','gone') NOT NULL"
    " DEFAULT 'new', sz ENUM('S','M','L'), KEY st (st))",
    "INSERT INTO e1 (id, st, sz) VALUES (1, 'active', 'M'), (2, 'gone', 'S'), (3, 'new', NULL),"
    " (4, 'ACTIVE', 'l')",
    "INSERT INTO e1 (id) VALUES (5)",
    "INSERT INTO e1 (id, st) VALUES (8, 2)",
    "INSERT INTO e1 (id, st) VALUES (6, 'lost')",
    "INSERT INTO e1 (id, st) VALUES (7, '')",
    "INSERT INTO e1 (id, st) VALUES (9, 0)",
    "INSERT INTO e1 (id, st) VALUES (10, 4)",
    "SELECT * FROM e1 ORDER BY id",
    "SELECT id, st FROM e1 ORDER BY st, id",
    "SELECT id, st FROM e1 ORDER BY st DESC, id",
    "SELECT id FROM e1 WHERE st = 'active' ORDER BY id",
    "SELECT id FROM e1 WHERE st = 'Active' ORDER BY id",
    "SELECT id FROM e1 WHERE st IN ('new', 'gone') ORDER BY id",
    "SELECT id FROM e1 WHERE st > 'b' ORDER BY id",
    "SELECT st, count(*) FROM e1 GROUP BY st ORDER BY st",
    "SELECT DISTINCT sz FROM e1 ORDER BY sz",
    "SELECT concat(st, '!'), length(st) FROM e1 ORDER BY id",
    "UPDATE e1 SET st = 'gone' WHERE id = 1",
    "UPDATE e1 SET sz = 'XL' WHERE id = 2",
    "UPDATE e1 SET sz = 3 WHERE id = 3",
    "SELECT * FROM e1 ORDER BY id",
    "ALTER TABLE e1 MODIFY sz ENUM('S','M','L','XL')",
    "UPDATE e1 SET sz = 'xl' WHERE id = 2",
    "SELECT * FROM e1 ORDER BY sz, id",
    "SHOW COLUMNS FROM e1 LIKE 'st'",
    "SELECT COLUMN_TYPE, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS"
    " WHERE TABLE_NAME = 'e1' AND COLUMN_NAME <> 'id' ORDER BY ORDINAL_POSITION",
    "CREATE TABLE e2 (id INT PRIMARY KEY, x ENUM('a','b','a'))",
    "CREATE TABLE e2 (id INT PRIMARY KEY, x ENUM('a','A'))",
    "CREATE TABLE e2 (id INT PRIMARY KEY, x ENUM('a','b') DEFAULT 'c')",
    "CREATE TABLE e2 (id INT PRIMARY KEY, x ENUM('it''s','b') DEFAULT 'IT''S')",
    "INSERT INTO e2 VALUES (1, DEFAULT), (2, 'B')",
    "SELECT * FROM e2 ORDER BY id",
]


# DECIMAL: exact values with the column's scale (each compared as its text, with the
# wire type of a table's rows), rounded half away from zero past the scale, 1264
# past the precision, 1366 for text that is no number; compared and ordered as
# numbers, through an ordered index and a primary key of them; SHOW COLUMNS and
# information_schema; 1427 and 1426 for a type MySQL has not.
DECIMALS = [
    "DROP TABLE IF EXISTS m1",
    "DROP TABLE IF EXISTS m2",
    "CREATE TABLE m1 (id INT PRIMARY KEY, price DECIMAL(10,2) NOT NULL DEFAULT 9.99,"
    " qty DECIMAL(5), rate NUMERIC(6,4), KEY price (price))",
    "INSERT INTO m1 VALUES (1, 12.5, 3, 0.125), (2, '-0.05', NULL, NULL), (3, 1.005, 12345, -1)",
    "INSERT INTO m1 (id, qty) VALUES (4, 7)",
    "INSERT INTO m1 VALUES (5, 99999999.99, -99999, -99.9999)",
    "INSERT INTO m1 VALUES (6, 100000000, 1, 1)",
    "INSERT INTO m1 VALUES (7, 'abc', 1, 1)",
    "INSERT INTO m1 VALUES (8, 1.5e2, '1e3', '.5')",
    "INSERT INTO m1 VALUES (9, 1, 1, 99.99995)",
    "INSERT INTO m1 VALUES (10, '  3.14159 ', 2.5, 0.00005)",
    "INSERT INTO m1 VALUES (11, -1.005, -2.5, '-0.00004')",
    "SELECT * FROM m1 ORDER BY id",
    "SELECT id, price FROM m1 ORDER BY price, id",
    "SELECT id, price FROM m1 ORDER BY price DESC LIMIT 3",
    "SELECT id FROM m1 WHERE price = 12.50",
    "SELECT id FROM m1 WHERE price = '12.5'",
    "SELECT id FROM m1 WHERE price > 10 ORDER BY id",
    "SELECT id FROM m1 WHERE price BETWEEN 1 AND 13 ORDER BY id",
    "SELECT id FROM m1 WHERE price < 0.3 ORDER BY id",
    "SELECT id FROM m1 WHERE price >= 3.14 AND price <= 3.15",
    "SELECT id FROM m1 WHERE qty IS NULL",
    "SELECT id FROM m1 WHERE rate = 0.125",
    "SELECT SUM(price), MIN(price), MAX(price), AVG(price), COUNT(price) FROM m1",
    "SELECT qty, SUM(price) AS total, AVG(rate) FROM m1 GROUP BY qty ORDER BY qty",
    "SELECT SUM(m1.price) FROM m1 WHERE id > 100",
    "UPDATE m1 SET price = price + 1 WHERE id = 1",
    "UPDATE m1 SET price = 0.1 + 0.2 WHERE id = 2",
    "UPDATE m1 SET qty = qty * 100 WHERE id = 3",
    "SELECT * FROM m1 WHERE id IN (1, 2, 3) ORDER BY id",
    "CREATE TABLE m2 (code DECIMAL(12,3) PRIMARY KEY, note VARCHAR(10))",
    "INSERT INTO m2 VALUES (1.5, 'a'), (-2, 'b'), (123456789.123, 'c'), (0.001, 'd')",
    "INSERT INTO m2 VALUES (1.50, 'dup')",
    "SELECT * FROM m2 ORDER BY code",
    "SELECT note FROM m2 WHERE code = 1.5",
    "SELECT note FROM m2 WHERE code = '0.0010'",
    "SELECT note FROM m2 WHERE code IN (-2, 123456789.123) ORDER BY note",
    "UPDATE m2 SET note = 'z' WHERE code = 123456789.123",
    "DELETE FROM m2 WHERE code < 0",
    "SELECT * FROM m2 ORDER BY code DESC",
    "SHOW COLUMNS FROM m1 LIKE 'price'",
    "SHOW COLUMNS FROM m1 LIKE 'qty'",
    "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE"
    " FROM information_schema.COLUMNS WHERE TABLE_NAME = 'm1' AND TABLE_SCHEMA = DATABASE()"
    " AND COLUMN_NAME <> 'id' ORDER BY ORDINAL_POSITION",
    # Fifteen digits, Kura's most, read and written back whole by SQL.
    "DROP TABLE IF EXISTS m4",
    "CREATE TABLE m4 (code DECIMAL(15,2) PRIMARY KEY, big DECIMAL(15,5), note VARCHAR(5))",
    "INSERT INTO m4 VALUES (9999999999999.99, 1234567890.12345, 'a'), (-0.01, -0.00001, 'b'),"
    " ('-9999999999999.99', '-9999999999.99999', 'c')",
    "UPDATE m4 SET note = concat(note, '!')",
    "UPDATE m4 SET big = big WHERE code < 0",
    "SELECT * FROM m4 ORDER BY code",
    "SELECT note FROM m4 WHERE code = 9999999999999.99",
    "SELECT note FROM m4 WHERE big > 1234567890.12344 AND big < 1234567890.12346",
    "DROP TABLE m4",
    "CREATE TABLE m3 (id INT PRIMARY KEY, x DECIMAL(5,6))",
    "CREATE TABLE m3 (id INT PRIMARY KEY, x DECIMAL(66,2))",
]


def exact(conn, statement):
    """[`typed`], with each DECIMAL as its text (`Decimal('1.5')` equals
    `Decimal('1.50')`), and the wire type of every result's columns."""
    out = typed(conn, statement)
    if out[0] != "ok":
        return out
    # (information_schema's text columns have wire types of each server's own.)
    if statement.startswith("SELECT") and not statement.startswith("SELECT *") \
            and "information_schema" not in statement:
        cur = conn.cursor()
        cur.execute(statement)
        out = out + (tuple(d[1] for d in cur.description),)
    text = lambda v: str(v) if isinstance(v, decimal.Decimal) else v
    rows = [tuple(text(v) for v in row) for row in out[2]]
    return out[:2] + (rows,) + out[3:]


# DEFAULT as a value of INSERT's VALUES, and a NOT NULL column with no default left
# to it (1364).
DEFAULTS = [
    "DROP TABLE IF EXISTS d1",
    "CREATE TABLE d1 (id INT PRIMARY KEY AUTO_INCREMENT, n INT NOT NULL, d INT DEFAULT 5,"
    " s VARCHAR(5))",
    "INSERT INTO d1 VALUES (DEFAULT, 1, DEFAULT, DEFAULT)",
    "INSERT INTO d1 (n, d) VALUES (2, DEFAULT), (3, 7)",
    "INSERT INTO d1 VALUES (10, DEFAULT, DEFAULT, NULL)",
    "INSERT INTO d1 (id) VALUES (11)",
    "INSERT INTO d1 (n) VALUES (NULL)",
    "SELECT * FROM d1 ORDER BY id",
]


def typed(conn, statement):
    """The statement's outcome and, for a table's rows whole, each column's wire
    type."""
    out = run(conn, statement)
    if out[0] == "ok" and statement.startswith("SELECT * FROM"):
        cur = conn.cursor()
        cur.execute(statement)
        return out + (tuple(d[1] for d in cur.description),)
    return out


# Statements whose rows are compared by their first column alone.
FIRST_COLUMN = [
    "SHOW CHARACTER SET LIKE 'utf8mb4'",
    "SHOW COLLATION LIKE 'utf8mb4_bin'",
    "SHOW CREATE DATABASE {db}",
]


def main(kura_port, mariadb_port):
    kura = connect(kura_port, "kura")
    mariadb = mariadb_database(mariadb_port, "st")
    failed = compare(kura, mariadb, TRANSCRIPT)
    failed += compare(kura, mariadb, ALTER_COLUMNS, outcome_alone)
    failed += compare(kura, mariadb, ENUMS, typed)
    failed += compare(kura, mariadb, DECIMALS, exact)
    # Kura's own limits: a scale of 30 at most, as MySQL's (MariaDB's is 38), and 15
    # digits (MySQL's 65), which SQL's doubles keep exactly.
    # SQLite computes with a DECIMAL as a double, and an expression over one other
    # than an aggregate is a DOUBLE (docs/sql.md): 27.00 in MariaDB.
    check("DECIMAL in an expression", run(kura, "SELECT price * 2 FROM m1 WHERE id = 1"),
          ("ok", 1, [(27.0,)]))

    for ty, code in [("DECIMAL(40,31)", 1425), ("DECIMAL(16,2)", 1235)]:
        got = run(kura, f"CREATE TABLE m3 (id INT PRIMARY KEY, x {ty})")
        check(ty, got, ("error", code))
    failed += compare(kura, mariadb, DEFAULTS)
    # After an error: its level and code (the texts are each server's).
    for conn in (kura, mariadb):
        run(conn, "SELECT nosuchcol FROM nosuchtable")
    first_two = lambda conn, s: [r[:2] for r in run(conn, s)[2]]
    failed += compare(kura, mariadb, ["SHOW WARNINGS"], first_two)
    for statement in FIRST_COLUMN:
        k = run(kura, statement.format(db="kura"))
        m = run(mariadb, statement.format(db="st"))
        k, m = (k[0], [r[:1] for r in k[2]]), (m[0], [r[:1] for r in m[2]])
        if "{db}" in statement:
            # Each names its own database.
            k, m = (k[0], len(k[1])), (m[0], len(m[1]))
        if k != m:
            failed += 1
            print(f"{statement}\n  kura:    {k}\n  mariadb: {m}")
    # SHOW ENGINES: InnoDB, the default (each server lists engines of its own too).
    innodb = lambda conn, s: [r[:2] for r in run(conn, s)[2] if r[0] == "InnoDB"]
    failed += compare(kura, mariadb, ["SHOW ENGINES"], innodb)
    for conn in (kura, mariadb):
        run(conn, "CREATE TABLE s5 (id INT PRIMARY KEY)")
    failed += compare(kura, mariadb, ["SHOW TABLE STATUS LIKE 's5'"], first_two)
    # Several statements in one query, from a client that asks for them.
    multi = [
        "INSERT INTO s5 VALUES (1), (2); SELECT * FROM s5 ORDER BY id; UPDATE s5 SET id = id + 10;"
        " SELECT id, 'a;b' FROM s5 ORDER BY id",
        "SELECT 1; SELECT nosuchcol FROM s5; SELECT 3",
        "DELETE FROM s5; SELECT count(*) FROM s5 -- ; SELECT 4",
    ]
    k_conn = connect(kura_port, "kura", client_flag=CLIENT.MULTI_STATEMENTS)
    m_conn = connect(mariadb_port, "st", client_flag=CLIENT.MULTI_STATEMENTS)
    failed += compare(k_conn, m_conn, multi, results)
    total = len(TRANSCRIPT) + len(ALTER_COLUMNS) + len(ENUMS) + len(DECIMALS) + len(DEFAULTS)
    total += len(FIRST_COLUMN) + 3
    verdict(failed, total + len(multi))


def results(conn, query):
    """Every result of a multi-statement query, to its first error."""
    cur = conn.cursor()
    out = []
    try:
        cur.execute(query)
        while True:
            out.append((cur.rowcount, [tuple(r) for r in cur.fetchall()]))
            if not cur.nextset():
                break
    except pymysql.MySQLError as e:
        out.append(("error", e.args[0]))
    return out


main(int(sys.argv[1]), int(sys.argv[2]))
