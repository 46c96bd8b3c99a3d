#!/usr/bin/python3
"""Unit tests of psim.py: closed forms the model must reproduce exactly, the code's partition
rule as docs/performance.md quotes it, and the validation gate.

Run: /usr/bin/python3 -m unittest discover -s benchmarks/sim -p 'test_*.py' -v
 (or: cd benchmarks/sim && /usr/bin/python3 -m unittest -v test_psim)
"""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flow_model  # noqa: E402
import formulas  # noqa: E402
import network  # noqa: E402
import units  # noqa: E402
import psim  # noqa: E402

MIB, KIB = units.MIB, units.KIB
GBIT = 1e9
B = GBIT / 8  # bytes/s of a 1 Gbit/s link

# No overheads: TCP carries the whole rate, no latency, no CPU cost, no shared host CPU.
IDEAL = dict(tcp_efficiency=1.0, latency_s=0.0, tcp_cpu_per_byte_side_s=0.0, frame_cpu_s=0.0,
             sum_cpu_per_byte_s=0.0, host_cpu_per_link_byte_s=0.0, host_cores=None)


def ideal(n, k, placement="ps", size=64 * MIB, rate=GBIT, **kw):
    ov = dict(IDEAL)
    ov.update(kw)
    return flow_model.make_params(n, k, placement, size, rate, "cluster", **ov)


class PartitionRule(unittest.TestCase):
    """by_bytes.hpp's split, checked against the splits docs/performance.md reports."""

    def split(self, nbytes, servers, partition_bytes=0):
        p = flow_model.make_params(1, servers, "ps", nbytes, GBIT, "cluster",
                             partition_bytes=partition_bytes)
        return flow_model.split(nbytes, servers, p)

    def test_auto_64mib_on_4_servers_is_64_of_1mib(self):
        self.assertEqual(self.split(64 * MIB, 4), [MIB] * 64)

    def test_auto_64mib_on_2_servers_is_32_of_2mib(self):
        self.assertEqual(self.split(64 * MIB, 2), [2 * MIB] * 32)

    def test_auto_16mib_on_4_is_16_of_1mib(self):
        self.assertEqual(self.split(16 * MIB, 4), [MIB] * 16)

    def test_auto_256mib_on_4_is_66_of_4096000(self):
        parts = self.split(256 * MIB, 4)
        self.assertEqual(len(parts), 66)
        self.assertEqual(parts[:65], [4096000] * 65)
        self.assertEqual(sum(parts), 256 * MIB)

    def test_auto_4mib_on_2_is_8_of_512kib(self):
        self.assertEqual(self.split(4 * MIB, 2), [512 * KIB] * 8)

    def test_1mib_on_4_is_16_of_64kib(self):
        self.assertEqual(self.split(1 * MIB, 4), [64 * KIB] * 16)

    def test_under_128kib_is_one_partition(self):
        self.assertEqual(self.split(64 * KIB, 4), [64 * KIB])
        self.assertEqual(self.split(127 * KIB, 4), [127 * KIB])

    def test_set_131072_cuts_64mib_into_512(self):
        self.assertEqual(self.split(64 * MIB, 4, 131072), [131072] * 512)

    def test_set_4096000_cuts_64mib_into_17(self):
        self.assertEqual(len(self.split(64 * MIB, 4, 4096000)), 17)

    def test_credit_is_4_mib_in_auto_mode(self):
        self.assertEqual(flow_model.credit_bytes(ideal(4, 4)), 4 * MIB)


class Formulas(unittest.TestCase):
    def test_ring(self):
        self.assertAlmostEqual(formulas.ring_formula(4, 64 * MIB, B), 1.5 * 64 * MIB / B)
        self.assertAlmostEqual(formulas.ring_model(4, 64 * MIB, B, 0.5, 1e-3),
                               1.5 * 64 * MIB / (0.5 * B) + 6e-3)

    def test_ps_bounds(self):
        self.assertAlmostEqual(formulas.bound_ps(8, 8, MIB, B), MIB / B)
        self.assertAlmostEqual(formulas.bound_ps(8, 2, MIB, B), 4 * MIB / B)
        self.assertAlmostEqual(formulas.bound_colocated(4, MIB, B), 1.5 * MIB / B)

    def test_mixed_formula_reaches_m_over_b_at_k_equal_n(self):
        self.assertAlmostEqual(formulas.bound_mixed(8, 8, MIB, B), MIB / B)
        # k = n: every byte goes to the CPU servers (the plain PS case)
        self.assertAlmostEqual(flow_model.mixed_cpu_fraction(8, 8), 1.0)
        self.assertAlmostEqual(flow_model.mixed_cpu_fraction(4, 2), 2 * 2 * 3 / (4 * 6 - 4))

    def test_mixed_wheel_gives_cpu_servers_their_share(self):
        n, k = 8, 4
        wheel = flow_model.mixed_wheel(n, k, 4096)
        share = sum(1 for s in wheel if s >= n) / len(wheel)
        # smooth round-robin keeps every server within one slot of its share
        self.assertAlmostEqual(share, flow_model.mixed_cpu_fraction(n, k), delta=k / 4096)
        self.assertNotAlmostEqual(share, 0.5, delta=0.05)


