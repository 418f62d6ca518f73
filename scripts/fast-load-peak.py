#!/usr/bin/env python3
"""Peak resident memory of a server under one connection pipelining N 1,000-byte sets.

Usage: scripts/fast-load-peak.py PORT PID N. Samples the server's VmRSS every 50 ms
while the sets go out (1,000 per write, replies read on another thread), then prints
the time, the sampled peak, VmHWM and VmRSS, and the server's memory counters.
Start the server first, for example:

    target/release/kura -p 23777 --sql-port off --data-dir /var/tmp/fl -m 128 --durability interval &
    scripts/fast-load-peak.py 23777 $! 1000000
"""
import socket, sys, time, subprocess, threading
port=int(sys.argv[1]); pid=int(sys.argv[2]); n=int(sys.argv[3])
s=socket.create_connection(("127.0.0.1",port))
v=b"x"*1000
peak={'rss':0}
stop=False
def watch():
    while not stop:
        with open(f"/proc/{pid}/status") as f:
            for l in f:
                if l.startswith("VmRSS"): peak['rss']=max(peak['rss'], int(l.split()[1]))
        time.sleep(0.05)
t=threading.Thread(target=watch); t.start()
def reader():
    got=0; buf=b""
    while got < n:
        d=s.recv(1<<20)
        if not d: break
        got += d.count(b"STORED\r\n")
    return got
r=threading.Thread(target=reader); r.start()
t0=time.time()
batch=b"".join(b"set k%d 0 0 1000\r\n%s\r\n" % (i, v) for i in range(1000))
for b in range(n//1000):
    s.sendall(batch.replace(b"set k", b"set b%d_" % b))
r.join(); stop=True; t.join()
with open(f"/proc/{pid}/status") as f:
    st={l.split(':')[0]: l.split()[1] for l in f if len(l.split())>1}
print(f"{n} sets in {time.time()-t0:.1f}s; peak RSS sampled {peak['rss']>>10} MiB; VmHWM {int(st['VmHWM'])>>10} MiB; VmRSS now {int(st['VmRSS'])>>10} MiB")

s2=socket.create_connection(("127.0.0.1",port)); s2.sendall(b"stats\r\n"); g=b""
while not g.endswith(b"END\r\n"): g+=s2.recv(1<<16)
for l in g.decode().splitlines():
    if any(k in l for k in ("value_cache_bytes","index_bytes","other_memory","rss_bytes","allocated_bytes","allocator_resident","limit_maxbytes","curr_items")): print(l)
