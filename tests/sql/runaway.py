"""Runaway SQL against a running Kura: logins that never finish, oversized packets,
max_execution_time, KILL and SHOW PROCESSLIST, and clients that go away mid-query.

Usage: runaway.py CASE SQL_PORT [ARGS...]. Exits non-zero (with the failing check) on
the first difference from what MySQL would answer. Waits are bounded polls for a
condition, never sleeps standing in for one.
"""
import socket
import struct
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


def long_rows(db, rows=100):
    """A table `spin` of `rows` rows: a cross join of it with itself runs long."""
    cur = db.cursor()
    cur.execute("DROP TABLE IF EXISTS spin")
    cur.execute("CREATE TABLE spin (id INT PRIMARY KEY, v INT)")
    cur.executemany("INSERT INTO spin (id, v) VALUES (%s, %s)", [(i, i) for i in range(rows)])
    db.commit()


# Hours of work: only a stop ends it within the test's bounds.
ENDLESS = "SELECT count(*) FROM spin a, spin b, spin c, spin d, spin e"


def max_execution_time():
    """The session variable and the per-statement hint bound a SELECT with 3024; the
    connection goes on after it."""
    db = connect(autocommit=True)
    long_rows(db)
    cur = db.cursor()
    cur.execute("SELECT @@max_execution_time")
    check(cur.fetchall(), ((0,),), "max_execution_time's default")
    timed_out = (3024, "Query execution was interrupted, maximum statement execution time exceeded")
    for assignment in [
        "SET max_execution_time = 200",
        "SET SESSION max_execution_time = 200",
        "SET @@session.max_execution_time = 200",
    ]:
        cur.execute("SET max_execution_time = 0")
        cur.execute(assignment)
        cur.execute("SELECT @@max_execution_time")
        check(cur.fetchall(), ((200,),), f"@@max_execution_time after {assignment}")
        check(error_of(lambda: cur.execute(ENDLESS)), timed_out, f"{ENDLESS} after {assignment}")
        cur.execute("SELECT count(*) FROM spin")
        check(cur.fetchall(), ((100,),), "a statement after the time-out")
    cur.execute("SET max_execution_time = 0")
    hinted = ENDLESS.replace("SELECT", "SELECT /*+ MAX_EXECUTION_TIME(200) */", 1)
    check(error_of(lambda: cur.execute(hinted)), timed_out, hinted)
    # The hint's 0 lifts the session's limit for that statement; a quick one finishes.
    cur.execute("SET max_execution_time = 1")
    cur.execute("SELECT /*+ MAX_EXECUTION_TIME(0) */ count(*) FROM spin a, spin b")
    check(cur.fetchall(), ((10000,),), "a statement whose hint lifts the limit")
    # A write is not bounded by it, as in MySQL.
    cur.execute("UPDATE spin SET v = v + 1 WHERE id < 50")
    check(cur.rowcount, 50, "an UPDATE under max_execution_time = 1")


def processlist_of(cur):
    cur.execute("SHOW FULL PROCESSLIST")
    names = [d[0] for d in cur.description]
    check(names, ["Id", "User", "Host", "db", "Command", "Time", "State", "Info"],
          "SHOW PROCESSLIST's columns")
    return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}


def run_in_thread(db, sql):
    """Runs `sql` on `db` in a thread; returns the thread and where its outcome lands."""
    outcome = {}

    def go():
        try:
            cur = db.cursor()
            cur.execute(sql)
            outcome["rows"] = cur.fetchall()
        except pymysql.err.MySQLError as e:
            outcome["error"] = tuple(e.args)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, outcome


