"""One ring grow from 2 shards to 4 under a probe, on loopback (issue 42).

Starts a private etcd and four single-node shards (fsync), sets the ring s1,s2,
fills N keys of 100 bytes through pylibmc's ketama, then runs one pylibmc client
over the old ring setting random filled keys for SECONDS; 8 s in, `kura cluster
ring` grows the ring to s1..s4. Prints the grow's duration and the probe's sets a
second, p50, p99 and longest wait before, during and after it.

Usage: target/pyenv/bin/python scripts/grow-probe.py [--kura target/release/kura]
       [--keys 500000] [--seconds 40]
Until `kura-bench cluster` exists, this is the measurement; ports 24101-24104 and
23890-23900.
"""
import argparse
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time

import pylibmc

ETCD = "http://127.0.0.1:23890"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kura", default="target/release/kura")
    ap.add_argument("--keys", type=int, default=500_000)
    ap.add_argument("--seconds", type=float, default=40)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kura-grow-probe-", dir=os.getcwd())
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["etcd", "--name=probe", f"--data-dir={work}/etcd",
             f"--listen-client-urls={ETCD}", f"--advertise-client-urls={ETCD}",
             "--listen-peer-urls=http://127.0.0.1:23900",
             "--initial-advertise-peer-urls=http://127.0.0.1:23900",
             "--initial-cluster=probe=http://127.0.0.1:23900"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(2)
        for n in range(1, 5):
            procs.append(subprocess.Popen(
                [args.kura, "-p", f"2410{n}", "--sql-port", "off", "--data-dir", f"{work}/n{n}",
                 "--etcd", ETCD, "--cluster", "probe", "--shard", f"s{n}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(6)
        old = [f"127.0.0.1:2410{n}" for n in (1, 2)]
        new = old + [f"127.0.0.1:2410{n}" for n in (3, 4)]
        ring = lambda nodes: ",".join(f"s{i + 1}={a}" for i, a in enumerate(nodes))  # noqa: E731
        cluster = [args.kura, "cluster", "ring", "--etcd", ETCD, "--cluster", "probe", "--shards"]
        subprocess.run(cluster + [ring(old)], check=True, stdout=subprocess.DEVNULL)
        time.sleep(1)
        behaviors = {"ketama_weighted": True}
        filler = pylibmc.Client(old, behaviors=behaviors)
        began = time.time()
        for s in range(0, args.keys, 1000):
            batch = {f"f:{i}": b"v" * 100 for i in range(s, min(args.keys, s + 1000))}
            assert filler.set_multi(batch) == []
        print(f"filled {args.keys} keys in {time.time() - began:.1f} s")

        lat, errors = [], [0]
        t0 = time.time()

        def probe():
            c = pylibmc.Client(old, behaviors={**behaviors, "receive_timeout": 10_000_000})
            while time.time() - t0 < args.seconds:
                key = f"f:{random.randrange(args.keys)}"
                s = time.perf_counter()
                try:
                    c.set(key, b"x" * 100)
                except pylibmc.Error:
                    errors[0] += 1
                lat.append((time.time() - t0, time.perf_counter() - s))

        thread = threading.Thread(target=probe)
        thread.start()
        time.sleep(8)
        start = time.time() - t0
        subprocess.run(cluster + [ring(new)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() - t0
        thread.join()

        def line(name, pick):
            chosen = [(t, l) for t, l in lat if pick(t)]
            xs = sorted(l for _, l in chosen)
            span = max(t for t, _ in chosen) - min(t for t, _ in chosen)
            print(f"{name}: {len(xs) / span:.0f} sets/s, p50 {xs[len(xs) // 2] * 1e3:.2f} ms, "
                  f"p99 {xs[int(len(xs) * .99)] * 1e3:.2f} ms, max {xs[-1] * 1e3:.1f} ms")

        print(f"grow took {end - start:.1f} s; {errors[0]} sets failed")
        line("before", lambda t: t < start)
        line("during", lambda t: start <= t <= end)
        line("after (old ring, half the keys forwarded)", lambda t: t > end + 1)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
