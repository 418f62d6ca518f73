#!/usr/bin/env python3
"""Many short throughput runs, a fresh server each, servers in turn.

On two cores shared by the client's and the server's threads, a run of the `set`
workload falls into one of two regimes that differ by 15-20% (docs/bench.md,
"Lockstep pairs"), and which one is settled as the threads first land on the CPUs.
A server that keeps running across repetitions keeps its regime, so five repetitions
say little. This starts each server anew for every run, takes the servers in turn
round after round, and reports per server the median, the mean and how many runs
were in the slow regime (p99 at or above --slow-p99-us).

Needs release builds of `kura` and `kura-bench` in target/release, and memcached.

  scripts/set-rounds.py --rounds 10 memcached kura:interval kura:none
  scripts/set-rounds.py --rounds 10 --kura-bin /tmp/kura-old kura:interval \\
      --kura-bin-b target/release/kura kurab:interval
  scripts/set-rounds.py --rounds 10 --bin old=/tmp/kura-old --bin new=target/release/kura \\
      memcached old:interval new:interval
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "kura-bench")


def start(spec, port, data_dir, bins):
    if spec == "memcached":
        cmd = ["memcached", "-U", "0", "-l", "127.0.0.1", "-p", str(port), "-t", "4",
               "-m", "1024", "-c", "4096"]
        if os.geteuid() == 0:
            cmd += ["-u", "root"]
    else:
        name, _, mode = spec.partition(":")
        cmd = [bins[name], "-p", str(port), "-l", "127.0.0.1", "--data-dir", data_dir,
               "--durability", mode or "interval", "-t", "4"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_once(spec, args, bins):
    data_dir = tempfile.mkdtemp(prefix="kura-rounds-", dir=args.data_root)
    server = start(spec, args.port, data_dir, bins)
    try:
        time.sleep(0.7)
        out = subprocess.run(
            [BENCH, "throughput", "--server", f"127.0.0.1:{args.port}", "--workloads",
             args.workload, "--duration", str(args.duration), "--warmup", "1", "--reps", "1",
             "--out-dir", data_dir],
            capture_output=True, text=True, timeout=args.duration * 4 + 60, check=True,
        ).stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
    shutil.rmtree(data_dir, ignore_errors=True)
    lines = out.splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("server@"))
    # The table's header is two lines up (header, rule, rows); its column names hold
    # single spaces, so they are split on runs of two or more.
    names = re.split(r"\s{2,}", lines[at - 2].strip())
    field = dict(zip(names[1:], lines[at].split()[1:]))
    # ops/s, p50 us, p99 us, client CPU %, others' CPU % (the server's, on a quiet machine:
    # kura-bench does not know a --server's PID)
    return (int(field["ops/s"]), int(field["p50 us"]), int(field["p99 us"]),
            cpu(field["client cpu %"]), cpu(field["others cpu %"]))


def cpu(field):
    return None if field == "-" else int(field)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("servers", nargs="+", help="memcached, or NAME:MODE where NAME is kura, kurab or a --bin name")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--workload", default="set")
    p.add_argument("--duration", type=int, default=8)
    p.add_argument("--port", type=int, default=21631)
    p.add_argument("--slow-p99-us", type=int, default=2200)
    p.add_argument("--kura-bin", default=os.path.join(ROOT, "target", "release", "kura"))
    p.add_argument("--kura-bin-b", help="a second kura binary, named kurab")
    p.add_argument("--bin", action="append", default=[], metavar="NAME=PATH",
                   help="more kura binaries, each named NAME in the server list")
    p.add_argument("--data-root", default="/var/tmp", help="not tmpfs: fsync must mean something")
    args = p.parse_args()
    bins = {"kura": args.kura_bin}
    if args.kura_bin_b:
        bins["kurab"] = args.kura_bin_b
    for named in args.bin:
        name, _, path = named.partition("=")
        bins[name] = path
    runs = {s: [] for s in args.servers}
    for r in range(1, args.rounds + 1):
        for spec in args.servers:
            ops, p50, p99, client, others = run_once(spec, args, bins)
            runs[spec].append((ops, p99))
            print(f"{r} {spec} {ops} p50 {p50} p99 {p99} cpu client {client}% others {others}%",
                  flush=True)
    base = statistics.median(o for o, _ in runs[args.servers[0]])
    for spec, rs in runs.items():
        ops = sorted(o for o, _ in rs)
        slow = sum(1 for _, p99 in rs if p99 >= args.slow_p99_us)
        med = statistics.median(ops)
        print(f"{spec:16s} median {med:8.0f} ({med / base:.2f})  mean {statistics.mean(ops):8.0f}"
              f"  min {ops[0]}  max {ops[-1]}  slow {slow}/{len(rs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
