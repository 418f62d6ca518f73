"""Starting a Kura for the measuring scripts beside this file: its own data
directory, ports of its own (0: Kura picks and prints them)."""

import re
import subprocess
import sys


def start(kura, data, memory_mib, durability="interval"):
    """Starts `kura` on `data` with `-m memory_mib`; returns the process and its SQL
    port once it prints that it listens."""
    proc = subprocess.Popen(
        [kura, "-p", "0", "--sql-port", "0", "-m", str(memory_mib),
         "--durability", durability, "--data-dir", data],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = None
    for line in proc.stdout:
        m = re.match(r"kura sql listening on .*:(\d+)", line)
        if m:
            port = int(m.group(1))
        if line.startswith("kura listening on"):
            break
    if port is None:
        proc.kill()
        sys.exit(f"{kura} printed no SQL port")
    return proc, port
