"""network: the resources of one push_pull in the model (flow_model.py): every host's link and
CPU as capacities that the flow classes share, each class a server's push stream or answer
stream, and the max-min fair rates (progressive filling) of the classes active at one moment.
flow_model.simulate moves the bytes at these rates between events. Python 3 standard library
only.
"""

INF = float("inf")


class Resource:
    """A capacity shared by flow classes: load = a_push * (sum of push classes' rates)
    + a_ans * (sum of answer classes' rates) + sum of own[c] * rate[c]."""
    __slots__ = ("name", "kind", "cap", "a_push", "a_ans", "own")

    def __init__(self, name, kind, cap, a_push=0.0, a_ans=0.0, own=None):
        self.name, self.kind, self.cap = name, kind, cap
        self.a_push, self.a_ans, self.own = a_push, a_ans, own or {}


def solve(net, active_push, active_ans):
    """Max-min fair rates (progressive filling) of the active classes: every unfrozen class
    rises at the same rate until a resource it uses is full. net = (S, colocated,
    n_colocated, res_global, res_generic, res_of). Returns ({class: rate}, {class: kind of the
    resource that froze it}); class s is server s's push stream, S + s its answer stream, each
    rate per member (per worker connection)."""
    S, colocated, n_colocated, res_global, res_generic, res_of = net
    any_colocated = n_colocated > 0
    rate = {}
    unf_push = set(active_push)
    unf_ans = set(active_ans)
    frozen_by = {}
    if any_colocated:
        # the generic worker-host links stand for the hosts whose colocated server moves
        # nothing now; a host whose server is busy has its own (res_of)
        busy = sum(1 for s in set(active_push) | set(active_ans) if colocated[s])
        use_generic = busy < n_colocated
    else:
        use_generic = True
    res = list(res_global)
    if use_generic:
        res.extend(res_generic)
    seen = set()
    for s in list(unf_push) + list(unf_ans):
        if s not in seen:
            seen.add(s)
            res.extend(res_of[s])
    fz_push = fz_ans = 0.0
    level = 0.0
    while unf_push or unf_ans:
        nu_p, nu_a = len(unf_push), len(unf_ans)
        best, sat = INF, []
        for r in res:
            slope = r.a_push * nu_p + r.a_ans * nu_a
            load = r.a_push * fz_push + r.a_ans * fz_ans
            for c, coef in r.own.items():
                if c < S:
                    if c in unf_push:
                        slope += coef
                    elif c in rate:
                        load += coef * rate[c]
                else:
                    if c - S in unf_ans:
                        slope += coef
                    elif c in rate:
                        load += coef * rate[c]
            if slope <= 1e-18:
                continue
            lam = (r.cap - load) / slope
            if lam < best * (1 - 1e-12):
                best, sat = lam, [r]
            elif lam <= best * (1 + 1e-12):
                sat.append(r)
        if best == INF:
            raise RuntimeError("unbounded flow: no resource limits an active class")
        best = max(best, level)
        level = best
        for r in sat:
            if r.a_push > 0:
                for s in list(unf_push):
                    if r.a_push + r.own.get(s, 0.0) > 1e-15:
                        unf_push.discard(s)
                        rate[s] = best
                        fz_push += best
                        frozen_by[s] = r.kind
            if r.a_ans > 0:
                for s in list(unf_ans):
                    if r.a_ans + r.own.get(S + s, 0.0) > 1e-15:
                        unf_ans.discard(s)
                        rate[S + s] = best
                        fz_ans += best
                        frozen_by[S + s] = r.kind
            for c, coef in r.own.items():
                if c < S:
                    if c in unf_push and coef + r.a_push > 1e-15:
                        unf_push.discard(c)
                        rate[c] = best
                        fz_push += best
                        frozen_by[c] = r.kind
                elif c - S in unf_ans and coef + r.a_ans > 1e-15:
                    unf_ans.discard(c - S)
                    rate[c] = best
                    fz_ans += best
                    frozen_by[c] = r.kind
    return rate, frozen_by


