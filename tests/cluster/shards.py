"""Two shards on a ketama ring, through the clients users run.

Usage: shards.py CASE ARGS...

Cases:
  any_node A B A2   A and B: the addresses the ring names for shards a and b (their
                    primaries); A2: shard a's replica. pylibmc with ketama_weighted
                    over [A, B] sets 300 keys, each straight to its owner. Then every
                    key read through each single node (text, pymemcache) gives its
                    value; a multi-get of all of them through B answers every hit in
                    the order asked; keys set through A2 alone (text), through B alone
                    (pylibmc's binary protocol) and with meta commands through B are
                    read back through pylibmc's ketama, that is from their owners; one
                    pipeline through B of sets, gets and noreply deletes over keys of
                    both shards answers in the order asked.
  direct PROXY      PROXY: nutcracker with the pool `kura cluster nutcracker` printed.
                    Sets and gets 200 keys through it.

Exits non-zero with the failing check.
"""
import socket
import sys

import pylibmc
import pymemcache.client.base


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def single(address):
    host, port = address.rsplit(":", 1)
    return pymemcache.client.base.Client((host, int(port)), timeout=10)


def raw(address, request):
    """Sends `request` on a socket of its own and reads until the reply ends."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request + b"mn\r\n")
        reply = b""
        while not reply.endswith(b"MN\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply[: -len(b"MN\r\n")]


def any_node(a, b, a2):
    ketama = pylibmc.Client([a, b], behaviors={"ketama_weighted": True})
    keys = [f"key:{i}" for i in range(300)]
    for i, key in enumerate(keys):
        check(f"set {key}", ketama.set(key, f"v{i}".encode()), True)
    for node in (a, b, a2):
        client = single(node)
        for i, key in enumerate(keys):
            check(f"get {key} through {node}", client.get(key), f"v{i}".encode())
    # One multi-get through B: split between the shards, merged in order.
    reply = raw(b, b"get " + " ".join(keys).encode() + b"\r\n")
    lines = reply.split(b"\r\n")
    asked = [l.split(b" ")[1].decode() for l in lines if l.startswith(b"VALUE ")]
    check("keys of a multi-get, in order", asked, keys)
    check("the multi-get's end", reply.endswith(b"END\r\n"), True)
    # Written through one node each, read from the owners.
    single(a2).set_many({f"a2:{i}": b"x" for i in range(50)}, noreply=False)
    binary = pylibmc.Client([b], binary=True)
    for i in range(50):
        check("binary set through b", binary.set(f"bin:{i}", b"y"), True)
    for i in range(20):
        check("ms through b", raw(b, f"ms meta:{i} 1 T0\r\nz\r\n".encode()), b"HD\r\n")
    for prefix, value, n in (("a2", b"x", 50), ("bin", b"y", 50), ("meta", b"z", 20)):
        got = ketama.get_multi([f"{prefix}:{i}" for i in range(n)])
        check(f"{prefix} keys at their owners", sorted(got.values()), [value] * n)
    check("mg through b", raw(b, b"mg key:7 v\r\n"), b"VA 2\r\nv7\r\n")
    # One pipeline through b over keys of both shards: each key set, read, set
    # again, read again, deleted under noreply, and read once more; the replies come
    # in the order asked, each read seeing the set before it.
    pipeline, want = b"", b""
    for i in range(100):
        key = f"pipe:{i}".encode()
        for value in (b"first", b"second"):
            pipeline += b"set " + key + b" 0 0 %d\r\n" % len(value) + value + b"\r\n"
            pipeline += b"get " + key + b"\r\n"
            want += b"STORED\r\nVALUE " + key + b" 0 %d\r\n" % len(value) + value + b"\r\nEND\r\n"
        pipeline += b"delete " + key + b" noreply\r\nget " + key + b"\r\n"
        want += b"END\r\n"
    check("a pipeline over both shards, in order", raw(b, pipeline), want)
    print("every key reached through every node, and held by its owner")


def direct(proxy):
    client = single(proxy)
    for i in range(200):
        check("set through nutcracker", client.set(f"nc:{i}", b"n", noreply=False), True)
    for i in range(200):
        check("get through nutcracker", client.get(f"nc:{i}"), b"n")
    print("200 keys through nutcracker")


case = sys.argv[1]
if case == "any_node":
    any_node(*sys.argv[2:5])
elif case == "direct":
    direct(sys.argv[2])
else:
    sys.exit(f"unknown case {case}")
