"""pymemcache logging in with the text protocol's login (memcached's -Y).

Usage: text_auth.py PORT USER PASSWORD. Before the login a get is refused; the login
is a set whose value is "user password"; after it, commands run; a wrong password
is refused. Exits non-zero, naming the failed check. The suite runs it against
Debian's memcached (-Y) and kura (-Y), so every expectation is memcached's own.
"""
import sys

import pymemcache.client.base
from pymemcache.exceptions import MemcacheClientError

port, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


def refused(call, what):
    try:
        call()
    except MemcacheClientError:
        return
    raise SystemExit(f"{what}: not refused")


mc = pymemcache.client.base.Client(("127.0.0.1", port))
refused(lambda: mc.get("k"), "get before the login")
check(mc.set("login", f"{user} {password}".encode(), noreply=False), True, "the login")
check(mc.set("k", b"v", noreply=False), True, "set after the login")
check(mc.get("k"), b"v", "get after the login")
mc.close()

other = pymemcache.client.base.Client(("127.0.0.1", port))
refused(
    lambda: other.set("login", f"{user} {password}x".encode(), noreply=False),
    "a wrong password",
)
other.close()
print("text auth: all checks passed")
