"""flow_model: a flow-level model of one byteps push_pull (issue 37, "a model for scale").

n workers push one tensor of M bytes, cut into partitions by the rule of
include/byteps/partition/by_bytes.hpp, to summation servers; a server answers a partition (or,
with cut-through, each chunk of it) once every worker's copy is in, and sends the sum back to
every worker. The model follows the bytes, not the packets:

* every host has one full-duplex link of B bit/s; TCP carries tcp_efficiency of it;
  concurrent connections share a link max-min fairly (one flow per TCP connection);
* each worker has one connection per server, a FIFO of the partitions sent to it; a server has
  one connection per worker for its answers;
* the worker's scheduler (schedule/priority.hpp) lets partitions go in order while the bytes in
  flight stay within the credit (one partition may always go); a partition's credit returns
  when its write is done, i.e. when no more than `credit_lookahead` of its bytes are still unsent
  (TCP_NOTSENT_LOWAT plus what the kernel and the network hold below the socket);
* CPU is a resource like a link: per byte and per frame on the I/O threads, per byte summed on
  the engine threads (or on the I/O thread for pushes of at most 64 KiB); on the emulated
  cluster, one shared CPU for every host;
* one-way latency per frame.

All workers are identical and start together, so the model keeps one representative worker and
moves every worker's copy of a partition together ("lockstep"); a server's connections from the
n workers are one class of n members. This is what lets it run 1,024 workers in seconds.

The resources of one push_pull and their max-min fair rates are network.py's, the closed-form
bounds formulas.py's, units and their text units.py's; the command line, the
records it is validated against and the prediction tables are psim.py's.
Python 3 standard library only.
"""

import heapq
import json
import os

from formulas import bound_of
from network import build_net, chunk_for, solve, streamed
from units import MIB, parse_rate

HERE = os.path.dirname(os.path.abspath(__file__))
CALIBRATION = os.path.join(HERE, "calibration.json")
INF = float("inf")


# --------------------------------------------------------------------------------------------
# calibration

def load_calibration(path=CALIBRATION):
    with open(path) as f:
        raw = json.load(f)
    out = {}
    for section in ("code_defaults", "emulated", "cluster"):
        out[section] = {k: v["value"] for k, v in raw[section].items() if isinstance(v, dict)}
    return out


def make_params(n, k, placement="ps", size=64 * MIB, rate="1gbit", profile="cluster",
                cal=None, **overrides):
    """Every input of one simulated push_pull, from the calibration file and the overrides."""
    cal = cal or load_calibration()
    p = dict(cal["code_defaults"])
    p.update(cal[profile])
    p.update(n=int(n), k=int(k), placement=placement, size=int(size),
             rate_bps=parse_rate(rate) if isinstance(rate, str) else float(rate),
             profile=profile, partition_bytes=0, hash_offset=0, credit_unit=None)
    for key, value in overrides.items():
        if key not in p:
            raise KeyError("unknown parameter %r (known: %s)" % (key, ", ".join(sorted(p))))
        p[key] = value
    if p["credit_lookahead_bytes"] is None:
        p["credit_lookahead_bytes"] = (p["tcp_notsent_lowat"]
                                       + p["rate_bps"] / 8 * p["fabric_rtt_s"])
    return p


# --------------------------------------------------------------------------------------------
# the code's rules: partitions, credit, placement

