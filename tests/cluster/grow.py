"""Growing a ring under load, through the clients users run.

Usage: grow.py CASE ARGS...

Cases:
  load OUT SECONDS OLD NEW [PROXY [PROXY2]]
      OLD, NEW: the ring's addresses before and after, comma-separated. Writers run
      for SECONDS, each on keys of its own, and log to OUT (JSON) what they attempted
      and what was acknowledged:
        - pylibmc with ketama_weighted over OLD: set and overwrite (o:*);
        - pylibmc with ketama_weighted over NEW: set and overwrite (n:*);
        - pymemcache's HashClient (rendezvous) over OLD: add then incr (c:*),
          set then append (p:*), set then delete (d:*);
        - pylibmc over OLD: gets then cas (s:*);
        - PROXY, if given (nutcracker with OLD's pool): set and overwrite (t:*);
          once PROXY2 (nutcracker with NEW's pool, started when the ring has
          changed) takes connections, the same writer goes on through it, as an
          operator reloads nutcracker after a grow; it must write through both.
  fill OLD N
      Sets N keys (f:*, 200-byte values) through pylibmc over OLD, 500 at a time.
  filled NEW N
      Reads them back through pylibmc over NEW.
  check OUT NEW
      Reads every key back through pylibmc over NEW: each holds its last
      acknowledged value or a later attempted one, counters hold their acknowledged
      increments (or up to the unacknowledged ones more), deleted keys are gone.
      Prints the number of keys that should exist.

Keys start with $GROW_PREFIX, if set. Exits non-zero with the failing check.
"""
import json
import os
import socket
import sys
import threading
import time

import pylibmc
import pymemcache.client.hash

KEYS = 200
# Before every key: phases of one test keep to keys of their own.
PREFIX = os.environ.get("GROW_PREFIX", "")
BEHAVIORS = {
    "ketama_weighted": True,
    "connect_timeout": 3000,
    "receive_timeout": 5_000_000,
    "send_timeout": 5_000_000,
    "retry_timeout": 1,
}


FAILURES = []


def check(what, got, want):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")


def fail(why):
    """Notes a failed check; the case exits non-zero with the first few."""
    FAILURES.append(why)


def ketama(nodes):
    return pylibmc.Client(nodes, behaviors=BEHAVIORS)


class Log:
    """What one writer attempted and what was acknowledged, by key."""

    def __init__(self):
        # key -> list of values attempted, in order; key -> index of the last acked.
        self.attempted = {}
        self.acked = {}
        self.counts = {}  # key -> [acked increments, unacknowledged ones]
        self.deleted = set()
        self.errors = 0
        # When a writer changed its client over (the attempt's number), if it did.
        self.switched = None

    def attempt(self, key, value):
        self.attempted.setdefault(key, []).append(value)

    def ack(self, key):
        self.acked[key] = len(self.attempted[key]) - 1


def listening(address):
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def overwrite(client, prefix, log, stop, then=None):
    """Sets keys of its own through `client`; with `then` (an address), through a
    client of it from when it takes connections (counted in log.switched)."""
    i = 0
    while not stop.is_set():
        if then and i % 50 == 0 and listening(then):
            client = pylibmc.Client([then], behaviors={"connect_timeout": 3000})
            log.switched = i
            then = None
        key = f"{PREFIX}{prefix}:{i % KEYS}"
        value = f"{prefix}-{i}"
        log.attempt(key, value)
        try:
            if client.set(key, value.encode()):
                log.ack(key)
        except Exception:
            log.errors += 1
            time.sleep(0.01)
        i += 1


def hashed(old):
    servers = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in old]
    return pymemcache.client.hash.HashClient(
        servers, timeout=5, connect_timeout=3, retry_attempts=1, dead_timeout=0.1,
        ignore_exc=False,
    )


def counters_appends_deletes(old, log, stop):
    """c:* counters (add 0, then incr), p:* appends (set "a", then append "b"),
    d:* deletes (set "x", then delete): counted as acknowledged or unknown."""
    client = hashed(old)
    i = 0
    while not stop.is_set():
        n = i % KEYS
        c, p, d = f"{PREFIX}c:{n}", f"{PREFIX}p:{n}", f"{PREFIX}d:{n}"
        try:
            if i < KEYS:
                if client.add(c, b"0", noreply=False):
                    log.counts[c] = [0, 0]
                if client.set(p, b"a", noreply=False):
                    log.counts[p] = [0, 0]
                if client.set(d, b"x", noreply=False):
                    log.attempt(d, "x")
                    log.ack(d)
            else:
                # HashClient answers False, not None, for a server it holds as
                # failed, without sending: only a number is an acknowledgement.
                incr = lambda: type(client.incr(c, 1, noreply=False)) is int  # noqa: E731
                for key, step in ((c, incr),
                                  (p, lambda: client.append(p, b"b", noreply=False))):
                    if key not in log.counts:
                        continue
                    log.counts[key][1] += 1
                    if step():
                        log.counts[key][0] += 1
                        log.counts[key][1] -= 1
                if i % 7 == 0 and d in log.acked and d not in log.deleted:
                    log.deleted.add(d)
                    log.attempt(d, None)
                    if client.delete(d, noreply=False):
                        log.ack(d)
        except Exception:
            log.errors += 1
            time.sleep(0.01)
        i += 1


