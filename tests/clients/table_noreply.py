"""pymemcache, with its default noreply, writing table rows that Kura refuses.

Usage: table_noreply.py PORT, against a kura started with
tests/transcripts/tables/schema.sql. memcached sends nothing for a noreply command
that failed; neither does Kura, so a refused row never lands on the client's next
command: each refused write below returns as pymemcache's noreply writes do, and the
next get is clean. stats counts the errors dropped (noreply_errors_dropped); a
NOT_STORED (a duplicate unique email) is dropped as memcached drops it, and is not an
error. Exits non-zero, naming the failed check.
"""
import sys

import pymemcache.client.base

port = int(sys.argv[1])


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


c = pymemcache.client.base.Client(("127.0.0.1", port))
check(c.default_noreply, True, "pymemcache's default noreply")

# A malformed row (two fields where the table has three).
check(c.set("@@players.9", "only|two"), True, "set of a malformed row")
check(c.get("@@players.9"), None, "the get after it")

# A duplicate unique email: NOT_STORED, dropped.
check(c.set("@@players.1", b"ann|a@x.com|1", noreply=False), True, "set of a row")
check(c.set("@@players.2", b"bob|a@x.com|2"), True, "set of a duplicate email")
check(c.get("@@players.2"), None, "the get after it")
check(c.get("@@players.1"), b"ann|a@x.com|1", "the first row")

# Commands rows refuse, and an unknown container.
check(c.incr("@@players.1", 1, noreply=True), None, "incr of a row")
check(c.append("@@players.1", b"x"), True, "append to a row")
check(c.delete("@@nosuch.1"), True, "delete in an unknown container")
check(c.touch("@@nosuch.1", 10), True, "touch in an unknown container")
check(c.get("@@players.1"), b"ann|a@x.com|1", "the row after them")

# A set that gives the row a second, valid value still works.
check(c.set("@@players.1", b"ann|ann@x.com|2"), True, "set of a good row")
check(c.get("@@players.1"), b"ann|ann@x.com|2", "the row rewritten")
check(int(c.stats().get(b"noreply_errors_dropped", -1)), 5, "noreply_errors_dropped")
print("ok")