def kill():
    """KILL QUERY stops a connection's statement with 1317 and leaves it open; KILL
    closes it; the ids are CONNECTION_ID()'s and SHOW PROCESSLIST's. An unknown id
    gets MariaDB's error."""
    mariadb_port = int(args[0])
    admin = connect(autocommit=True)
    long_rows(admin)
    victim = connect(autocommit=True)
    vcur = victim.cursor()
    vcur.execute("SELECT CONNECTION_ID()")
    (victim_id,), = vcur.fetchall()
    acur = admin.cursor()
    listed = processlist_of(acur)
    check(victim_id in listed, True, f"connection {victim_id} in SHOW PROCESSLIST {listed}")
    check(listed[victim_id]["User"], "root", "its User")
    check(listed[victim_id]["Command"], "Sleep", "an idle connection's Command")
    check(listed[victim_id]["db"], "kura", "its db")
    check(listed[victim_id]["Info"], None, "an idle connection's Info")
    thread, outcome = run_in_thread(victim, ENDLESS)
    wait_for("the statement shown running",
             lambda: processlist_of(acur).get(victim_id, {}).get("Info") == ENDLESS)
    row = processlist_of(acur)[victim_id]
    check(row["Command"], "Query", "a running connection's Command")
    acur.execute(f"KILL QUERY {victim_id}")
    thread.join(WAIT_SECS)
    check(thread.is_alive(), False, "the killed statement ended")
    check(outcome.get("error"), (1317, "Query execution was interrupted"), "the killed statement's error")
    vcur.execute("SELECT count(*) FROM spin")
    check(vcur.fetchall(), ((100,),), "the connection goes on after KILL QUERY")
    # Non-FULL shows the first 100 characters of a statement.
    thread, outcome = run_in_thread(victim, ENDLESS + " WHERE " + " AND ".join(["a.v >= 0"] * 20))
    def short_info():
        acur.execute("SHOW PROCESSLIST")
        rows = {r[0]: r for r in acur.fetchall()}
        info = rows.get(victim_id, (None,) * 8)[7]
        return info if info and info.startswith("SELECT count") else None
    info = wait_for("the statement in SHOW PROCESSLIST", short_info)
    check(len(info), 100, "SHOW PROCESSLIST's Info without FULL")
    acur.execute(f"KILL CONNECTION {victim_id}")
    thread.join(WAIT_SECS)
    check(thread.is_alive(), False, "the statement of a killed connection ended")
    check(outcome.get("error", (0,))[0] in (2013, 2006), True, f"a killed connection's client: {outcome}")
    wait_for("the killed connection gone from SHOW PROCESSLIST",
             lambda: victim_id not in processlist_of(acur))
    # KILL without a word is KILL CONNECTION, of an idle connection too.
    idle = connect(autocommit=True)
    icur = idle.cursor()
    icur.execute("SELECT CONNECTION_ID()")
    (idle_id,), = icur.fetchall()
    acur.execute(f"KILL {idle_id}")
    wait_for("the killed idle connection gone", lambda: idle_id not in processlist_of(acur))
    code, _ = error_of(lambda: icur.execute("SELECT 1"))
    check(code in (2013, 2006), True, f"a query on a killed connection: {code}")
    # The protocol's COM_PROCESS_KILL (mysql_kill()) is KILL CONNECTION.
    other = connect(autocommit=True)
    ocur = other.cursor()
    ocur.execute("SELECT CONNECTION_ID()")
    (other_id,), = ocur.fetchall()
    admin._execute_command(pymysql.constants.COMMAND.COM_PROCESS_KILL, struct.pack("<I", other_id))
    admin._read_ok_packet()
    wait_for("the connection killed by COM_PROCESS_KILL gone",
             lambda: other_id not in processlist_of(acur))
    # An unknown id: the same error as MariaDB's.
    got = error_of(lambda: acur.execute("KILL 987654"))
    want = error_of(lambda: connect(mariadb_port, "mysql").cursor().execute("KILL 987654"))
    check(got, want, "KILL of an unknown id, Kura vs MariaDB")
    check(got[0], 1094, "KILL of an unknown id")


def kill_other_user():
    """A user sees and stops only its own connections: 1095 for another's. root, the
    administrator, sees and stops every one."""
    password = args[0]
    root = connect(autocommit=True)
    rcur = root.cursor()
    rcur.execute("SELECT CONNECTION_ID()")
    (root_id,), = rcur.fetchall()
    bob = pymysql.connect(host="127.0.0.1", port=port, user="bob", password=password,
                          database="kura", autocommit=True)
    bcur = bob.cursor()
    bcur.execute("SELECT CONNECTION_ID()")
    (bob_id,), = bcur.fetchall()
    listed = processlist_of(bcur)
    check(sorted(listed), [bob_id], "bob's SHOW PROCESSLIST")
    check(error_of(lambda: bcur.execute(f"KILL {root_id}")),
          (1095, f"You are not owner of thread {root_id}"), "bob kills root's connection")
    check(error_of(lambda: bcur.execute(f"KILL QUERY {root_id}")),
          (1095, f"You are not owner of thread {root_id}"), "bob kills root's query")
    rcur.execute("SELECT 1")
    check(rcur.fetchall(), ((1,),), "root's connection after bob's KILL")
    check(sorted(processlist_of(rcur)), sorted([root_id, bob_id]), "root's SHOW PROCESSLIST")
    check(processlist_of(rcur)[bob_id]["User"], "bob", "bob's connection in root's list")
    long_rows(root)
    thread, outcome = run_in_thread(bob, ENDLESS)
    wait_for("bob's statement running",
             lambda: processlist_of(rcur).get(bob_id, {}).get("Info") == ENDLESS)
    rcur.execute(f"KILL QUERY {bob_id}")
    thread.join(WAIT_SECS)
    check(thread.is_alive(), False, "bob's statement killed by root ended")
    check(outcome.get("error"), (1317, "Query execution was interrupted"), "bob's killed statement")
    rcur.execute(f"KILL {bob_id}")
    wait_for("bob's connection killed by root gone", lambda: bob_id not in processlist_of(rcur))