def chunk_for(max_chunk, size, per_push=8):
    """server/handler.hpp's chunk_for: about 1/per_push of a push, from half the server's chunk
    (in whole 64s, at least 64) to all of it; 0 is off. per_push 0: the server's chunk for every
    push (the rule before 2026-12-06, for the records measured with it)."""
    if not max_chunk or not per_push:
        return max_chunk
    share = (size // per_push + 63) // 64 * 64
    half = max(64, max_chunk // 128 * 64)
    return min(max_chunk, max(half, share))


def streamed(max_chunk, size, per_push=8):
    """server/handler.hpp's streamed_size: at least two chunks."""
    chunk = chunk_for(max_chunk, size, per_push)
    return chunk > 0 and size >= 2 * chunk


def build_net(p, parts, owner, S, colocated):
    """The resources of one push_pull: links, CPUs and their coefficients per class."""
    n = p["n"]
    link = p["rate_bps"] / 8 * p["tcp_efficiency"]          # payload bytes/s per direction
    max_chunk = p["server_chunk_bytes"]
    c_tcp, c_frame, c_sum = (p["tcp_cpu_per_byte_side_s"], p["frame_cpu_s"],
                             p["sum_cpu_per_byte_s"])
    io, eng = p["io_threads"], p["engine_threads"]
    big = max(parts)
    per_push = p["chunk_per_push"]
    piece = chunk_for(max_chunk, big, per_push) if streamed(max_chunk, big, per_push) else big
    inline = big <= p["inline_sum_bytes"]
    # ---- resources ----
    res_generic, res_of = [], [[] for _ in range(S)]
    wcpu_push = c_tcp + c_frame / big
    wcpu_ans = c_tcp + c_frame / piece
    res_generic.append(Resource("worker uplink", "worker link", link, a_push=1.0))
    res_generic.append(Resource("worker downlink", "worker link", link, a_ans=1.0))
    if c_tcp or c_frame:
        # asio runs each link's handlers on a strand: a node uses at most one thread per link
        remote_links = S - (1 if any(colocated) else 0)
        res_generic.append(Resource("worker I/O thread", "worker CPU",
                                    float(min(io, max(1, remote_links))),
                                    a_push=wcpu_push, a_ans=wcpu_ans))
    n_colocated = sum(1 for c in colocated if c)
    per_server = [0] * S
    for s in owner:
        per_server[s] += 1
    for s in range(S):
        r = n - 1 if colocated[s] else n                     # members that cross a link
        ps_, as_ = s, S + s
        if colocated[s]:
            res_of[s].append(Resource("host %d uplink" % s, "host link", link,
                                      a_push=1.0, own={ps_: -1.0, as_: float(n - 1)}))
            res_of[s].append(Resource("host %d downlink" % s, "host link", link,
                                      a_ans=1.0, own={as_: -1.0, ps_: float(n - 1)}))
        else:
            res_of[s].append(Resource("server %d downlink" % s, "server link", link,
                                      own={ps_: float(n)}))
            res_of[s].append(Resource("server %d uplink" % s, "server link", link,
                                      own={as_: float(n)}))
        if c_tcp or c_frame or (c_sum and inline):
            res_of[s].append(Resource(
                "server %d I/O thread" % s, "server CPU", float(min(io, r)),
                own={ps_: r * (c_tcp + c_frame / big) + ((n - 1) * c_sum if inline else 0.0),
                     as_: r * (c_tcp + c_frame / piece)}))
        if c_sum and not inline:
            res_of[s].append(Resource("server %d engines" % s, "server CPU",
                                      float(min(eng, max(1, per_server[s]))),
                                      own={ps_: (n - 1) * c_sum}))
    res_global = []
    if p["host_cores"] and p["host_cpu_per_link_byte_s"]:
        c = p["host_cpu_per_link_byte_s"]
        own = {}
        for s in range(S):
            if colocated[s]:
                own[s] = -c
                own[S + s] = -c
        res_global.append(Resource("emulation host CPU", "host CPU (emulation)",
                                   float(p["host_cores"]), a_push=n * c, a_ans=n * c, own=own))

    return (S, colocated, n_colocated, res_global, res_generic, res_of)
