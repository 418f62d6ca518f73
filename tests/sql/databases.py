"""CREATE DATABASE, USE and DROP DATABASE against MariaDB's, through PyMySQL.

Usage: databases.py CASE KURA_SQL_PORT [MARIADB_PORT | MEMCACHED_PORT]

Cases:
  agrees     one transcript sent to both servers (each from its own first database):
             databases made, made again (1007), IF NOT EXISTS, CREATE SCHEMA;
             information_schema's tables; user variables; LOCK TABLES, DISABLE
             KEYS and SQL_NO_CACHE as mysqldump sends them; tables
             named with their database and alone after USE, a join across two of
             them, SHOW TABLES [FROM], DESCRIBE, SHOW INDEX; DROP DATABASE (rows
             affected: its tables), then no database selected (1046), 1008, 1049,
             1146 for a database that does not exist. Rows affected, rows (of
             DESCRIBE, the column names) and error codes must be the same.
  memcached  on Kura: a table of database `games` and one of the same name in `kura`,
             read and written through memcached as @@games.players.<id> and
             @@players.<id>, and through an index as @@games.players_by_email.<v>.
  restarted  on Kura, after the server was killed and started again: `games` and
             its rows are there, and a connection that asks for it at login gets it.

Exits non-zero with the failing check.
"""
import sys

import pymemcache.client.base

from peer import check, compare, connect, run, verdict


TRANSCRIPT = [
    "DROP DATABASE IF EXISTS d1",
    "DROP DATABASE IF EXISTS d2",
    "CREATE DATABASE d1",
    "CREATE DATABASE d1",
    "CREATE DATABASE IF NOT EXISTS d1",
    "CREATE SCHEMA IF NOT EXISTS d1",
    "CREATE DATABASE d2",
    "SHOW DATABASES LIKE 'd%'",
    "CREATE TABLE d1.t (id INT PRIMARY KEY, v INT, KEY v (v))",
    "CREATE TABLE d2.t (id INT PRIMARY KEY, w VARCHAR(10))",
    "INSERT INTO d1.t VALUES (1, 10), (2, 20), (3, 30)",
    "INSERT INTO d2.t VALUES (1, 'one'), (3, 'three')",
    "INSERT INTO d1.t VALUES (1, 99)",
    "SELECT * FROM d1.t ORDER BY id",
    "SELECT a.id, a.v, b.w FROM d1.t a JOIN d2.t b ON a.id = b.id ORDER BY a.id",
    "SHOW TABLES FROM d1",
    # information_schema, as mysqldump, ORMs and GUI clients read it.
    "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'd%'"
    " ORDER BY 1",
    "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA IN ('d1', 'd2') ORDER BY 1, 2",
    # (MariaDB's COLUMN_DEFAULT says 'NULL' where MySQL's, and Kura's, is NULL.)
    "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, IS_NULLABLE,"
    " DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, COLUMN_KEY, EXTRA FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA IN ('d1', 'd2') ORDER BY TABLE_SCHEMA, ORDINAL_POSITION",
    "SELECT INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME, NULLABLE FROM"
    " information_schema.STATISTICS WHERE TABLE_SCHEMA = 'd1' AND TABLE_NAME = 't'"
    " ORDER BY INDEX_NAME",
    "SELECT CONSTRAINT_NAME, COLUMN_NAME, ORDINAL_POSITION FROM"
    " information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = 'd2'",
    "SELECT CONSTRAINT_NAME, CONSTRAINT_TYPE FROM information_schema.TABLE_CONSTRAINTS"
    " WHERE TABLE_SCHEMA = 'd1'",
    "SELECT count(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = 'd1'",
    "SELECT count(*) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'd1'",
    # User variables, as mysqldump's files set and read them.
    "SET @a = 1, @b = 'two', @c = @@autocommit",
    "SELECT @a + 1, CONCAT(@b, '!'), @c, @unset",
    "SET @saved = @@unique_checks, unique_checks = 0",
    "SELECT @@unique_checks",
    "SET unique_checks = @saved",
    "SELECT @@unique_checks, @saved",
    "SET @x = (SELECT max(v) FROM d1.t)",
    "SELECT @x",
    "USE d1",
    # Table locks and key switches, accepted as mysqldump's files send them.
    "LOCK TABLES `t` WRITE, t AS t2 READ",
    "UNLOCK TABLES",
    "/*!40000 ALTER TABLE `t` DISABLE KEYS */",
    "/*!40000 ALTER TABLE d1.t ENABLE KEYS */",
    "LOCK TABLES nosuch READ",
    "UNLOCK TABLES",
    "SELECT /*!40001 SQL_NO_CACHE */ id FROM d1.t ORDER BY id",
    "SELECT DATABASE()",
    "SHOW TABLES",
    "SELECT * FROM t WHERE v BETWEEN 15 AND 35 ORDER BY v DESC",
    "UPDATE t SET v = v + 1 WHERE id = 1",
    "DELETE FROM t WHERE id = 2",
    "SELECT t.id, t.v, o.w FROM t LEFT JOIN d2.t o ON t.id = o.id ORDER BY t.id",
    "CREATE TABLE u (id INT PRIMARY KEY)",
    "INSERT INTO u VALUES (5)",
    "SHOW TABLES",
    "DESCRIBE d2.t",
    "SHOW COLUMNS FROM t FROM d2",
    "CREATE TABLE t (id INT PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY)",
    "DROP TABLE d2.nosuch",
    "SELECT * FROM nodb.t",
    "CREATE TABLE nodb.t (id INT PRIMARY KEY)",
    "USE nodb",
    "DROP DATABASE d1",
    "SELECT DATABASE()",
    "SELECT * FROM t",
    "SHOW TABLES",
    "SELECT * FROM d2.t ORDER BY id",
    "DROP DATABASE d1",
    "DROP DATABASE IF EXISTS d1",
    "USE d2",
    "DROP TABLE t",
    "SHOW TABLES",
    "DROP DATABASE d2",
]


