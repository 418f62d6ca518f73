"""Table ranges read by memcached's common clients, each reading a range whole.

Usage: table_ranges.py PORT, against a kura started with
tests/transcripts/tables/schema.sql. A range read through get is one item under the
key asked for, whose value frames every row by lengths (docs/tables.md, Ranges):

    ROW <key bytes> <value bytes> <flags> <cas>\r\n<key>\r\n<value>\r\n ... END\r\n

(CUT\r\n instead of END\r\n when the range goes on past its row limit). pymemcache,
python-memcached and pylibmc each read a 300-row range and split it back into
exactly the rows a get of each row returns, alone and in a multi-get with a plain
key. Exits non-zero, naming the failed check.
"""
import sys

import memcache
import pylibmc
import pymemcache.client.base

port = int(sys.argv[1])
RANGE = "@@players_by_level.@>=10@<20"


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r:.300}, want {want!r:.300}")


def split(blob):
    """The rows of a range item as (key, value, flags, cas), and whether it was cut."""
    rows, pos = [], 0
    while True:
        eol = blob.index(b"\r\n", pos)
        head = blob[pos:eol].split(b" ")
        pos = eol + 2
        if head == [b"END"] or head == [b"CUT"]:
            check(pos, len(blob), "bytes after the range's last line")
            return rows, head == [b"CUT"]
        check(head[0], b"ROW", "a row's line")
        key_bytes, value_bytes, flags, cas = (int(x) for x in head[1:])
        key = blob[pos : pos + key_bytes]
        pos += key_bytes
        check(blob[pos : pos + 2], b"\r\n", "the end of a row's key")
        pos += 2
        value = blob[pos : pos + value_bytes]
        pos += value_bytes
        check(blob[pos : pos + 2], b"\r\n", "the end of a row's value")
        pos += 2
        rows.append((key, value, flags, cas))


writer = pymemcache.client.base.Client(("127.0.0.1", port))
levels = {}
for i in range(1, 331):
    # 300 rows in range (levels 10 to 19), 30 outside it (5 and 25); names hold the
    # separator, a backslash, CR LF and lines that look like the framing's own.
    level = 10 + i % 10 if i <= 300 else (5 if i % 2 else 25)
    levels[i] = level
    name = f"n\\|{i}\r\nEND\r\n\\\\"
    value = f"{name}|p{i}@x.com|{level}".encode()
    check(writer.set(f"@@players.{i}", value, noreply=False), True, f"set row {i}")
check(writer.set("plain", b"memcached's own", noreply=False), True, "set a plain key")

in_range = sorted((levels[i], i) for i in levels if 10 <= levels[i] < 20)
check(len(in_range), 300, "rows in the range")
want = []
for _, i in in_range:
    key = f"@@players.{i}"
    value = writer.get(key)
    if value is None:
        raise SystemExit(f"{key} missing")
    want.append((key.encode(), value))


def check_range(blob, what):
    if not isinstance(blob, bytes):
        raise SystemExit(f"{what}: got {blob!r:.200}, want the range's bytes")
    rows, cut = split(blob)
    check(cut, False, f"{what}: cut")
    check([(k, v) for k, v, _, _ in rows], want, f"{what}: rows")


clients = {
    "pymemcache": pymemcache.client.base.Client(("127.0.0.1", port)),
    "python-memcached": memcache.Client([f"127.0.0.1:{port}"]),
    "pylibmc": pylibmc.Client([f"127.0.0.1:{port}"]),
}
for name, client in clients.items():
    check_range(client.get(RANGE), f"{name} get")
    many = client.get_multi([RANGE, "plain"])
    check(sorted(many), sorted([RANGE, "plain"]), f"{name} get_multi keys")
    check_range(many[RANGE], f"{name} get_multi of the range")
    check(many["plain"], b"memcached's own", f"{name} get_multi of the plain key")

# gets: the item's CAS is the highest of its rows'.
blob, cas = writer.gets(RANGE)
rows, _ = split(blob)
check(int(cas), max(row_cas for _, _, _, row_cas in rows), "the range's CAS")

# Past the row limit (1,000) the range is cut: its first 1,000 rows, then CUT.
for i in range(1001, 1702):
    value = f"m{i}|q{i}@x.com|15".encode()
    check(writer.set(f"@@players.{i}", value, noreply=False), True, f"set row {i}")
rows, cut = split(writer.get(RANGE))
check((len(rows), cut), (1000, True), "a range past its limit")
rows, cut = split(writer.get("@@players_by_level.@>=10@<15"))
check(cut, False, "a range within its limit")

# mg's r flag: each row on its own line, then EN with r1 for a cut range.
import socket

raw = socket.create_connection(("127.0.0.1", port))
raw.sendall(f"mg {RANGE} r k\r\n".encode())
reply = b""
while not reply.endswith(b"\r\n") or b"\r\nEN " not in b"\r\n" + reply:
    chunk = raw.recv(65536)
    if not chunk:
        raise SystemExit("mg r: the connection closed")
    reply += chunk
lines = reply.split(b"\r\n")[:-1]
check(len(lines), 1001, "mg r: lines")
check(all(line.startswith(b"HD k@@players.") for line in lines[:-1]), True, "mg r: rows")
check(lines[-1], f"EN r1 k{RANGE}".encode(), "mg r: the end of a cut range")
print("ok")
