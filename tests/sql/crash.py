"""SQL writers for the crash test (crates/server/tests/sql_crash.rs), and the check
after each restart.

  crash.py write PORT DIR SEED   threads write until the server dies
  crash.py check PORT DIR        the rows are as acknowledged; indexes agree

Each writer thread owns its players (ids t*PLAYERS ...) and a pool of emails, so it
knows what every statement must answer: an email one of its other players holds is
1062 when the player exists, else that player is the one updated (MySQL's rule for
a row in the way); anything else succeeds. Before sending a statement it appends the statement's
effect to its ledger file as "try", after the reply as "ack" (or "no" for an expected
refusal). After a kill the last "try" without an answer may or may not have landed;
a transaction (two players' levels swapped) lands whole or not at all. The check
resolves it against the rows, then writes the state it found as the thread's new
baseline ("base" lines) for the next round.
"""

import json
import os
import random
import sys
import threading

import pymysql

THREADS = 6
PLAYERS = 5
EMAILS = 7
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS players (id INT PRIMARY KEY, email VARCHAR(40), "
    "level INT NOT NULL, UNIQUE KEY email (email), KEY level (level))"
)


def connect(port):
    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", database="kura",
        autocommit=True, connect_timeout=10, read_timeout=60, write_timeout=60,
    )


def email(t, n):
    return None if n is None else f"t{t}e{n}@x.com"


def load(directory, t):
    """The thread's rows as its ledger left them: {id: (email_n, level) or None}, and
    the unanswered change (a dict of id -> row) if the last try has no answer."""
    rows = {}
    pending = None
    path = os.path.join(directory, f"t{t}.log")
    if not os.path.exists(path):
        return rows, None
    with open(path) as f:
        for line in f:
            kind, _, body = line.rstrip("\n").partition(" ")
            change = {int(k): v for k, v in json.loads(body).items()}
            if kind == "base":
                rows.update(change)
            elif kind == "try":
                pending = change
            elif kind == "ack":
                rows.update(change)
                pending = None
            elif kind == "no":
                pending = None
    return rows, pending


def writer(port, directory, t, seed, failures):
    rng = random.Random(seed * 1000 + t)
    rows, pending = load(directory, t)
    assert pending is None, f"thread {t}: the check left an unanswered try"
    ids = [t * PLAYERS + i for i in range(PLAYERS)]
    try:
        conn = connect(port)
    except pymysql.err.OperationalError:
        return
    log = open(os.path.join(directory, f"t{t}.log"), "a")

    def note(kind, change):
        log.write(f"{kind} {json.dumps({str(k): v for k, v in change.items()})}\n")
        log.flush()

    try:
        cur = conn.cursor()
        while True:
            op = rng.random()
            pid = rng.choice(ids)
            if op < 0.55:
                # An upsert: the player's email and level.
                n = rng.randrange(EMAILS) if rng.random() < 0.9 else None
                level = rng.randrange(1000)
                holder = [
                    i for i in ids
                    if i != pid and rows.get(i) and n is not None and rows[i][0] == n
                ]
                # As MySQL: the row in the way by its primary key is updated (and
                # refused if another row holds the email); without one, the row
                # holding the email is; without either, the row is inserted.
                refused = bool(rows.get(pid)) and bool(holder)
                target = holder[0] if holder and not rows.get(pid) else pid
                change = {target: [n, level]}
                note("try", change)
                try:
                    cur.execute(
                        "INSERT INTO players (id, email, level) VALUES (%s, %s, %s) "
                        "ON DUPLICATE KEY UPDATE email = VALUES(email), level = VALUES(level)",
                        (pid, email(t, n), level),
                    )
                    if refused:
                        raise AssertionError(f"{change}: stored over {holder}'s email")
                    note("ack", change)
                    rows.update(change)
                except pymysql.err.IntegrityError as e:
                    if not refused or e.args[0] != 1062:
                        raise
                    note("no", {})
            elif op < 0.75:
                change = {pid: None}
                note("try", change)
                cur.execute("DELETE FROM players WHERE id = %s", (pid,))
                note("ack", change)
                rows.update(change)
            else:
                # A transaction: two players swap levels, or neither changes.
                a, b = rng.sample(ids, 2)
                if not rows.get(a) or not rows.get(b):
                    continue
                change = {a: [rows[a][0], rows[b][1]], b: [rows[b][0], rows[a][1]]}
                note("try", change)
                conn.begin()
                cur.execute("UPDATE players SET level = %s WHERE id = %s", (rows[b][1], a))
                cur.execute("UPDATE players SET level = %s WHERE id = %s", (rows[a][1], b))
                conn.commit()
                note("ack", change)
                rows.update(change)
    except (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError):
        return  # the server was killed
    except BaseException as e:  # noqa: BLE001 - reported to the test
        failures.append(f"thread {t}: {type(e).__name__}: {e}")
    finally:
        log.close()


def write(port, directory, seed):
    conn = connect(port)
    conn.cursor().execute(SCHEMA)
    conn.close()
    print("ready", flush=True)
    failures = []
    threads = [
        threading.Thread(target=writer, args=(port, directory, t, seed, failures))
        for t in range(THREADS)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures:
        print("\n".join(failures))
        sys.exit(1)


def check(port, directory):
    conn = connect(port)
    cur = conn.cursor()
    cur.execute("SELECT id, email, level FROM players")
    found = {i: (e, lv) for i, e, lv in cur.fetchall()}
    problems = []
    acked = 0
    for t in range(THREADS):
        path = os.path.join(directory, f"t{t}.log")
        if os.path.exists(path):
            with open(path) as f:
                acked += sum(1 for line in f if line.startswith("ack "))
        rows, pending = load(directory, t)
        ids = [t * PLAYERS + i for i in range(PLAYERS)]

        def render(row):
            return None if row is None else (email(t, row[0]), row[1])

        def matches(state):
            return all(found.get(i) == render(state.get(i)) for i in ids)

        state = dict(rows)
        if not matches(state) and pending is not None:
            state.update(pending)
        if not matches(state):
            want = {i: render(rows.get(i)) for i in ids}
            got = {i: found.get(i) for i in ids}
            problems.append(f"thread {t}: acknowledged {want}, pending {pending}, found {got}")
            continue
        with open(os.path.join(directory, f"t{t}.log"), "w") as f:
            f.write(f"base {json.dumps({str(i): state.get(i) for i in ids})}\n")
    # Every index leads to the rows the table holds, and to no other.
    for i, (e, lv) in found.items():
        if e is not None:
            cur.execute("SELECT id FROM players WHERE email = %s", (e,))
            if cur.fetchall() != ((i,),):
                problems.append(f"email {e} does not lead to player {i} alone")
    cur.execute("SELECT id, level FROM players WHERE level >= 0 ORDER BY level, id")
    by_level = list(cur.fetchall())
    if by_level != sorted(((i, lv) for i, (_, lv) in found.items()), key=lambda r: (r[1], r[0])):
        problems.append(f"the level index holds {by_level}, the table {found}")
    cur.execute("EXPLAIN SELECT id FROM players WHERE level >= 0 ORDER BY level")
    if cur.fetchall()[0][6] != "level":
        problems.append("the level range was not read through its index")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"acknowledged {acked}; {len(found)} rows, as acknowledged")


def main():
    mode, port, directory = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "write":
        write(port, directory, int(sys.argv[4]))
    else:
        check(port, directory)


if __name__ == "__main__":
    main()
