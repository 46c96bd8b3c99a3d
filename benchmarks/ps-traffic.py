#!/usr/bin/env python3
"""ps-traffic.py: the bytes of one push_pull round of the PS topology, moved by plain TCP.

What the emulated network itself allows a PS round, without byteps: N worker hosts and K server
hosts (N + K hosts of benchmarks/emulate.sh, workers first); each worker sends B bytes to each
server (its pushes) and each server sends B bytes to each worker (its answers), all on one
connection per pair, as byteps does. B = M / K, so every link carries M each way, the load of
a byteps round of M bytes per worker.

  --answers free    (default) a server sends its answers from the start, as fast as TCP
                    takes them: the network's and TCP's own time for the round's bytes;
  --answers gated   a server sends chunk c of its answers only once chunk c of every worker's
                    pushes is in (a server sums a chunk when its last copy is in): the
                    data dependency of a PS round, with no summation, scheduling or framing.

Run on every host of an emulated cluster, as root:

  benchmarks/emulate.sh --hosts 8 --rate 1gbit \\
    --each 'python3 benchmarks/ps-traffic.py --workers 4 --bytes 64M --rounds 12 --warmup 2'

Host 0 prints each timed round's time (from a common start to the last byte any worker
received) over the bound M/B, and their median. Rounds start together: every host writes a
file in $EMU_DIR when ready, and all start 20 ms after the last one did. Each receiver checks
every byte against what its peer sent. Server s listens on port 9700 + s, so that every host
may be 127.0.0.1 (set EMU_HOST, EMU_ADDRS, EMU_DIR, EMU_RATE and EMU_RATE_GBPS by hand, as
tests/bench/ps_traffic_check.sh does).
"""

import argparse
import os
import socket
import statistics
import struct
import sys
import threading
import time

PORT = 9700
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux's value


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workers", type=int, required=True, help="N: hosts 0..N-1 are workers")
    p.add_argument("--bytes", default="64M", help="M: bytes a worker pushes a round (default 64M)")
    p.add_argument("--chunk", default="128K",
                   help="the unit a gated server answers in (default 128K, byteps's chunk of a "
                        "1 MiB partition)")
    p.add_argument("--answers", choices=("free", "gated"), default="free")
    p.add_argument("--rounds", type=int, default=12, help="rounds in all (default 12)")
    p.add_argument("--warmup", type=int, default=2, help="untimed first rounds (default 2)")
    p.add_argument("--pace", default="0",
                   help="cap every connection's sending rate at this many bytes a second "
                        "(SO_MAX_PACING_RATE; K/M/G are binary); 0, the default, caps nothing")
    p.add_argument("--deadline", type=float, default=120.0,
                   help="seconds any wait may take before the host gives up (default 120)")
    return p.parse_args()


def env(name):
    value = os.environ.get(name)
    if not value:
        sys.exit(f"ps-traffic.py: ${name} is not set: run it through benchmarks/emulate.sh --each")
    return value


class Deadline:
    def __init__(self, seconds):
        self.at = time.monotonic() + seconds

    def check(self, what):
        if time.monotonic() > self.at:
            raise TimeoutError(f"ps-traffic.py: gave up waiting for {what}")


