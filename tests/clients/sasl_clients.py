"""Real binary-protocol clients logging in with SASL PLAIN.

Usage: sasl_clients.py PORT USER PASSWORD. pylibmc (libmemcached) and
python-binary-memcached log in with the given user and run a few commands; with a
wrong password each is refused. Exits non-zero, naming the failed check. The suite
runs it against Debian's memcached (-S, the same user in a sasldb) and against kura
(-Y), so every expectation here is memcached's own.
"""
import sys

import bmemcached
import bmemcached.exceptions
import pylibmc

port, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3]
address = f"127.0.0.1:{port}"


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


mc = pylibmc.Client([address], binary=True, username=user, password=password)
check(mc.set("sasl", "in"), True, "pylibmc set after login")
check(mc.get("sasl"), "in", "pylibmc get after login")
check(mc.incr("n", 1) if mc.set("n", 1) else None, 2, "pylibmc incr after login")

bad = pylibmc.Client([address], binary=True, username=user, password=password + "x")
try:
    bad.get("sasl")
    raise SystemExit("pylibmc with a wrong password read a value")
except pylibmc.Error:
    pass

bm = bmemcached.Client([address], user, password)
check(bm.get("sasl"), b"in", "bmemcached get after login (pylibmc stored bytes)")
check(bm.set("sasl2", "also"), True, "bmemcached set after login")
check(bm.get("sasl2"), "also", "bmemcached get after its set")

try:
    bmemcached.Client([address], user, password + "x").get("sasl")
    raise SystemExit("bmemcached with a wrong password read a value")
except bmemcached.exceptions.MemcachedException as e:
    check(e.code, 0x20, "bmemcached wrong password: the status is Auth failure")
print("sasl clients: all checks passed")
