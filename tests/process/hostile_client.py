#!/usr/bin/env python3
"""A stranger on the network, for hostile_job.sh: each attack opens its own connections to a
byteps listener and checks that the listener closes them; one control, a peer_hello with the
job's token, must be accepted. Prints one line per case, PASS or FAIL, and exits 1 if any failed.

Usage: hostile_client.py HOST SCHEDULER_PORT SERVER_PORT TOKEN HELLO_TIMEOUT_MS FLOOD
TOKEN is the job's: the control proves it; the replay attack proves it for one connection and
sends that proof on another (a recorded hello), as a sniffer would.
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

host, sched_port, server_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
token, hello_timeout, flood = sys.argv[4].encode(), int(sys.argv[5]) / 1000.0, int(sys.argv[6])
MAGIC, HEADER = 0x31535042, 64
HELLO, BARRIER, BYE, PEER_HELLO, DECLARE, CHALLENGE = 1, 4, 6, 8, 9, 17
failures = 0


def header(kind, payload_bytes, sender=0, part=0, key=0):
    return struct.pack("<IHHIIQIIQQQQ", MAGIC, 1, kind, 0, sender, key, part, 0, 0,
                       payload_bytes, 0, 0)


def connect(port):
    s = socket.create_connection((host, port), timeout=10)
    s.settimeout(10)
    return s


def read_challenge(s):
    data = b""
    while len(data) < HEADER + 32:
        chunk = s.recv(HEADER + 32 - len(data))
        if not chunk:
            raise RuntimeError("closed before its challenge")
        data += chunk
    kind = struct.unpack_from("<H", data, 6)[0]
    if kind != CHALLENGE:
        raise RuntimeError("first frame is type %d, not a challenge" % kind)
    return data[HEADER:]


def closed_within(s, seconds):
    """True when the peer closes s within `seconds` (whatever it sends before)."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not s.recv(4096):
                    return True
            except socket.timeout:
                return False
    except (ConnectionResetError, BrokenPipeError):
        return True
    return False


def report(name, ok, detail=""):
    global failures
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
          flush=True)
    failures += 0 if ok else 1


def peer_hello_proof(key, nonce, machine, local):
    msg = b"byteps hello proof v1" + bytes([2]) + nonce + struct.pack("<II", machine, local)
    return hmac.new(key, msg, hashlib.sha256).digest()


def attack(name, port, payload, wait=5.0):
    s = connect(port)
    try:
        s.sendall(payload)
    except (ConnectionResetError, BrokenPipeError):
        pass
    report(name, closed_within(s, wait))
    s.close()


for port, who in ((sched_port, "scheduler"), (server_port, "server")):
    attack("random bytes to the %s" % who, port, os.urandom(1000))
    attack("an HTTP request to the %s" % who, port, b"GET / HTTP/1.1\r\nHost: byteps.example\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n")
    attack("a huge length prefix to the %s" % who, port, header(HELLO, 1 << 62))
    # Half a frame: to the scheduler a hello header that promises 100 bytes and 50 of them, to
    # the server 30 bytes of a header; then the stranger leaves.
    s = connect(port)
    s.sendall(header(HELLO, 100) + b"x" * 50 if who == "scheduler" else header(PEER_HELLO, 32)[:30])
    s.shutdown(socket.SHUT_WR)
    report("half a frame to the %s" % who, closed_within(s, 5))
    s.close()
    attack("a frame before hello to the %s" % who, port,
           header(BARRIER if who == "scheduler" else DECLARE, 0))

# The control: a peer_hello proving the job's token for this connection's own nonce, as worker
# machine 1 (local rank 0) sends it, must be accepted: the connection outlives the hello timeout
# that closes every refused or silent one. So the refusals below refuse a proof of the layout the
# server accepts, not a drifted one. It says bye before closing: a worker leaving, not one lost.
s = connect(server_port)
s.sendall(header(PEER_HELLO, 32, sender=1) + peer_hello_proof(token, read_challenge(s), 1, 0))
accepted = not closed_within(s, hello_timeout + 1)
if accepted:
    s.sendall(header(BYE, 0, sender=1))
report("a peer_hello with the job's token to the server is accepted (the control)", accepted,
       "" if accepted else "closed within the hello timeout")
s.close()

# A replayed hello: a proof made for one connection's nonce, sent on another.
first = connect(server_port)
recorded = peer_hello_proof(token, read_challenge(first), 1, 0)
first.close()
s = connect(server_port)
read_challenge(s)
s.sendall(header(PEER_HELLO, 32, sender=1) + recorded)
report("a replayed peer_hello to the server", closed_within(s, 5))
s.close()
# The wrong token.
s = connect(server_port)
s.sendall(header(PEER_HELLO, 32, sender=0) +
          peer_hello_proof(b"another-job", read_challenge(s), 0, 0))
report("a peer_hello with the wrong token to the server", closed_within(s, 5))
s.close()

# A slow writer: one byte of a header every 300 ms; closed at the hello timeout.
s = connect(sched_port)
start, closed = time.monotonic(), False
for b in header(HELLO, 10):
    try:
        s.sendall(bytes([b]))
    except (ConnectionResetError, BrokenPipeError):
        closed = True
        break
    if closed_within(s, 0.3):
        closed = True
        break
took = time.monotonic() - start
report("a slow writer to the scheduler", closed and took < hello_timeout + 3,
       "closed after %.1f s" % took)
s.close()

# A flood of connections that never speak: past the pending limit they are refused at once,
# the rest closed at the hello timeout.
socks = [connect(server_port) for _ in range(flood)]
gone = sum(1 for s in socks if closed_within(s, hello_timeout + 3))
report("a flood of %d silent connections to the server" % flood, gone == flood,
       "%d of %d closed" % (gone, flood))
for s in socks:
    s.close()
sys.exit(1 if failures else 0)
