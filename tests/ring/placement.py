"""Where real memcached clients place keys, for the ring oracle (crates/ring/tests).

    placement.py libmemcached < spec.json
    placement.py pylibmc < spec.json

spec.json: {"rings": [[[host, port, weight], ...], ...], "keys": [hex, ...]}.
Prints JSON: for each ring, the index of the member each key goes to.

libmemcached: Debian's libmemcached (the library libmemcached-tools use), through
ctypes: a memcached_st with MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, the members added
with their weights, and memcached_generate_hash for each key. It connects to
nothing, so members may be on any host and port, memcached's default 11211 among
them.

pylibmc: the client users run (its own libmemcached), with behaviors
{"ketama_weighted": True}, against the memcached servers the rings name (running,
weight 1): each key is set through it, then looked for on each server alone.
"""

import ctypes
import ctypes.util
import json
import sys

MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED = 16
MEMCACHED_SUCCESS = 0


def libmemcached(rings, keys):
    lib = ctypes.CDLL(ctypes.util.find_library("memcached") or "libmemcached.so.11")
    lib.memcached_create.restype = ctypes.c_void_p
    lib.memcached_create.argtypes = [ctypes.c_void_p]
    lib.memcached_free.argtypes = [ctypes.c_void_p]
    lib.memcached_behavior_set.restype = ctypes.c_int
    lib.memcached_behavior_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    lib.memcached_server_add_with_weight.restype = ctypes.c_int
    lib.memcached_server_add_with_weight.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16, ctypes.c_uint32]
    lib.memcached_generate_hash.restype = ctypes.c_uint32
    lib.memcached_generate_hash.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    out = []
    for ring in rings:
        memc = lib.memcached_create(None)
        rc = lib.memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1)
        assert rc == MEMCACHED_SUCCESS, rc
        for host, port, weight in ring:
            rc = lib.memcached_server_add_with_weight(memc, host.encode(), port, weight)
            assert rc == MEMCACHED_SUCCESS, (host, port, rc)
        out.append([lib.memcached_generate_hash(memc, k, len(k)) for k in keys])
        lib.memcached_free(memc)
    return out


def pylibmc_placement(rings, keys):
    import pylibmc

    out = []
    for ring in rings:
        servers = [f"{host}:{port}" for host, port, _ in ring]
        for server in servers:
            pylibmc.Client([server]).flush_all()
        client = pylibmc.Client(servers, behaviors={"ketama_weighted": True})
        for i, key in enumerate(keys):
            client.set(key, str(i).encode())
        holders = [None] * len(keys)
        for index, server in enumerate(servers):
            alone = pylibmc.Client([server])
            found = alone.get_multi(keys)
            for i, key in enumerate(keys):
                if key in found:
                    assert holders[i] is None, f"{key!r} on two servers"
                    holders[i] = index
        out.append(holders)
    return out


def main():
    spec = json.load(sys.stdin)
    keys = [bytes.fromhex(k) for k in spec["keys"]]
    rings = spec["rings"]
    if sys.argv[1] == "libmemcached":
        print(json.dumps(libmemcached(rings, keys)))
    elif sys.argv[1] == "pylibmc":
        print(json.dumps(pylibmc_placement(rings, keys)))
    else:
        sys.exit(f"unknown client {sys.argv[1]}")


if __name__ == "__main__":
    main()