def client_gone():
    """A statement whose client closed its socket stops, and its connection ends."""
    admin = connect(autocommit=True)
    long_rows(admin)
    acur = admin.cursor()
    leaver = connect(autocommit=True)
    lcur = leaver.cursor()
    lcur.execute("SELECT CONNECTION_ID()")
    (leaver_id,), = lcur.fetchall()
    # The statement sent, its reply never read: the client goes away.
    leaver._execute_command(pymysql.constants.COMMAND.COM_QUERY, ENDLESS)
    wait_for("the statement running",
             lambda: processlist_of(acur).get(leaver_id, {}).get("Info") == ENDLESS)
    leaver._sock.shutdown(socket.SHUT_RDWR)
    leaver._sock.close()
    wait_for("the abandoned statement stopped and its connection gone",
             lambda: leaver_id not in processlist_of(acur))


def big_result():
    """A result of 250,000 rows, written out as it is encoded, arrives whole and in
    order, read row by row (an unbuffered cursor)."""
    db = connect(autocommit=True)
    long_rows(db, 500)
    cur = db.cursor(pymysql.cursors.SSCursor)
    cur.execute("SELECT a.id, b.id FROM spin a, spin b ORDER BY a.id, b.id")
    n = 0
    for a, b in cur:
        if (a, b) != (n // 500, n % 500):
            raise SystemExit(f"row {n}: got {(a, b)}")
        n += 1
    check(n, 250_000, "rows of the cross join")
    cur.close()
    plain = db.cursor()
    plain.execute("SELECT 1")
    check(plain.fetchall(), ((1,),), "the connection after a big result")
    # The binary protocol (a prepared statement), with a computed column.
    import mysql.connector

    conn = mysql.connector.connect(host="127.0.0.1", port=port, user="root", database="kura")
    prepared = conn.cursor(prepared=True)
    prepared.execute(
        "SELECT a.id, b.id, a.id * 1000 + b.id FROM spin a, spin b WHERE a.id < ? ORDER BY a.id, b.id",
        (400,),
    )
    n = 0
    for a, b, c in prepared:
        if (a, b, c) != (n // 500, n % 500, (n // 500) * 1000 + n % 500):
            raise SystemExit(f"prepared row {n}: got {(a, b, c)}")
        n += 1
    check(n, 200_000, "rows of the prepared cross join")
    conn.close()


def streaming():
    """An endless SELECT's rows reach the client while it still runs (SHOW
    PROCESSLIST shows it executing); KILL QUERY then ends the rows with 1317."""
    admin = connect(autocommit=True)
    long_rows(admin)
    acur = admin.cursor()
    reader = connect(autocommit=True, cursorclass=pymysql.cursors.SSCursor)
    rcur = reader.cursor()
    rcur.execute("SELECT CONNECTION_ID()")
    (reader_id,), = rcur.fetchall()
    endless = "SELECT a.id, b.id, c.id FROM spin a, spin b, spin c, spin d, spin e"
    got = {"rows": 0}

    def read():
        try:
            rcur.execute(endless)
            for _ in rcur:
                got["rows"] += 1
        except pymysql.err.MySQLError as e:
            got["error"] = tuple(e.args)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    wait_for("the first 10,000 rows while the statement runs", lambda: got["rows"] >= 10_000)
    row = processlist_of(acur)[reader_id]
    check((row["Command"], row["Info"]), ("Query", endless), "the streaming statement")
    acur.execute(f"KILL QUERY {reader_id}")
    thread.join(WAIT_SECS)
    check(thread.is_alive(), False, "the killed streaming statement ended")
    check(got.get("error"), (1317, "Query execution was interrupted"), "the rows' end")
    rcur.execute("SELECT 1")
    check(tuple(rcur.fetchall()), ((1,),), "the connection after a killed stream")


CASES = {
    "streaming": streaming,
    "big_result": big_result,
    "max_execution_time": max_execution_time,
    "kill": kill,
    "kill_other_user": kill_other_user,
    "client_gone": client_gone,
    "packet_too_large": packet_too_large,
    "connect_timeout": connect_timeout,
}

CASES[case]()
print("ok")