def outcome(conn, statement):
    answer = run(conn, statement)
    # Column types are spelled as MySQL 8 does (`int`), MariaDB's `int(11)`: the
    # columns' names say which table was found.
    if answer[0] == "ok" and statement.startswith(("DESCRIBE", "SHOW COLUMNS")):
        return answer[:2] + ([r[0] for r in answer[2]],)
    return answer


def agrees(kura_port, mariadb_port):
    kura = connect(kura_port, "kura")
    mariadb = connect(mariadb_port, "mysql")
    verdict(compare(kura, mariadb, TRANSCRIPT, outcome), len(TRANSCRIPT))


def memcached(kura_port, memcached_port):
    cur = connect(kura_port, "kura").cursor()
    cur.execute("CREATE DATABASE games")
    for db in ("games", "kura"):
        cur.execute(
            f"CREATE TABLE {db}.players (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL,"
            " email VARCHAR(40), UNIQUE KEY email (email))"
        )
    cur.execute("INSERT INTO games.players VALUES (1, 'ann', 'ann@x.com')")
    cur.execute("INSERT INTO kura.players VALUES (1, 'bob', 'bob@x.com')")
    mc = pymemcache.client.base.Client(("127.0.0.1", memcached_port))
    check("games' row", mc.get("@@games.players.1"), b"ann|ann@x.com")
    check("kura's row", mc.get("@@players.1"), b"bob|bob@x.com")
    check("through the index", mc.get("@@games.players_by_email.ann@x.com"), b"1|ann")
    check("set", mc.set("@@games.players.2", b"cy|cy@x.com", noreply=False), True)
    cur.execute("SELECT id, name FROM games.players ORDER BY id")
    check("games' rows", cur.fetchall(), ((1, "ann"), (2, "cy")))
    cur.execute("SELECT count(*) FROM kura.players")
    check("kura's rows", cur.fetchone(), (1,))
    print("memcached reaches each database's table")


def restarted(kura_port):
    cur = connect(kura_port, "games").cursor()
    cur.execute("SELECT DATABASE()")
    check("database at login", cur.fetchone(), ("games",))
    cur.execute("SELECT id, name FROM players ORDER BY id")
    check("games' rows after a restart", cur.fetchall(), ((1, "ann"), (2, "cy")))
    cur.execute("SHOW DATABASES")
    check("databases", [r[0] for r in cur.fetchall()], ["games", "information_schema", "kura"])
    print("databases and their tables outlast a restart")


case, port = sys.argv[1], int(sys.argv[2])
if case == "agrees":
    agrees(port, int(sys.argv[3]))
elif case == "memcached":
    memcached(port, int(sys.argv[3]))
elif case == "restarted":
    restarted(port)
else:
    sys.exit(f"unknown case {case}")