def split(nbytes, servers, p):
    """Partition sizes of a tensor of nbytes on `servers` servers (partition/by_bytes.hpp)."""
    if nbytes <= 0:
        return []
    page = p["page"]
    auto = not p["partition_bytes"]
    bound = _round_up(p["partition_bytes"] or p["auto_partition_cap"], page)
    spread = p["parts_per_server"] * servers if servers > 1 else 1
    by_bound = -(-nbytes // bound)
    count = max(by_bound, min(spread, nbytes // p["min_spread_bytes"]))
    if auto:
        count = max(count, min(p["auto_per_server"] * servers, nbytes // p["auto_min_bytes"]))
    size = _round_up(-(-nbytes // count), page) if count > by_bound else bound
    parts, offset = [], 0
    while offset < nbytes:
        parts.append(min(size, nbytes - offset))
        offset += size
    return parts


def _round_up(x, unit):
    return -(-x // unit) * unit


def credit_bytes(p):
    """The scheduler's credit in bytes (0: off): credit x credit_unit (schedule/priority.hpp)."""
    if not p["scheduling_credit"]:
        return 0
    unit = p["credit_unit"]
    if unit is None:
        unit = (p["auto_min_bytes"] if not p["partition_bytes"]
                else _round_up(p["partition_bytes"], p["page"]))
    return p["scheduling_credit"] * unit


def mixed_cpu_fraction(n, k):
    """Share of the bytes on the k CPU servers in mixed mode (OSDI'20; placement.hpp)."""
    return 2.0 * k * (n - 1) / (n * (n + k) - 2.0 * k)


def mixed_wheel(n, k, slots):
    """Mixed mode's wheel: n colocated servers then k CPU servers, slots in proportion to their
    shares, laid out by smooth weighted round-robin (each slot to the server most behind)."""
    cpu = mixed_cpu_fraction(n, k)
    weight = [(1 - cpu) / n] * n + [cpu / k] * k
    behind = [0.0] * (n + k)
    wheel = []
    for _ in range(slots):
        best = 0
        for s in range(n + k):
            behind[s] += weight[s]
            if behind[s] > behind[best]:
                best = s
        behind[best] -= 1.0
        wheel.append(best)
    return wheel


def layout(p):
    """(partition sizes, server of each partition, number of servers, colocated[s])."""
    n, k, mode = p["n"], p["k"], p["placement"]
    if mode == "ps":
        servers, colocated = k, [False] * k
    elif mode == "colocated":
        servers, colocated = n, [True] * n
    elif mode == "mixed":
        servers, colocated = n + k, [True] * n + [False] * k
    else:
        raise ValueError("placement must be ps, colocated or mixed")
    parts = split(p["size"], servers, p)
    off = p["hash_offset"]
    if mode == "mixed":
        wheel = mixed_wheel(n, k, p["mixed_wheel_slots"])
        owner = [wheel[(off + i) % len(wheel)] for i in range(len(parts))]
    else:
        owner = [(off + i) % servers for i in range(len(parts))]
    return parts, owner, servers, colocated


# --------------------------------------------------------------------------------------------
# the simulation

class Result:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def simulate(p):
    """One push_pull; returns a Result with .time (s), .bound, .ratio and .limits (the share of
    the time each limit held the representative worker's uplink below the line)."""
    parts, owner, S, colocated = layout(p)
    P = len(parts)
    link = p["rate_bps"] / 8 * p["tcp_efficiency"]          # payload bytes/s per direction
    max_chunk, per_push = p["server_chunk_bytes"], p["chunk_per_push"]
    lat = p["latency_s"]
    look = p["credit_lookahead_bytes"]
    credit = credit_bytes(p)
    big = max(parts)
    cut = streamed(max_chunk, big, per_push)
    net = build_net(p, parts, owner, S, colocated)

    # ---- state ----
    X = [0.0] * S            # push stream of server s: bytes sent (per worker)
    Q = [0.0] * S            # ... bytes enqueued
    pmarks = [[] for _ in range(S)]   # heap of (offset, seq, kind, a, b)
    Y = [0.0] * S            # answer stream of server s: bytes sent (per worker)
    V = [0.0] * S            # ... bytes available
    amarks = [[] for _ in range(S)]   # heap of (offset, seq, partition)
    timed = []               # heap of (time, seq, kind, s, a, b)
    seq = [0]
    state = {"next": 0, "in_flight": 0.0, "done": 0}
    active_push, active_ans = set(), set()   # servers whose stream has bytes to move
    EPS = 1e-3

    def nseq():
        seq[0] += 1
        return seq[0]

    def pop():
        """Dispatch while the credit allows (schedule/priority.hpp::pop)."""
        while state["next"] < P:
            i = state["next"]
            b = parts[i]
            if credit and state["in_flight"] > 0 and state["in_flight"] + b > credit:
                return
            state["next"] += 1
            s = owner[i]
            a = Q[s]
            Q[s] = a + b
            active_push.add(s)
            h = pmarks[s]
            if streamed(max_chunk, b, per_push):
                chunk = chunk_for(max_chunk, b, per_push)
                off = a
                while off < a + b:
                    end = min(off + chunk, a + b)
                    heapq.heappush(h, (end, nseq(), "arrive", i, end - off))
                    off = end
            else:
                heapq.heappush(h, (a + b, nseq(), "arrive", i, b))
            if credit:
                state["in_flight"] += b
                th = a + b - look
                if th <= X[s] + EPS:
                    state["in_flight"] -= b
                else:
                    heapq.heappush(h, (th, nseq(), "credit", i, b))

    def blocked_by_credit():
        return credit and state["next"] < P

    def arrive(s, i, b, t):
        """Every worker's bytes of this piece are in at server s."""
        if lat:
            heapq.heappush(timed, (t + lat, nseq(), "avail", s, i, b))
        else:
            avail(s, i, b, t)

    last_piece_end = {}

    def avail(s, i, b, t):
        V[s] += b
        active_ans.add(s)
        pend = last_piece_end.get(i, 0.0) + b
        last_piece_end[i] = pend
        if pend >= parts[i] - EPS:
            heapq.heappush(amarks[s], (V[s], nseq(), i))

    def answered(i, t):
        if lat:
            heapq.heappush(timed, (t + lat, nseq(), "done", 0, i, 0))
        else:
            state["done"] += 1

    # ---- the event loop ----
    limits = {}
    t = 0.0
    pop()
    solves = 0
    while state["done"] < P:
        act_p = sorted(active_push)
        act_a = sorted(active_ans)
        if act_p or act_a:
            rate, frozen_by = solve(net, act_p, act_a)
            solves += 1
        else:
            rate, frozen_by = {}, {}
        dt = INF
        for s in act_p:
            x = rate[s]
            nxt = Q[s]
            if pmarks[s]:
                nxt = min(nxt, pmarks[s][0][0])
            dt = min(dt, max(0.0, nxt - X[s]) / x)
        for s in act_a:
            y = rate[S + s]
            nxt = V[s]
            if amarks[s]:
                nxt = min(nxt, amarks[s][0][0])
            dt = min(dt, max(0.0, nxt - Y[s]) / y)
        if timed:
            dt = min(dt, timed[0][0] - t)
        if dt == INF:
            raise RuntimeError("stuck at t=%g: nothing to send and nothing pending" % t)
        dt = max(dt, 0.0)
        # what held the representative worker's uplink below the line during [t, t+dt)
        if dt > 0:
            up = sum(rate[s] for s in act_p)
            if up >= link * 0.999:
                why = "line rate"
            elif act_p:
                kinds = {}
                for s in act_p:
                    kinds[frozen_by[s]] = kinds.get(frozen_by[s], 0.0) + rate[s]
                why = max(kinds, key=kinds.get)
                if why in ("worker link", "host link"):
                    why = "line rate"     # the link the bound counts is full
                elif (why in ("server link", "server CPU") and blocked_by_credit()
                      and len(act_p) < S):
                    # the credit let the workers reach too few servers, whose links the n
                    # workers then share (incast on the servers in reach)
                    why = "credit"
            elif blocked_by_credit():
                why = "credit"
            elif act_a:
                kinds = {}
                for s in act_a:
                    kinds[frozen_by[S + s]] = kinds.get(frozen_by[S + s], 0.0) + rate[S + s]
                why = "drain: " + max(kinds, key=kinds.get)
            else:
                why = "latency"
            limits[why] = limits.get(why, 0.0) + dt
        for s in act_p:
            X[s] += rate[s] * dt
        for s in act_a:
            Y[s] += rate[S + s] * dt
        t += dt
        # marks reached
        freed = False
        for s in act_p:
            h = pmarks[s]
            if Q[s] - X[s] <= EPS:
                X[s] = Q[s]
                active_push.discard(s)
            while h and h[0][0] <= X[s] + EPS:
                _, _, kind, i, b = heapq.heappop(h)
                if kind == "credit":
                    state["in_flight"] -= b
                    freed = True
                else:
                    arrive(s, i, b, t)
        for s in act_a:
            h = amarks[s]
            if V[s] - Y[s] <= EPS:
                Y[s] = V[s]
                active_ans.discard(s)
            while h and h[0][0] <= Y[s] + EPS:
                _, _, i = heapq.heappop(h)
                answered(i, t)
        while timed and timed[0][0] <= t + 1e-15:
            _, _, kind, s, i, b = heapq.heappop(timed)
            if kind == "avail":
                avail(s, i, b, t)
            else:
                state["done"] += 1
        if freed:
            pop()
        # a credit mark may already be behind X once the partition is queued: pop() handles it

    bound, bound_name = bound_of(p)
    total = sum(limits.values()) or 1.0
    return Result(time=t, bound=bound, bound_name=bound_name, ratio=t / bound,
                  limits={k: v / total for k, v in sorted(limits.items(),
                                                          key=lambda kv: -kv[1])},
                  parts=parts, servers=S, credit=credit, lookahead=look, cut_through=bool(cut),
                  solves=solves, params=p)


def limits_text(limits, top=3):
    items = [(k, v) for k, v in limits.items() if v >= 0.005][:top]
    return ", ".join("%s %.0f%%" % (k, 100 * v) for k, v in items)


def first_bottleneck(limits):
    """The limit that held the worker below the line the longest (or 'line rate')."""
    for k, v in limits.items():
        if k != "line rate" and v >= 0.10:
            return k
    return "line rate"