def gets_cas(old, log, stop):
    client = pylibmc.Client(old, behaviors={**BEHAVIORS, "cas": True})
    i = 0
    while not stop.is_set():
        key = f"{PREFIX}s:{i % 50}"
        try:
            value, cas = client.gets(key)
            if value is None:
                log.attempt(key, "0")
                if client.add(key, b"0"):
                    log.ack(key)
            else:
                new = str(int(value) + 1)
                log.attempt(key, new)
                if client.cas(key, new.encode(), cas):
                    log.ack(key)
        except Exception:
            log.errors += 1
            time.sleep(0.01)
        i += 1


def load(out, seconds, old, new, proxy=None, proxy2=None):
    old, new = old.split(","), new.split(",")
    stop = threading.Event()
    logs = {name: Log() for name in ("old", "new", "hash", "cas", "proxy")}
    writers = [
        threading.Thread(target=overwrite, args=(ketama(old), "o", logs["old"], stop)),
        threading.Thread(target=overwrite, args=(ketama(new), "n", logs["new"], stop)),
        threading.Thread(target=counters_appends_deletes, args=(old, logs["hash"], stop)),
        threading.Thread(target=gets_cas, args=(old, logs["cas"], stop)),
    ]
    if proxy:
        client = pylibmc.Client([proxy], behaviors={"connect_timeout": 3000})
        writers.append(
            threading.Thread(
                target=overwrite, args=(client, "t", logs["proxy"], stop, proxy2)
            )
        )
    for w in writers:
        w.start()
    time.sleep(float(seconds))
    if proxy2:
        # Writes through the new pool too, however long the ring took to change.
        deadline = time.monotonic() + 120
        while logs["proxy"].switched is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
    stop.set()
    for w in writers:
        w.join()
    with open(out, "w") as f:
        json.dump(
            {
                name: {
                    "attempted": log.attempted,
                    "acked": log.acked,
                    "counts": log.counts,
                    "deleted": sorted(log.deleted),
                    "errors": log.errors,
                }
                for name, log in logs.items()
            },
            f,
        )
    done = {name: len(log.acked) for name, log in logs.items()}
    print(f"writers acknowledged keys {done}, errors {[l.errors for l in logs.values()]}")
    if proxy2:
        switched = logs["proxy"].switched
        if switched is None:
            sys.exit(f"the writer never reached {proxy2}, nutcracker with the new pool")
        print(f"through nutcracker with the new pool from attempt {switched}")


def check_all(out, new):
    with open(out) as f:
        logs = json.load(f)
    client = ketama(new.split(","))
    live = 0
    for name, log in logs.items():
        attempted, acked, counts = log["attempted"], log["acked"], log["counts"]
        keys = sorted(set(attempted) | set(counts))
        got = client.get_multi(keys) if keys else {}
        for key in keys:
            value = got.get(key)
            value = value.decode() if value is not None else None
            if key in counts:
                # A counter from 0, or an appended value from "a": as many steps as
                # were acknowledged, and up to the unknown ones more.
                done, unknown = counts[key]
                if key.startswith(f"{PREFIX}c:"):
                    n = int(value) if value is not None else -1
                else:
                    n = -1
                    if value is not None and value == "a" + "b" * (len(value) - 1):
                        n = len(value) - 1
                if not done <= n <= done + unknown:
                    fail(f"{name}: {key} is {value!r}: {done} steps acknowledged, {unknown} unknown")
                live += 1
                continue
            if key not in acked:
                # Never acknowledged: any attempted value or none.
                if value is not None:
                    check(f"{name}: {key} holds an attempted value", value in attempted[key], True)
                    live += 1
                continue
            later = attempted[key][acked[key]:]
            if value not in later:
                fail(f"{name}: {key} holds {value!r}; acknowledged {later[0]!r}, attempted after it {later[1:]!r}")
            live += value is not None
    if FAILURES:
        sys.exit(f"{len(FAILURES)} keys wrong:\n" + "\n".join(FAILURES[:20]))
    print(f"live {live}")


def fill_value(i):
    return f"v{i}".ljust(200, ".").encode()


def fill(old, n):
    client = ketama(old.split(","))
    n = int(n)
    for start in range(0, n, 500):
        batch = {f"{PREFIX}f:{i}": fill_value(i) for i in range(start, min(n, start + 500))}
        failed = client.set_multi(batch)
        check(f"keys not stored from {start}", failed, [])
    if FAILURES:
        sys.exit("\n".join(FAILURES[:20]))
    print(f"filled {n}")


def filled(new, n):
    client = ketama(new.split(","))
    n, missing = int(n), 0
    for start in range(0, n, 500):
        keys = [f"{PREFIX}f:{i}" for i in range(start, min(n, start + 500))]
        got = client.get_multi(keys)
        for i, key in zip(range(start, start + 500), keys):
            if got.get(key) != fill_value(i):
                missing += 1
                if missing <= 10:
                    fail(f"{key}: {got.get(key)!r}")
    if FAILURES:
        sys.exit(f"{missing} of {n} filled keys wrong:\n" + "\n".join(FAILURES[:10]))
    print(f"all {n} filled keys there")


def main():
    case, args = sys.argv[1], sys.argv[2:]
    if case == "load":
        load(*args)
    elif case == "check":
        check_all(*args)
    elif case == "fill":
        fill(*args)
    elif case == "filled":
        filled(*args)
    else:
        sys.exit(f"no case {case}")


if __name__ == "__main__":
    main()