class ClosedForms(unittest.TestCase):
    """Cases where the fluid model has an exact answer."""

    def test_ps_k_equal_n_is_m_over_b(self):
        # Every worker sends M/k to each of k servers at B/k; each chunk is answered as soon
        # as it is in, so the answers keep pace and only the last chunk per server remains
        # after the pushes: t = (M + k * chunk) / B exactly, within 1% of M/B.
        n = k = 8
        m = 256 * MIB
        r = flow_model.simulate(ideal(n, k, size=m, scheduling_credit=0))
        chunk = 262144
        self.assertAlmostEqual(r.time, (m + k * chunk) / B, delta=1e-9 * r.time)
        self.assertLess(abs(r.time / (m / B) - 1), 0.01)

    def test_ps_k_below_n_is_nm_over_kb(self):
        # 1 MiB partitions: equal shares on the 2 servers, 8 chunks of 128 KiB each (chunk_for;
        # the automatic split gives 66 partitions, the last one shorter, so one server carries
        # 0.7% more)
        n, k = 8, 2
        m = 256 * MIB
        r = flow_model.simulate(ideal(n, k, size=m, scheduling_credit=0, partition_bytes=MIB))
        self.assertAlmostEqual(r.time, (n * m / k + n * 131072) / B, delta=1e-9 * r.time)
        self.assertLess(abs(r.time / (n * m / (k * B)) - 1), 0.01)

    def test_one_partition_on_one_server_is_serialised_incast(self):
        # A 64 KiB tensor is one partition: 4 workers push it through one server's link
        # (4M/B), which then sends 4 answers (4M/B): 8 times M/B, as performance.md's
        # "Emulated, 1 Gbit/s links, fp32, byteps defaults" describes (2n times the bound).
        m = 64 * KIB
        r = flow_model.simulate(ideal(4, 4, size=m))
        self.assertEqual(r.parts, [m])
        self.assertAlmostEqual(r.time, 8 * m / B, delta=1e-9 * r.time)
        self.assertAlmostEqual(r.ratio, 8.0, places=6)

    def test_latency_adds_one_frame_each_way(self):
        m = 64 * KIB
        r = flow_model.simulate(ideal(4, 4, size=m, latency_s=1e-3))
        self.assertAlmostEqual(r.time, 8 * m / B + 2e-3, delta=1e-9)

    def test_credit_of_one_partition_serialises_the_servers(self):
        # Credit = one partition, nothing beyond it in flight, no cut-through: all n workers
        # push partition j to one server at B/n each (nP/B), then partition j+1 to the next
        # while server j answers; the last answers take nP/B more: t = n(M + P)/B.
        n = k = 8
        m = 8 * MIB
        p = ideal(n, k, size=m, scheduling_credit=1, credit_lookahead_bytes=0,
                  server_chunk_bytes=0)
        parts = flow_model.split(m, k, p)
        p["credit_unit"] = parts[0]
        r = flow_model.simulate(p)
        self.assertEqual(len(set(parts)), 1)
        self.assertAlmostEqual(r.time, n * (m + parts[0]) / B, delta=1e-9 * r.time)
        self.assertEqual(max(r.limits, key=r.limits.get), "credit")

    def test_without_the_credit_the_same_case_runs_at_line_rate(self):
        n = k = 8
        m = 8 * MIB
        r = flow_model.simulate(ideal(n, k, size=m, scheduling_credit=0, server_chunk_bytes=0))
        # every server gets 4 partitions, all in flight at once: the last of each is answered
        # after the pushes, a quarter of M: t = 1.25 M/B
        self.assertAlmostEqual(r.time, 1.25 * m / B, delta=1e-9 * r.time)

    def test_shared_host_cpu_bounds_the_time(self):
        # When one CPU carries every link byte and is the limit throughout, the time is the
        # bytes on all links (n pushes of M, n answers of M) times the cost over the cores.
        n = k = 2
        m = 16 * MIB
        c = 1e-8
        r = flow_model.simulate(ideal(n, k, size=m, host_cores=2, host_cpu_per_link_byte_s=c))
        self.assertAlmostEqual(r.time, 2 * n * m * c / 2, delta=1e-9 * r.time)
        self.assertEqual(max(r.limits, key=r.limits.get), "host CPU (emulation)")

    def test_sum_cpu_bounds_a_single_server(self):
        # One server, one engine thread summing at 100 MB/s: the n-1 adds of every byte take
        # (n-1) M c_sum; the chunked answers keep pace, so the time is within 1% of it.
        # (at 1e-7 s/B the sums take 20 s; the link would take n M / B = 2.1 s)
        n, m, c = 4, 64 * MIB, 1e-7
        r = flow_model.simulate(ideal(n, 1, size=m, sum_cpu_per_byte_s=c, engine_threads=1))
        self.assertLess(abs(r.time / ((n - 1) * m * c) - 1), 0.01)
        self.assertEqual(max(r.limits, key=r.limits.get), "server CPU")

    def test_io_thread_bounds_a_worker(self):
        # A worker's one I/O thread writes M and reads M at c per byte and end.
        # (at 1e-7 s/B: 2 M c / 4 = 3.4 s, the link 0.54 s)
        n = k = 4
        m, c = 64 * MIB, 1e-7
        r = flow_model.simulate(ideal(n, k, size=m, tcp_cpu_per_byte_side_s=c, io_threads=64,
                                scheduling_credit=0))
        # io_threads is capped by the links (4 per node): 4 cores for 2M x c, and each server
        # carries the same bytes on its own 4 threads
        self.assertLess(abs(r.time / (2 * m * c / 4) - 1), 0.02)
        r1 = flow_model.simulate(ideal(n, k, size=m, tcp_cpu_per_byte_side_s=c, io_threads=1,
                                 scheduling_credit=0))
        self.assertLess(abs(r1.time / (2 * m * c) - 1), 0.02)

    def test_colocated_is_the_ring_bound(self):
        n, m = 4, 256 * MIB
        r = flow_model.simulate(ideal(n, n, "colocated", size=m, scheduling_credit=0,
                                partition_bytes=MIB))
        self.assertLess(abs(r.time / formulas.bound_colocated(n, m, B) - 1), 0.01)

    def test_mixed_under_fair_sharing(self):
        # 4 colocated + 2 CPU servers. The formula, t_opt = 2n(n-1)M / ((n^2 + kn - 2k) B)
        # = 1.2 M/B, needs every link busy to the end, i.e. each CPU server's connections 3
        # times as fast as a colocated server's (0.3 M against 0.1 M each). Shared fairly per
        # connection, a worker's 5 remote connections and its host's answers run at B/8 each
        # (host uplink: 2 x_c + 3 x_h + 3 y_h <= B with answers keeping pace) until the
        # colocated pushes end at 0.1M / (B/8) = 0.8 M/B; the CPU servers' last 0.2 M then
        # goes at B/4 (their downlinks: 4 x_c <= B), 0.8 M/B more: 1.6 M/B in all.
        n, k = 4, 2
        m = 256 * MIB
        self.assertAlmostEqual(formulas.bound_mixed(n, k, m, B), 1.2 * m / B)
        r = flow_model.simulate(ideal(n, k, "mixed", size=m, scheduling_credit=0,
                                partition_bytes=256 * KIB))
        self.assertLess(abs(r.time / (1.6 * m / B) - 1), 0.01)


