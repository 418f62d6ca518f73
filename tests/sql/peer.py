"""What the scripts that hold Kura's SQL against MariaDB's share: connections, a
statement's outcome in the form both are compared in, and the comparison of a
transcript.

A script beside this file imports it (Python puts a script's folder on its path).
"""
import sys

import pymysql


def connect(port, database=None, **options):
    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", database=database, autocommit=True, **options
    )


def mariadb_database(port, name, **options):
    """A connection to MariaDB in database `name`, made if missing, with the collation
    Kura's text has by default (`utf8mb4_general_ci`: case-insensitive)."""
    conn = connect(port, **options)
    conn.cursor().execute(
        f"CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
    )
    conn.select_db(name)
    return conn


def run(conn, statement, names=False, lastrowid=False):
    """The statement's outcome: ("ok", rows affected or found, [the column names],
    [cursor.lastrowid], rows) or ("error", its code)."""
    cur = conn.cursor()
    try:
        n = cur.execute(statement)
        out = ["ok", n]
        if names:
            out.append([d[0] for d in cur.description] if cur.description else [])
        if lastrowid:
            out.append(cur.lastrowid)
        out.append([tuple(r) for r in cur.fetchall()])
        return tuple(out)
    except pymysql.MySQLError as e:
        return ("error", e.args[0])


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}:\n  got  {got!r}\n  want {want!r}")


def compare(kura, mariadb, statements, outcome=run):
    """Sends each statement to both; prints each that answers differently (as
    `outcome` reads an answer) and returns how many did."""
    failed = 0
    for statement in statements:
        k, m = outcome(kura, statement), outcome(mariadb, statement)
        if k != m:
            failed += 1
            print(f"{statement}\n  kura:    {k}\n  mariadb: {m}")
    return failed


def verdict(failed, total):
    if failed:
        sys.exit(f"{failed} of {total} statements answered differently")
    print(f"{total} statements answered alike")
