#!/usr/bin/env python3
"""Index memory per key and restart time, at N keys.

Starts target/release/kura on a fresh data directory, loads N keys (`key<i>`,
VALUE_SIZE-byte values) with pipelined sets, reads `stats` (index bytes per key, RSS),
reads a sample of keys so they are in memory, stops the server with SIGTERM (which
writes the index checkpoint) or, with --kill, SIGKILL (a crash: the newest checkpoint
is whatever maintenance last wrote), drops the page cache when run as root, starts it
again and reports how long until it answers, its peak resident memory by then
(VmHWM), and how many reads of the sampled keys then needed the disk.

    scripts/restart-bench.py [--keys 10000000] [--value-size 100] [--memory-mib 256]
        [--kill] [--kura-arg=--checkpoint-log-mib=0 ...]
"""
import argparse, os, random, signal, socket, subprocess, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--keys", type=int, default=10_000_000)
ap.add_argument("--value-size", type=int, default=100)
ap.add_argument("--memory-mib", type=int, default=256)
ap.add_argument("--port", type=int, default=23091)
ap.add_argument("--bin", default="target/release/kura")
ap.add_argument("--dir", default=None, help="data directory (default: a new one under target/)")
ap.add_argument("--kill", action="store_true", help="stop with SIGKILL instead of SIGTERM")
ap.add_argument("--kura-arg", action="append", default=[], help="an extra argument for kura")
args = ap.parse_args()

data = args.dir or tempfile.mkdtemp(prefix="restart-bench-", dir="target")
cmd = [args.bin, "-p", str(args.port), "--data-dir", data, "--durability", "interval",
       "-m", str(args.memory_mib)] + args.kura_arg


def start():
    t = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", args.port), timeout=5)
            s.sendall(b"version\r\n")
            if s.recv(100).startswith(b"VERSION"):
                return p, s, time.time() - t
        except OSError:
            time.sleep(0.01)


def stats(s):
    s.sendall(b"stats\r\n")
    got = b""
    while not got.endswith(b"END\r\n"):
        got += s.recv(1 << 16)
    return {l.split()[1]: l.split()[2] for l in got.decode().splitlines() if l.startswith("STAT")}


def until(s, marker, count=1):
    got = b""
    while got.count(marker) < count:
        got += s.recv(1 << 20)
    return got


p, s, _ = start()
value = b"v" * args.value_size
t = time.time()
for base in range(0, args.keys, 5000):
    batch = b"".join(b"set key%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value)
                     for i in range(base, min(base + 5000, args.keys)))
    s.sendall(batch + b"mn\r\n")
    if until(s, b"MN\r\n") != b"MN\r\n":
        raise SystemExit("a set failed")
st = stats(s)
keys = int(st["curr_items"])
print(f"loaded {keys} keys in {time.time() - t:.1f} s")
print(f"index_bytes {st['index_bytes']} = {int(st['index_bytes']) / keys:.1f} bytes a key; "
      f"rss {int(st['rss_bytes']) >> 20} MiB against -m {args.memory_mib}")
random.seed(7)
hot = random.sample(range(args.keys), min(args.keys, 200_000))
for i in range(0, len(hot), 100):
    s.sendall(b"".join(b"get key%d\r\n" % k for k in hot[i:i + 100]))
    until(s, b"END\r\n", len(hot[i:i + 100]))
st = stats(s)
print(f"before the stop: {st['checkpoints']} checkpoints written, log at LSN {st['log_appended_lsn']}")
t = time.time()
if args.kill:
    p.send_signal(signal.SIGKILL)
    p.wait()
    print("killed (SIGKILL)")
else:
    p.send_signal(signal.SIGTERM)
    p.wait()
    print(f"shutdown with checkpoint: {time.time() - t:.2f} s")
if os.geteuid() == 0:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    print("page cache dropped")
p, s, took = start()
with open(f"/proc/{p.pid}/status") as f:
    hwm = next(l.split()[1] for l in f if l.startswith("VmHWM"))
print(f"restart: accepting after {took:.2f} s; peak resident {int(hwm) >> 10} MiB")
time.sleep(3)
st = stats(s)
print(f"after 3 s: {st['values_in_memory']} versions in memory, "
      f"{st['checkpoint_restored_keys']} keys from the checkpoint")
before = int(st["value_reads"])
sample = random.sample(hot, 2000)
for k in sample:
    s.sendall(b"get key%d\r\n" % k)
    until(s, b"END\r\n")
reads = int(stats(s)["value_reads"]) - before
print(f"of 2000 reads of keys read before the restart, {reads} went to disk")
p.terminate()
p.wait()
