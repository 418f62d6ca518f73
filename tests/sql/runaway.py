"""Runaway SQL against a running Kura: logins that never finish, oversized packets,
max_execution_time, KILL and SHOW PROCESSLIST, and clients that go away mid-query.

Usage: runaway.py CASE SQL_PORT [ARGS...]. Exits non-zero (with the failing check) on
the first difference from what MySQL would answer. Waits are bounded polls for a
condition, never sleeps standing in for one.
"""
import socket
import sys
import threading
import time

import pymysql

case, port = sys.argv[1], int(sys.argv[2])
args = sys.argv[3:]

# Generous bounds for conditions that should hold within a second or two.
WAIT_SECS = 30


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


def connect(at=None, database="kura", **kw):
    return pymysql.connect(
        host="127.0.0.1", port=at or port, user="root", database=database, **kw
    )


def error_of(fn):
    """The (code, message) of the MySQL error `fn` raises; fails if it raises none."""
    try:
        fn()
    except pymysql.err.MySQLError as e:
        return e.args[0], e.args[1] if len(e.args) > 1 else ""
    raise SystemExit(f"{fn}: no error")


def wait_for(what, condition):
    deadline = time.monotonic() + WAIT_SECS
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(0.05)
    raise SystemExit(f"{what}: not within {WAIT_SECS} s")


def connect_timeout():
    """`-c N --sql-connect-timeout-secs 1`: N sockets that never log in are dropped,
    and the slots they held serve logins again."""
    limit = int(args[0])
    silent = []
    for i in range(limit):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(WAIT_SECS)
        greeting = s.recv(4096)
        if not greeting:
            raise SystemExit("no greeting")
        if i == 0:
            # Half a packet header: a login started and never finished.
            s.sendall(b"\x20\x00")
        silent.append(s)
    # The slots are full: a login now is refused, as MySQL refuses it.
    code, _ = error_of(connect)
    check(code, 1040, "login while silent sockets hold every slot")
    for s in silent:
        try:
            rest = s.recv(4096)
        except ConnectionResetError:
            rest = b""
        check(rest, b"", "a silent socket is closed by the server")

    def logs_in():
        try:
            db = connect()
        except pymysql.err.OperationalError as e:
            if e.args[0] == 1040:
                return None
            raise
        cur = db.cursor()
        cur.execute("SELECT 1")
        return cur.fetchall()

    check(wait_for("a login after the silent sockets were dropped", logs_in), ((1,),), "SELECT 1")


def packet_too_large():
    """A query over max_allowed_packet (64 MiB, which the MariaDB started beside Kura
    is given too): the client gets the same error from both, then the connection
    ends."""
    mariadb_port = int(args[0])
    query = "SELECT '" + "x" * (64 << 20) + "'"

    def outcome(at, database):
        db = connect(at, database)
        cur = db.cursor()
        try:
            cur.execute(query)
            return ("answered",)
        except pymysql.err.MySQLError as e:
            return (type(e).__name__,) + tuple(e.args)

    got = outcome(port, "kura")
    want = outcome(mariadb_port, "mysql")
    check(got, want, "a query over max_allowed_packet, Kura vs MariaDB")
    check(want[1], 1153, "MariaDB's error code")


CASES = {
    "packet_too_large": packet_too_large,
    "connect_timeout": connect_timeout,
}

CASES[case]()
print("ok")
