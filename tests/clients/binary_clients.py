"""Real binary-protocol memcached clients against a running server.

Usage: binary_clients.py PORT. Runs pylibmc (libmemcached in binary mode) and
python-binary-memcached through every command they offer and exits non-zero, naming
the failed check, on the first answer that differs from memcached's. The suite runs
it against Debian's memcached too, so every expectation here is memcached's own.
"""
import sys

import bmemcached
import bmemcached.exceptions
import pylibmc

port = int(sys.argv[1])
address = f"127.0.0.1:{port}"


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


def raises(error, call, what):
    try:
        call()
    except error:
        return
    raise SystemExit(f"{what}: no {error.__name__}")


# pylibmc with binary=True: libmemcached's binary protocol, as PHP's and pylibmc's
# users run it.
mc = pylibmc.Client([address], binary=True, behaviors={"cas": True})
mc.flush_all()
check(mc.set("a", "alpha"), True, "pylibmc set")
check(mc.get("a"), "alpha", "pylibmc get")
check(mc.get("missing"), None, "pylibmc get miss")
check(mc.set("n", 41), True, "pylibmc set int")
check(mc.get("n"), 41, "pylibmc get int (flags say int)")
check(mc.set("blob", b"\x00\x80\xff\r\n" * 1000), True, "pylibmc set bytes")
check(mc.get("blob"), b"\x00\x80\xff\r\n" * 1000, "pylibmc get bytes")
check(mc.add("a", "again"), False, "pylibmc add existing")
check(mc.add("b", "beta"), True, "pylibmc add new")
raises(pylibmc.NotFound, lambda: mc.replace("nokey", "x"), "pylibmc replace missing")
check(mc.replace("b", "beta2"), True, "pylibmc replace")
check(mc.append("b", "+"), True, "pylibmc append")
check(mc.prepend("b", "-"), True, "pylibmc prepend")
check(mc.get("b"), "-beta2+", "pylibmc get after append/prepend")
check(mc.append("nokey", "x"), False, "pylibmc append missing")
check(mc.get_multi(["a", "b", "missing", "n"]), {"a": "alpha", "b": "-beta2+", "n": 41}, "pylibmc get_multi")
check(mc.set_multi({"m1": "1", "m2": "2", "m3": "3"}), [], "pylibmc set_multi")
check(mc.get_multi(["m1", "m2", "m3"]), {"m1": "1", "m2": "2", "m3": "3"}, "pylibmc get_multi after set_multi")
check(mc.delete_multi(["m1", "m2", "nokey"]), False, "pylibmc delete_multi with a miss")
check(mc.get_multi(["m1", "m2", "m3"]), {"m3": "3"}, "pylibmc get_multi after delete_multi")
check(mc.incr("n", 1), 42, "pylibmc incr")
check(mc.decr("n", 50), 0, "pylibmc decr floors at 0")
raises(pylibmc.NotFound, lambda: mc.incr("nocounter"), "pylibmc incr missing")
# (libmemcached 1.0.16, which pylibmc's wheel carries, marks a server dead after
# a non-numeric incr even against memcached: that case is left to bmemcached.)
value, cas = mc.gets("a")
check(value, "alpha", "pylibmc gets value")
check(mc.cas("a", "alpha2", cas), True, "pylibmc cas with the current unique")
check(mc.cas("a", "alpha3", cas), False, "pylibmc cas with a stale unique")
check(mc.get("a"), "alpha2", "pylibmc get after cas")
# (pylibmc's touch waits 2.5 s for libmemcached 1.0.16 in binary mode, against
# memcached too; the binprot transcripts cover touch.)
check(mc.delete("a"), True, "pylibmc delete")
check(mc.delete("a"), False, "pylibmc delete missing")
check(mc.get("a"), None, "pylibmc get after delete")
big = b"x" * (1024 * 1024)
raises(pylibmc.Error, lambda: mc.set("big", big), "pylibmc set too large")
check(mc.get("b"), "-beta2+", "pylibmc connection usable after a refused set")
stats = mc.get_stats()
check(len(stats), 1, "pylibmc stats: one server")
check("curr_connections" in stats[0][1], True, "pylibmc stats has curr_connections")
check(mc.flush_all(), True, "pylibmc flush_all")
check(mc.get("b"), None, "pylibmc get after flush_all")

# python-binary-memcached: a pure-Python binary client with its own framing.
bm = bmemcached.Client([address])
check(bm.set("k", "v"), True, "bmemcached set")
check(bm.get("k"), "v", "bmemcached get")
check(bm.get("missing"), None, "bmemcached get miss")
check(bm.add("k", "w"), False, "bmemcached add existing")
check(bm.replace("k", "w"), True, "bmemcached replace")
check(bm.get_multi(["k", "missing"]), {"k": "w"}, "bmemcached get_multi")
check(bm.set_multi({"x": 1, "y": 2}), [], "bmemcached set_multi")
check(bm.get_multi(["x", "y"]), {"x": 1, "y": 2}, "bmemcached get_multi ints")
check(bm.incr("c", 1), 0, "bmemcached incr creates a missing counter at its initial 0")
check(bm.set("c", 10), True, "bmemcached set counter")
check(bm.incr("c", 5), 15, "bmemcached incr")
check(bm.decr("c", 20), 0, "bmemcached decr")
value, cas = bm.gets("k")
check(value, "w", "bmemcached gets")
check(bm.cas("k", "cas1", cas), True, "bmemcached cas")
check(bm.cas("k", "cas2", cas), False, "bmemcached stale cas")
check(bm.delete("k"), True, "bmemcached delete")
check(bm.delete("k"), True, "bmemcached delete missing (it reports success)")
check(bm.delete_multi(["x"]), True, "bmemcached delete_multi")
check(bm.get_multi(["x", "y"]), {"y": 2}, "bmemcached get_multi after delete_multi")
check(bm.set("s", "abc"), True, "bmemcached set text")
raises(bmemcached.exceptions.MemcachedException, lambda: bm.incr("s", 1), "bmemcached incr non-numeric")
check(bm.get("y"), 2, "bmemcached connection usable after a non-numeric incr")
check(list(bm.stats().values())[0]["cmd_get"] != "", True, "bmemcached stats")
check(bm.flush_all(), True, "bmemcached flush_all")
check(bm.get("y"), None, "bmemcached get after flush_all")
print("binary clients: all checks passed")
