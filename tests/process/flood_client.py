#!/usr/bin/env python3
"""A stranger that floods listeners, for flood_job.sh: it holds PER_PORT silent connections to
each PORT on HOST, more than the listener's BYTEPS_MAX_PENDING_CONNECTIONS, and opens a new one
as soon as one is closed (by the listener, or refused because nothing listens there yet or any
more). It reads and drops what the listener sends (its challenge) and never says a word. It
runs until SIGTERM or SECONDS, then prints one line per port: how many connections it opened,
how many the listener closed, and how many were refused.

Usage: flood_client.py SECONDS PER_PORT HOST PORT [PORT...]
"""
import errno
import resource
import selectors
import signal
import socket
import sys
import time

seconds, per_port, host = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ports = [int(p) for p in sys.argv[4:]]
REFUSED_PAUSE = 0.02  # a port that refuses (not listening yet, or its node died): try again soon

# The flood's sockets plus a margin, within the hard limit.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = per_port * len(ports) + 64
if soft != resource.RLIM_INFINITY and soft < want:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

sel = selectors.DefaultSelector()
stats = {p: {"opened": 0, "closed": 0, "refused": 0} for p in ports}
retry_at = []  # (time, port): connections to open again after a refusal
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)


def open_one(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    err = s.connect_ex((host, port))
    if err not in (0, errno.EINPROGRESS):
        s.close()
        stats[port]["refused"] += 1
        retry_at.append((time.monotonic() + REFUSED_PAUSE, port))
        return
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, [port, False])


def on_event(key, mask):
    s, (port, connected) = key.fileobj, key.data
    if not connected:
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        sel.unregister(s)
        if err != 0:
            s.close()
            stats[port]["refused"] += 1
            retry_at.append((time.monotonic() + REFUSED_PAUSE, port))
            return
        stats[port]["opened"] += 1
        sel.register(s, selectors.EVENT_READ, [port, True])
        return
    try:
        data = s.recv(4096)  # the challenge: read and dropped
    except OSError:
        data = b""
    if data:
        return
    sel.unregister(s)
    s.close()
    stats[port]["closed"] += 1
    open_one(port)


end = time.monotonic() + seconds
for port in ports:
    for _ in range(per_port):
        open_one(port)
while not stop and time.monotonic() < end:
    now = time.monotonic()
    due = [p for t, p in retry_at if t <= now]
    retry_at[:] = [(t, p) for t, p in retry_at if t > now]
    for port in due:
        open_one(port)
    for key, mask in sel.select(timeout=REFUSED_PAUSE):
        on_event(key, mask)
for port in ports:
    st = stats[port]
    print("flood of port %d: %d connections opened, %d closed by the listener, %d refused"
          % (port, st["opened"], st["closed"], st["refused"]), flush=True)
