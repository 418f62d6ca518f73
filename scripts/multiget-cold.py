#!/usr/bin/env python3
"""Multi-get latency with the values out of memory, and what each request read.

Starts Kura in a memory cgroup (page cache included; v1 or v2, detected) with `-m`
half the limit, loads far more data than the limit through `kura-bench multiget
--server`, and lets it time `get k1 ... kn` for each n. With the data several times
the limit, neither Kura's cache nor the page cache holds most values: a request's
misses go to the disk. Kura's `stats` and /proc/<pid>/io then say how many records
were read back and how many bytes came from the device.

Needs root (cgroups) and release builds of `kura` and `kura-bench` in target/release.

  scripts/multiget-cold.py --keys 2000000 --value-size 1000 --limit-mib 128 --pick run
  scripts/multiget-cold.py --keys 2000000 --value-size 1000 --limit-mib 128 --pick scattered
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cgroup_dir(name):
    """A new memory cgroup directory and the files to limit it and join it."""
    v1 = "/sys/fs/cgroup/memory"
    if os.path.isdir(v1):
        path = os.path.join(v1, name)
        os.mkdir(path)
        return path, ["memory.limit_in_bytes"], "cgroup.procs"
    v2 = "/sys/fs/cgroup"
    with open(os.path.join(v2, "cgroup.controllers")) as f:
        if "memory" not in f.read().split():
            sys.exit("no memory cgroup controller")
    with open(os.path.join(v2, "cgroup.subtree_control"), "w") as f:
        f.write("+memory")
    path = os.path.join(v2, name)
    os.mkdir(path)
    return path, ["memory.max"], "cgroup.procs"


def stats(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    out = {}
    for line in data.decode().split("\r\n"):
        parts = line.split(" ")
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def read_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=2_000_000)
    p.add_argument("--value-size", type=int, default=1000)
    p.add_argument("--limit-mib", type=int, default=128)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--counts", default="1,2,5,10,20,50")
    p.add_argument("--pick", choices=["run", "scattered"], default="run")
    p.add_argument("--data-root", default="/var/tmp", help="not tmpfs: reads must hit a disk")
    p.add_argument("--kura-arg", action="append", default=[],
                   help="one more argument for kura, e.g. --kura-arg=--read-threads=64")
    a = p.parse_args()

    kura = os.path.join(ROOT, "target/release/kura")
    bench = os.path.join(ROOT, "target/release/kura-bench")
    for binary in (kura, bench):
        if not os.path.exists(binary):
            sys.exit(f"{binary} is missing: cargo build --release")
    data = tempfile.mkdtemp(prefix="kura-mgcold-", dir=a.data_root)
    cg, limit_files, procs = cgroup_dir(f"kura-mgcold-{os.getpid()}")
    for name in limit_files:
        with open(os.path.join(cg, name), "w") as f:
            f.write(str(a.limit_mib << 20))
    port = free_port()
    command = [kura, "-p", str(port), "-m", str(a.limit_mib // 2),
               "--data-dir", data, "--durability", "interval"] + a.kura_arg
    join = f"echo $$ > {os.path.join(cg, procs)} && exec \"$@\""
    server = subprocess.Popen(["sh", "-c", join, "sh"] + command)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.1)
        print(f"kura pid {server.pid} in {cg} ({a.limit_mib} MiB), -m {a.limit_mib // 2}, "
              f"{a.keys} keys x {a.value_size} bytes = {a.keys * a.value_size >> 20} MiB")
        out_dir = os.path.join(ROOT, "target/kura-bench")
        # The first run preloads and samples; the second, with other keys (another
        # seed: the first run's keys are now in memory), only reads, and is the one
        # whose reads are counted.
        run = [bench, "multiget", "--server", f"127.0.0.1:{port}", "--keys", str(a.keys),
               "--value-size", str(a.value_size), "--counts", a.counts,
               "--samples", str(a.samples), "--pick", a.pick, "--out-dir", out_dir]
        subprocess.run(run, check=True)
        before, io_before = stats(port), read_bytes(server.pid)
        subprocess.run(run + ["--no-preload", "--seed", "2"], check=True)
        after, io_after = stats(port), read_bytes(server.pid)
        requests = a.samples * len(a.counts.split(","))
        keys = a.samples * sum(int(c) for c in a.counts.split(","))
        reads = int(after["value_reads"]) - int(before["value_reads"])
        print(f"second run: {requests} requests for {keys} keys; records read back "
              f"{reads} ({reads / keys:.2f} a key); bytes from the device "
              f"{(io_after - io_before) >> 10} KiB ({(io_after - io_before) / keys / 1024:.2f} "
              f"KiB a key); RSS {int(after['rss_bytes']) >> 20} MiB against -m "
              f"{a.limit_mib // 2} MiB (index {int(after['index_bytes']) >> 20}, values "
              f"{int(after['value_cache_bytes']) >> 20}, other {int(after['other_memory_bytes']) >> 20}, "
              f"allocated {int(after['allocated_bytes']) >> 20}, active "
              f"{int(after['allocator_active_bytes']) >> 20}, metadata "
              f"{int(after['allocator_metadata_bytes']) >> 20}, allocator resident "
              f"{int(after['allocator_resident_bytes']) >> 20} MiB)")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        for _ in range(20):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.1)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
