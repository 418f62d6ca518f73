#!/usr/bin/env python3
"""Pools the paired ratios of several `kura-bench throughput` runs.

Each repetition of a run measures every backend once, minutes apart from the next
repetition, on a host whose speed drifts by more than the differences in question.
Dividing each backend's ops/s by memcached's in the same repetition cancels the
drift; pooling the ratios of several runs shows what one run of nine cannot.

  scripts/pool-throughput.py target/kura-bench/throughput-*.csv

Prints, per workload and backend: the number of paired repetitions, the median and
the geometric mean of their ratios, and in how many the backend was ahead.
"""

import collections
import csv
import math
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ratios = collections.defaultdict(list)
    for path in sys.argv[1:]:
        reps = collections.defaultdict(dict)
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                reps[(row["workload"], row["rep"])][row["backend"]] = float(row["ops_per_sec"])
        for (workload, _), by_backend in reps.items():
            base = by_backend.get("memcached")
            if not base:
                continue
            for backend, ops in by_backend.items():
                if backend != "memcached":
                    ratios[(workload, backend)].append(ops / base)
    print(f"{len(sys.argv) - 1} runs; each repetition's ops/s divided by memcached's in the same repetition")
    print(f"{'workload':<10} {'backend':<15} {'reps':>4} {'median':>7} {'geomean':>8} {'ahead':>7}")
    for (workload, backend), rs in sorted(ratios.items()):
        geomean = math.exp(sum(math.log(r) for r in rs) / len(rs))
        ahead = sum(r > 1 for r in rs)
        print(f"{workload:<10} {backend:<15} {len(rs):>4} {statistics.median(rs):>7.3f} {geomean:>8.3f} {ahead:>3}/{len(rs)}")


if __name__ == "__main__":
    main()
