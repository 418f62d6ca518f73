"""/metrics read by the Prometheus project's own parser, against `stats`.

Usage: metrics_check.py MEMCACHED_PORT METRICS_PORT. Runs some gets, sets and misses
through pymemcache, then reads /metrics with prometheus_client's OpenMetrics parser
(which refuses malformed exposition) and `stats`, and checks that they agree.
Exits non-zero, naming the failed check.
"""
import sys
import urllib.request

import pymemcache.client.base
from prometheus_client.openmetrics.parser import text_string_to_metric_families

mc_port, metrics_port = int(sys.argv[1]), int(sys.argv[2])


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


mc = pymemcache.client.base.Client(("127.0.0.1", mc_port))
for i in range(20):
    mc.set(f"k{i}", b"v" * i, noreply=False)
for i in range(30):
    mc.get(f"k{i}")
mc.delete("k0", noreply=False)
mc.delete("nokey", noreply=False)

with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
    check(reply.status, 200, "status")
    check(reply.headers["Content-Type"].split(";")[0], "application/openmetrics-text", "content type")
    text = reply.read().decode()
families = {f.name: f for f in text_string_to_metric_families(text)}
stats = {k.decode(): v for k, v in mc.stats().items()}


def sample(family, suffix="", **labels):
    for s in families[family].samples:
        if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise SystemExit(f"no sample {family}{suffix} {labels}")


check(families["memcached_commands"].type, "counter", "commands is a counter")
check(sample("memcached_commands", "_total", command="get", status="hit"), float(stats["get_hits"]), "get hits")
check(sample("memcached_commands", "_total", command="get", status="miss"), float(stats["get_misses"]), "get misses")
check(stats["get_hits"], 20, "stats get_hits")
check(sample("memcached_commands", "_total", command="delete", status="hit"), 1.0, "delete hits")
check(sample("memcached_commands", "_total", command="set", status="hit"), float(stats["cmd_set"]), "sets")
check(sample("memcached_current_items"), float(stats["curr_items"]), "current items")
check(sample("memcached_current_connections") >= 1, True, "current connections")
check(sample("memcached_up"), 1.0, "up")
for histogram in ("kura_batch_seconds", "kura_fsync_seconds"):
    check(families[histogram].type, "histogram", f"{histogram} is a histogram")
    count = sample(histogram, "_count")
    check(sample(histogram, "_bucket", le="+Inf"), count, f"{histogram} +Inf bucket")
    check(count > 0, True, f"{histogram} has observations")
print("metrics: all checks passed")
