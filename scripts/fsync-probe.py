#!/usr/bin/env python3
"""What one fdatasync costs on this disk, as the log meets it.

Usage: scripts/fsync-probe.py [DIR] (default /var/tmp; never a tmpfs). Writes 2 KiB
with pwrite and fdatasyncs, 3,000 times, into a 64 MiB file reserved with
fallocate (as Kura reserves a segment) and into one written with zeros first; then
two and three threads syncing one file at once. Prints the median and 90th
percentile of a sync, and syncs a second.
"""
import os
import sys
import threading
import time

DIR = sys.argv[1] if len(sys.argv) > 1 else "/var/tmp"
SIZE = 64 << 20
ROUNDS = 3000


def make(prefill):
    path = os.path.join(DIR, f"fsync-probe-{os.getpid()}.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.unlink(path)
    if prefill:
        zeros = b"\0" * (1 << 20)
        for _ in range(SIZE >> 20):
            os.write(fd, zeros)
    else:
        os.posix_fallocate(fd, 0, SIZE)
    os.fsync(fd)
    return fd


def syncs(fd, n, stride, slot, out):
    buf = os.urandom(2048)
    took = []
    for i in range(n):
        os.pwrite(fd, buf, (i * stride + slot) * 2048)
        start = time.perf_counter()
        os.fdatasync(fd)
        took.append(time.perf_counter() - start)
    out[slot] = took


def report(what, took, elapsed):
    took = sorted(took)
    print(f"{what}: p50 {took[len(took) // 2] * 1e6:.0f} us, "
          f"p90 {took[int(len(took) * 0.9)] * 1e6:.0f} us, {len(took) / elapsed:.0f} syncs/s")


for prefill, what in ((False, "into fallocated space"), (True, "into zeros")):
    fd = make(prefill)
    out = {}
    start = time.perf_counter()
    syncs(fd, ROUNDS, 1, 0, out)
    report(what, out[0], time.perf_counter() - start)
    os.close(fd)

fd = make(True)
for threads in (2, 3):
    out = {}
    workers = [threading.Thread(target=syncs, args=(fd, ROUNDS // threads, threads, k, out))
               for k in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    report(f"{threads} threads, one file, into zeros", sum(out.values(), []),
           time.perf_counter() - start)
os.close(fd)