def per_connection_max_min(n, S, colocated, link, act_push, act_ans):
    """Progressive filling over single TCP connections (no lockstep): worker w is host w, a
    colocated server s is on host s, a separate server s on host n + s. Returns, per class,
    the list of its connections' rates."""
    host = [s if colocated[s] else n + s for s in range(S)]
    flows = []
    for s in act_push:
        flows += [(s, (("up", w), ("down", host[s]))) for w in range(n) if w != host[s]]
    for s in act_ans:
        flows += [(S + s, (("up", host[s]), ("down", w))) for w in range(n) if w != host[s]]
    rate, load = [None] * len(flows), {}
    while None in rate:
        users = {}
        for i, (_, links) in enumerate(flows):
            if rate[i] is None:
                for x in links:
                    users[x] = users.get(x, 0) + 1
        level = min((link - load.get(x, 0.0)) / c for x, c in users.items())
        full = {x for x, c in users.items() if (link - load.get(x, 0.0)) / c <= level * (1 + 1e-12)}
        for i, (_, links) in enumerate(flows):
            if rate[i] is None and full.intersection(links):
                rate[i] = level
                for x in links:
                    load[x] = load.get(x, 0.0) + level
    out = {}
    for (cls, _), r in zip(flows, rate):
        out.setdefault(cls, []).append(r)
    return out