def pattern(host, size):
    """The bytes host sends to every peer: checked by each receiver after every round."""
    period = bytes(range(251))
    return (period * (size // len(period) + 2))[host % 251:host % 251 + size]


def recv_exactly(sock, view, on_chunk=None, chunk=0):
    """Fills view from sock; calls on_chunk(bytes so far) at each chunk boundary."""
    got, mark = 0, chunk
    while got < len(view):
        n = sock.recv_into(view[got:], len(view) - got)
        if n == 0:
            raise ConnectionError("ps-traffic.py: a peer closed its connection mid-round")
        got += n
        if on_chunk is not None and (got >= mark or got == len(view)):
            on_chunk(got)
            mark = (got // chunk + 1) * chunk


def barrier(directory, name, host, hosts, deadline):
    """Every host writes its clock; all wake 20 ms after the last one wrote."""
    with open(os.path.join(directory, f"{name}.{host}.tmp"), "w") as f:
        f.write(repr(time.time()))
    os.rename(os.path.join(directory, f"{name}.{host}.tmp"),
              os.path.join(directory, f"{name}.{host}"))
    stamps = []
    while True:
        stamps = []
        for h in range(hosts):
            try:
                with open(os.path.join(directory, f"{name}.{h}")) as f:
                    stamps.append(float(f.read()))
            except FileNotFoundError:
                break
        if len(stamps) == hosts:
            break
        deadline.check(f"the other hosts at '{name}'")
        time.sleep(0.001)
    start = max(stamps) + 0.020
    time.sleep(max(0.0, start - time.time()))
    return start


def main():
    args = parse_args()
    host = int(env("EMU_HOST"))
    addrs = env("EMU_ADDRS").split()
    directory = env("EMU_DIR")
    hosts, workers = len(addrs), args.workers
    servers = hosts - workers
    if not 0 < workers < hosts:
        sys.exit(f"ps-traffic.py: --workers {workers} leaves no server among {hosts} hosts")
    total, chunk = parse_bytes(args.bytes), parse_bytes(args.chunk)
    if total % servers:
        sys.exit(f"ps-traffic.py: --bytes {total} is not a multiple of the {servers} servers")
    per_pair = total // servers
    deadline = Deadline(args.deadline)
    is_worker = host < workers

    # One connection per worker-server pair: workers connect, servers accept.
    conns = {}
    if is_worker:
        for s in range(servers):
            while True:
                try:
                    c = socket.create_connection((addrs[workers + s], PORT + s), timeout=1.0)
                    break
                except OSError:
                    deadline.check(f"server {s} to listen")
                    time.sleep(0.05)
            c.settimeout(None)
            c.sendall(struct.pack("!I", host))
            conns[s] = c
    else:
        listener = socket.create_server(("", PORT + host - workers), backlog=workers)
        listener.settimeout(1.0)
        while len(conns) < workers:
            try:
                c, _ = listener.accept()
            except socket.timeout:
                deadline.check("the workers to connect")
                continue
            c.settimeout(None)
            (w,) = struct.unpack("!I", c.recv(4, socket.MSG_WAITALL))
            conns[w] = c
        listener.close()
    pace = parse_bytes(args.pace)
    for c in conns.values():
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if pace:
            c.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, pace)

    def host_of(peer):
        return workers + peer if is_worker else peer

    outgoing = memoryview(pattern(host, per_pair))
    expected = {p: pattern(host_of(p), per_pair) for p in conns}
    incoming = {p: memoryview(bytearray(per_pair)) for p in conns}
    ends = []
    for r in range(args.rounds):
        start = barrier(directory, f"round{r}", host, hosts, deadline)
        received = {p: 0 for p in conns}
        cv = threading.Condition()
        errors = []

        def on_chunk(peer, got):
            with cv:
                received[peer] = got
                cv.notify_all()

        def receive(peer):
            try:
                recv_exactly(conns[peer], incoming[peer], lambda g: on_chunk(peer, g), chunk)
            except Exception as e:  # reported by the main thread
                errors.append(e)
                with cv:
                    cv.notify_all()

        def send(peer):
            try:
                if is_worker or args.answers == "free":
                    conns[peer].sendall(outgoing)
                    return
                for begin in range(0, per_pair, chunk):
                    end = min(begin + chunk, per_pair)
                    with cv:
                        while min(received.values()) < end and not errors:
                            cv.wait(1.0)
                            deadline.check("every worker's copy of a chunk")
                    if errors:
                        return
                    conns[peer].sendall(outgoing[begin:end])
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=f, args=(p,)) for p in conns for f in (receive, send)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            sys.exit(f"ps-traffic.py: host {host}, round {r}: {errors[0]}")
        ends.append(time.time() - start)
        for p in conns:
            if incoming[p] != expected[p]:
                sys.exit(f"ps-traffic.py: host {host}, round {r}: the bytes from host "
                         f"{host_of(p)} are not what it sent")

    with open(os.path.join(directory, f"ends.{host}"), "w") as f:
        f.write(" ".join(repr(e) for e in ends))
    if host != 0:
        return
    all_ends = []
    for h in range(workers):  # a round ends when its last worker has every answer
        path = os.path.join(directory, f"ends.{h}")
        while not os.path.exists(path):
            deadline.check(f"worker {h}'s times")
            time.sleep(0.01)
        with open(path) as f:
            all_ends.append([float(x) for x in f.read().split()])
    rate = float(env("EMU_RATE_GBPS")) * 1e9 / 8
    bound = total / rate
    timed = [max(e[r] for e in all_ends) for r in range(args.warmup, args.rounds)]
    print(f"ps-traffic: {workers} workers, {servers} servers, {total} bytes a worker, answers "
          f"{args.answers}" + (f" in chunks of {chunk}" if args.answers == "gated" else "") +
          (f", each connection paced at {pace} B/s" if pace else "") +
          f", link {env('EMU_RATE')}: bound M/B {bound * 1e3:.1f} ms")
    print("ps-traffic: rounds (ms): " + ", ".join(f"{t * 1e3:.1f}" for t in timed))
    med = statistics.median(timed)
    print(f"ps-traffic: median {med * 1e3:.1f} ms = {med / bound:.3f} of M/B "
          f"(best {min(timed) / bound:.3f})")


if __name__ == "__main__":
    try:
        main()
    except (TimeoutError, ConnectionError) as e:
        sys.exit(str(e))
