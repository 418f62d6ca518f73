"""Starting a Kura for the measuring scripts beside this file: its own data
directory, ports of its own (0: Kura picks and prints them)."""

import re
import subprocess
import sys


def start(kura, data, memory_mib, durability="interval"):
    """Starts `kura` on `data` with `-m memory_mib`; returns the process and its SQL
    port once it prints that it listens."""
    proc, port, _ = start_both(kura, data, memory_mib, durability)
    return proc, port


def start_both(kura, data, memory_mib, durability="interval"):
    """As `start`; returns the process, its SQL port and its memcached port."""
    proc = subprocess.Popen(
        [kura, "-p", "0", "--sql-port", "0", "-m", str(memory_mib),
         "--durability", durability, "--data-dir", data],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = memcached = None
    for line in proc.stdout:
        m = re.match(r"kura sql listening on .*:(\d+)", line)
        if m:
            port = int(m.group(1))
        m = re.match(r"kura listening on .*:(\d+)", line)
        if m:
            memcached = int(m.group(1))
            break
    if port is None or memcached is None:
        proc.kill()
        sys.exit(f"{kura} printed no SQL or memcached port")
    return proc, port, memcached