class LockstepSolve(unittest.TestCase):
    """psim moves every worker's connection to a server at one rate. With separate servers
    that is exactly per-connection max-min fairness; with colocated servers it is not."""

    def snapshot(self, mode, n, k, act_push, act_ans):
        p = ideal(n, k, mode)
        parts, owner, S, colocated = flow_model.layout(p)
        net = network.build_net(p, parts, owner, S, colocated)
        rate, _ = network.solve(net, act_push, act_ans)
        return rate, per_connection_max_min(n, S, colocated, B, act_push, act_ans), S

    def test_separate_servers_match_per_connection_max_min(self):
        for n, k, act_push, act_ans in ((3, 2, [0, 1], [0]), (4, 4, [0, 1, 2], [3]),
                                        (8, 3, [0, 2], [1, 2]), (5, 5, [4], [0, 1, 2, 3, 4])):
            rate, exact, _ = self.snapshot("ps", n, k, act_push, act_ans)
            for cls, rates in exact.items():
                for r in rates:
                    self.assertAlmostEqual(rate[cls], r, delta=1e-9 * B, msg=(n, k, cls))

    def test_colocated_moves_each_class_at_its_slowest_connection(self):
        rate, exact, S = self.snapshot("colocated", 4, 4, [0, 1, 2, 3], [0, 1])
        for cls, rates in exact.items():
            self.assertAlmostEqual(rate[cls], min(rates), delta=1e-9 * B)
        self.assertGreater(max(exact[1]), rate[1] * 1.5)   # some connections could go faster

    def test_every_placement_is_exact_when_every_class_is_active(self):
        # the steady state of a push_pull: every server's pushes and answers move; then all
        # hosts are alike and lockstep is per-connection max-min for colocated and mixed too
        # (so mixed mode's 1.6 M/B above is fair sharing's, not lockstep's)
        for mode, n, k in (("ps", 5, 3), ("colocated", 4, 4), ("mixed", 4, 2), ("mixed", 6, 3)):
            p = ideal(n, k, mode)
            parts, owner, S, colocated = flow_model.layout(p)
            net = network.build_net(p, parts, owner, S, colocated)
            rate, _ = network.solve(net, list(range(S)), list(range(S)))
            exact = per_connection_max_min(n, S, colocated, B, range(S), range(S))
            for cls, rates in exact.items():
                for r in rates:
                    self.assertAlmostEqual(rate[cls], r, delta=1e-9 * B, msg=(mode, cls))

    def test_mixed_lockstep_never_gives_a_worker_more_in_total(self):
        # 4 colocated + 2 CPU servers, host 0's server answering: lockstep freezes the other
        # classes at their slowest connection (B/8, through host 0's uplink) and hands the
        # capacity left on hosts 1-3 to server 0's pushes (B/4 against B/5 per connection);
        # what a worker sends in all is less than per-connection fairness gives it.
        rate, exact, S = self.snapshot("mixed", 4, 2, [0, 1, 2, 3, 4, 5], [4, 0])
        self.assertAlmostEqual(rate[0], B / 4, delta=1e-9 * B)
        self.assertAlmostEqual(max(exact[0]), B / 5, delta=1e-9 * B)
        lockstep_total = sum(rate[s] for s in range(6) if s != 1)     # worker 1's pushes
        exact_total = B    # worker 1's uplink is full under per-connection fairness
        self.assertLess(lockstep_total, exact_total)


class Validation(unittest.TestCase):
    def run_validate(self, argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = psim.main(argv)
        return rc, out.getvalue()

    def test_gate_passes_with_the_calibration(self):
        rc, text = self.run_validate(["validate"])
        self.assertEqual(rc, 0, text)
        self.assertIn("PASS", text)

    def test_gate_fails_when_a_constant_is_wrong(self):
        # TCP at 0.8 of the rate instead of 0.955 moves every gated row by about 19%
        rc, text = self.run_validate(["validate", "--set", "tcp_efficiency=0.8"])
        self.assertEqual(rc, 1, text)
        self.assertIn("FAIL", text)

    def test_6_plus_6_needs_the_shared_host_cpu(self):
        p = flow_model.make_params(6, 6, "ps", 64 * MIB, "1gbit", "emulated")
        with_cpu = flow_model.simulate(p).ratio
        p = flow_model.make_params(6, 6, "ps", 64 * MIB, "1gbit", "emulated",
                             host_cpu_per_link_byte_s=0.0)
        without = flow_model.simulate(p).ratio
        self.assertGreater(with_cpu, 1.2)
        self.assertLess(without, 1.12)


if __name__ == "__main__":
    unittest.main()
