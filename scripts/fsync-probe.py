#!/usr/bin/env python3
"""What one fdatasync costs on this disk, as the log meets it.

Usage: scripts/fsync-probe.py [DIR] (default /var/tmp; never a tmpfs). Writes 2 KiB
with pwrite and fdatasyncs, 3,000 times, into a 64 MiB file reserved with
fallocate (as Kura reserves a segment) and into one written with zeros first; then
two and three threads syncing one file at once; then, into zeros with O_DIRECT (each
2 KiB step rewrites its 4 KiB block): the write alone, the write and fdatasync, the
write with O_DSYNC, and an fdatasync with nothing to write (the cache flush alone).
Prints the median and 90th percentile of each, and how many a second.
"""
import mmap
import os
import sys
import threading
import time

DIR = sys.argv[1] if len(sys.argv) > 1 else "/var/tmp"
SIZE = 64 << 20
ROUNDS = 3000


def make(prefill, flags=0):
    path = os.path.join(DIR, f"fsync-probe-{os.getpid()}.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if prefill:
        zeros = b"\0" * (1 << 20)
        for _ in range(SIZE >> 20):
            os.write(fd, zeros)
    else:
        os.posix_fallocate(fd, 0, SIZE)
    os.fsync(fd)
    if flags:
        os.close(fd)
        fd = os.open(path, os.O_RDWR | flags)
    os.unlink(path)
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
          f"p90 {took[int(len(took) * 0.9)] * 1e6:.0f} us, {len(took) / elapsed:.0f} a second")


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

# O_DIRECT needs an aligned buffer (an anonymous mapping is page-aligned) and whole
# blocks: each 2 KiB step writes the 4 KiB block it ends in.
block = mmap.mmap(-1, 8192)
block.write(os.urandom(8192))
for what, flags, sync in (("O_DIRECT write alone", os.O_DIRECT, False),
                          ("O_DIRECT write + fdatasync", os.O_DIRECT, True),
                          ("O_DIRECT | O_DSYNC write", os.O_DIRECT | os.O_DSYNC, False)):
    fd = make(True, flags)
    took = []
    start = time.perf_counter()
    for i in range(ROUNDS):
        at = i * 2048
        first = at & ~4095
        t = time.perf_counter()
        os.pwrite(fd, memoryview(block)[:((at + 2048 + 4095) & ~4095) - first], first)
        if sync:
            os.fdatasync(fd)
        took.append(time.perf_counter() - t)
    report(f"{what}, into zeros", took, time.perf_counter() - start)
    os.close(fd)

fd = make(True)
took = []
start = time.perf_counter()
for _ in range(ROUNDS):
    t = time.perf_counter()
    os.fdatasync(fd)
    took.append(time.perf_counter() - t)
report("fdatasync with nothing to write", took, time.perf_counter() - start)
os.close(fd)
