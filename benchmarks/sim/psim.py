#!/usr/bin/python3
"""psim: the command line of the push_pull model (flow_model.py, issue 37): `run` one
configuration, `validate` the model against the emulated runs recorded in docs/performance.md,
`predict` 16 to 1,024 workers, `whatif` one change at a time, `bounds` the formulas (see --help).
Python 3 standard library only.
"""

import argparse
import sys

from flow_model import (CALIBRATION, limits_text, load_calibration, make_params,
                        mixed_cpu_fraction, simulate, split)
from network import chunk_for
from formulas import bound_colocated, bound_mixed, bound_ps, ring_formula, ring_model
from units import MIB, fmt_bytes, fmt_rate, parse_bytes, parse_rate, parts_short, parts_text
# --------------------------------------------------------------------------------------------
# validation against docs/performance.md

T12 = "performance.md, \"Issue 12's targets, with the defaults (2026-11-27)\""
WT = "performance.md, \"Where the time above the bound goes (2026-11-27)\""
NS = "performance.md, \"Nothing slower\" table (2026-11-27), column 'now'"
CR = ("performance.md, \"The scheduling credit counts in the partitions the automatic rule "
      "makes (issue 12)\" (2026-11-26, ade2199), median of the runs")
LO = ("performance.md, \"A short unsent queue per TCP socket (issue 12)\" (2026-11-26), "
      "median of runs 1-6")
CH = "performance.md, \"2026-12-06: a push cut in about eight chunks\", column 'ps after'"
SOURCES = {"T12": T12, "WT": WT, "NS": NS, "CR": CR, "LO": LO, "CH": CH}

ONE_MIB_PARTS = {"partition_bytes": 1048576}
# The runs recorded before 2026-12-06 cut every streamed push in chunks of server_chunk_bytes.
OLD_CHUNKS = {"chunk_per_push": 0}
# (label, placement, n, k, bytes, overrides, measured, what, source, gated)
# what: "ratio" = time/bound as run-emulated.sh prints it; "ms" = p50 of the slowest rank.
# Gated: what issue 37 asks for (64 MiB, 2 + 2, 4 + 4, 6 + 6; and 4 colocated, the same runs).
VALIDATION = [
    ("2+2 ps, 64 MiB", "ps", 2, 2, 64 * MIB, OLD_CHUNKS, 1.075, "ratio", "T12", True),
    ("2+2 ps, 64 MiB", "ps", 2, 2, 64 * MIB, OLD_CHUNKS, 1.072, "ratio", "WT", True),
    ("4+4 ps, 64 MiB", "ps", 4, 4, 64 * MIB, OLD_CHUNKS, 1.121, "ratio", "T12", True),
    ("4+4 ps, 64 MiB", "ps", 4, 4, 64 * MIB, OLD_CHUNKS, 1.111, "ratio", "WT", True),
    ("6+6 ps, 64 MiB", "ps", 6, 6, 64 * MIB, OLD_CHUNKS, 1.246, "ratio", "T12", True),
    ("6+6 ps, 64 MiB", "ps", 6, 6, 64 * MIB, OLD_CHUNKS, 1.221, "ratio", "WT", True),
    ("4+4 ps, 64 MiB", "ps", 4, 4, 64 * MIB, OLD_CHUNKS, 601.2, "ms", "T12", True),
    ("4+4 ps, 64 MiB", "ps", 4, 4, 64 * MIB, OLD_CHUNKS, 603.0, "ms", "WT", True),
    ("4+4 ps, 64 MiB", "ps", 4, 4, 64 * MIB, OLD_CHUNKS, 600.3, "ms", "WT", True),
    ("4 colocated, 64 MiB", "colocated", 4, 4, 64 * MIB, OLD_CHUNKS, 860.4, "ms", "T12", True),
    ("4 colocated, 64 MiB", "colocated", 4, 4, 64 * MIB, OLD_CHUNKS, 861.9, "ms", "WT", True),
    ("4 colocated, 64 MiB", "colocated", 4, 4, 64 * MIB, OLD_CHUNKS, 857.2, "ms", "WT", True),
    # not gated: other sizes of the 4 + 4 sweep
    ("4+4 ps, 1 MiB", "ps", 4, 4, 1 * MIB, OLD_CHUNKS, 13.48, "ms", "NS", False),
    ("4+4 ps, 4 MiB", "ps", 4, 4, 4 * MIB, OLD_CHUNKS, 49.39, "ms", "NS", False),
    ("4+4 ps, 16 MiB", "ps", 4, 4, 16 * MIB, OLD_CHUNKS, 168.1, "ms", "NS", False),
    ("4+4 ps, 256 MiB", "ps", 4, 4, 256 * MIB, OLD_CHUNKS, 2454.0, "ms", "NS", False),
    # not gated: the credit and the unsent queue (what the lookahead constant stands for)
    ("4+4, 1 MiB parts, credit 1", "ps", 4, 4, 64 * MIB,
     dict(ONE_MIB_PARTS, **OLD_CHUNKS, scheduling_credit=1), 1.128, "ratio", "CR", False),
    ("4+4, 1 MiB parts, credit 4", "ps", 4, 4, 64 * MIB,
     dict(ONE_MIB_PARTS, **OLD_CHUNKS, scheduling_credit=4), 1.118, "ratio", "CR", False),
    ("4+4, 1 MiB parts, credit 8", "ps", 4, 4, 64 * MIB,
     dict(ONE_MIB_PARTS, **OLD_CHUNKS, scheduling_credit=8), 1.155, "ratio", "CR", False),
    ("4+4, auto, credit 4x4096000", "ps", 4, 4, 64 * MIB,
     dict(OLD_CHUNKS, credit_unit=4096000), 1.1905, "ratio", "CR", False),
    ("4+4, NOTSENT_LOWAT 0", "ps", 4, 4, 64 * MIB,
     dict(OLD_CHUNKS, tcp_notsent_lowat=4194304, credit_lookahead_bytes=8388608), 1.391, "ratio",
     "LO", False),
    # the chunk that follows the push (server::chunk_for, 2026-12-06)
    ("4+4 ps, 64 MiB", "ps", 4, 4, 64 * MIB, {}, 1.107, "ratio", "CH", True),
    ("4+4 ps, 64 MiB", "ps", 4, 4, 64 * MIB, {}, 1.096, "ratio", "CH", True),
    ("4+4 ps, 4 MiB", "ps", 4, 4, 4 * MIB, {}, 47.23, "ms", "CH", False),
    ("4+4 ps, 16 MiB", "ps", 4, 4, 16 * MIB, {}, 155.73, "ms", "CH", False),
    # not gated: the ring model that predict compares against (Gloo's ring, 4 ranks)
    ("gloo ring, 4 ranks, 64 MiB", "ring", 4, 0, 64 * MIB, OLD_CHUNKS, 850.6, "ms", "T12", False),
    ("gloo ring, 4 ranks, 64 MiB", "ring", 4, 0, 64 * MIB, OLD_CHUNKS, 846.0, "ms", "WT", False),
]


def cmd_validate(args):
    cal = load_calibration(args.calibration)
    overrides = parse_sets(args.set)
    worst = 0.0
    print("# psim validate: the emulated cluster (profile 'emulated'), 1 Gbit/s links, fp32,")
    print("# byteps defaults unless the case says; one simulation per configuration, compared")
    print("# with every record of it. t/b = time/bound (bound M/B; colocated 2(n-1)/n M/B).")
    print("# %-32s %-4s %9s %9s %8s  %s" % ("case", "src", "measured", "simulated", "error",
                                          "gated"))
    cache = {}
    for label, mode, n, k, size, extra, measured, what, src, gate in VALIDATION:
        key = (mode, n, k, size, tuple(sorted(extra.items())))
        if key not in cache:
            ov = dict(overrides)
            ov.update(extra)
            if mode == "ring":
                p = make_params(n, n, "ps", size, "1gbit", "emulated", cal, **ov)
                b = p["rate_bps"] / 8
                cache[key] = (ring_model(n, size, b, p["tcp_efficiency"], p["latency_s"]),
                              ring_formula(n, size, b))
            else:
                r = simulate(make_params(n, k, mode, size, "1gbit", "emulated", cal, **ov))
                cache[key] = (r.time, r.bound)
        t, bound = cache[key]
        sim = t / bound if what == "ratio" else t * 1e3
        err = (sim - measured) / measured
        if gate:
            worst = max(worst, abs(err))
        if what == "ratio":
            label, m_txt, s_txt = label + " t/b", "%.3f" % measured, "%.3f" % sim
        else:
            m_txt, s_txt = "%.1f ms" % measured, "%.1f ms" % sim
        print("  %-32s %-4s %9s %9s %+7.1f%%  %s" % (label, src, m_txt, s_txt, 100 * err,
                                                   "yes" if gate else "no"))
    print("# sources:")
    for tag, text in SOURCES.items():
        print("#   %-4s %s" % (tag, text))
    print("# worst gated error %.1f%% (limit 10%%): %s" % (100 * worst,
                                                          "PASS" if worst <= 0.10 else "FAIL"))
    return 0 if worst <= 0.10 else 1


# --------------------------------------------------------------------------------------------
# prediction

PREDICT_N = [16, 32, 64, 128, 256, 512, 1024]


def predict_row(n, k, mode, size, rate, cal, overrides):
    p = make_params(n, k, mode, size, rate, "cluster", cal, **overrides)
    r = simulate(p)
    b = p["rate_bps"] / 8
    return p, r, ring_formula(n, size, b), ring_model(n, size, b, p["tcp_efficiency"],
                                                     p["latency_s"])


def cmd_predict(args):
    cal = load_calibration(args.calibration)
    overrides = parse_sets(args.set)
    if args.network_only:
        overrides.update(tcp_cpu_per_byte_side_s=0.0, frame_cpu_s=0.0, sum_cpu_per_byte_s=0.0)
    size = parse_bytes(args.bytes)
    ns = [int(x) for x in args.workers.split(",")] if args.workers else PREDICT_N
    rates = args.rates.split(",")
    configs = [("ps-n", "ps", "k = n", lambda n: n),
               ("ps-half", "ps", "k = n/2", lambda n: n // 2),
               ("mixed", "mixed", "mixed, k = n/2", lambda n: n // 2)]
    if args.configs:
        want = set(args.configs.split(","))
        configs = [c for c in configs if c[0] in want]
    print("# psim predict: one push_pull of %s (fp32, one tensor), profile 'cluster', byteps"
          % fmt_bytes(size))
    print("# defaults%s. Times in ms. bound: the PS formula of the topology"
          % ((" with " + ", ".join("%s=%s" % kv for kv in overrides.items()))
             if overrides else ""))
    print("# (MISSION.md); ring: 2(n-1)/n M/B; ring+: the same at TCP's efficiency plus one")
    print("# message latency per step (2(n-1) steps); x_ring = ring+ / sim; sched = the worker's")
    print("# scheduler CPU (partitions x 88 ns) over sim. limit: what held the worker's uplink")
    print("# below the line, by share of the push_pull's time ('line rate': it did not).")
    for rate in rates:
        for _, mode, name, kf in configs:
            print()
            print("## %s, %s, %s" % (fmt_rate(parse_rate(rate)), name,
                                     "separate servers" if mode == "ps"
                                     else "n colocated + k CPU servers"))
            print("%5s %5s %15s %9s %8s %7s %8s %8s %6s %6s  %s" % (
                "n", "k", "partitions", "sim", "bound", "sim/bnd", "ring", "ring+",
                "x_ring", "sched", "limit (share of time)"))
            for n in ns:
                k = kf(n)
                _, r, rf, rm = predict_row(n, k, mode, size, rate, cal, overrides)
                sched = len(r.parts) * cal["cluster"]["scheduler_cpu_per_partition_s"]
                print("%5d %5d %15s %9.2f %8.2f %7.3f %8.2f %8.2f %6.2f %5.2f%%  %s" % (
                    n, k, parts_short(r.parts), r.time * 1e3, r.bound * 1e3, r.ratio,
                    rf * 1e3, rm * 1e3, rm / r.time, 100 * sched / r.time,
                    limits_text(r.limits, top=2)))
                sys.stdout.flush()
    return 0


def cmd_whatif(args):
    """Defaults against single changes, at one n: what removes the first bottleneck."""
    cal = load_calibration(args.calibration)
    base = parse_sets(args.set)
    size = parse_bytes(args.bytes)
    n = args.workers
    no_cpu = {"tcp_cpu_per_byte_side_s": 0.0, "frame_cpu_s": 0.0, "sum_cpu_per_byte_s": 0.0}
    variants = [
        ("defaults", {}),
        ("IO_THREADS=4", {"io_threads": 4}),
        ("IO_THREADS=16", {"io_threads": 16}),
        ("credit off (SCHEDULING_CREDIT=0)", {"scheduling_credit": 0}),
        ("credit = one partition per server", {"scheduling_credit": "k"}),
        ("lookahead 4.25 MiB (deep buffers, as emulated)", {"credit_lookahead_bytes": 4456448}),
        ("SERVER_CHUNK_BYTES=16384", {"server_chunk_bytes": 16384}),
        ("IO_THREADS=16, chunk 16 KiB", {"io_threads": 16, "server_chunk_bytes": 16384}),
        ("IO_THREADS=16, credit one per server", {"io_threads": 16, "scheduling_credit": "k"}),
        ("IO_THREADS=16, credit per server, chunk 16 KiB",
         {"io_threads": 16, "scheduling_credit": "k", "server_chunk_bytes": 16384}),
        ("frame CPU 30 us (measured upper bound)", {"frame_cpu_s": 30e-6}),
        ("frame CPU 30 us, IO_THREADS=16", {"frame_cpu_s": 30e-6, "io_threads": 16}),
        ("no CPU cost (network only)", no_cpu),
        ("network only, chunk 16 KiB", dict(no_cpu, server_chunk_bytes=16384)),
        ("network only, latency 0", dict(no_cpu, latency_s=0.0)),
    ]
    print("# psim whatif: n = %d, %s, profile 'cluster'; times in ms (sim/bound)" % (
        n, fmt_bytes(size)))
    configs = [("ps", "k = n", n), ("ps", "k = n/2", n // 2), ("mixed", "mixed k = n/2", n // 2)]
    for rate in args.rates.split(","):
        print()
        print("## %s" % fmt_rate(parse_rate(rate)))
        print("%-46s" % "change" + "".join("%20s" % c[1] for c in configs))
        for label, change in variants:
            cells = []
            for mode, _, k in configs:
                ov = dict(base)
                for key, v in change.items():
                    if v == "k":
                        servers = k if mode == "ps" else n + k
                        # a credit of one partition per server, counted in the partition size
                        parts = split(size, servers, make_params(n, k, mode, size, rate,
                                                                 "cluster", cal))
                        ov["credit_unit"] = parts[0]
                        v = servers
                    ov[key] = v
                p = make_params(n, k, mode, size, rate, "cluster", cal, **ov)
                r = simulate(p)
                cells.append("%9.2f (%6.2f)" % (r.time * 1e3, r.ratio))
            print("%-46s" % label + "".join("%20s" % c for c in cells))
            sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------------------------
# CLI

def parse_sets(items):
    out = {}
    for item in items or []:
        key, _, value = item.partition("=")
        value = value.strip()
        if value.lower() in ("none", "null"):
            out[key] = None
        else:
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = float(value)
    return out


def cmd_run(args):
    cal = load_calibration(args.calibration)
    overrides = parse_sets(args.set)
    if args.partition_bytes is not None:
        overrides["partition_bytes"] = parse_bytes(args.partition_bytes)
    if args.credit is not None:
        overrides["scheduling_credit"] = args.credit
    p = make_params(args.workers, args.servers if args.servers is not None else args.workers,
                    args.placement, parse_bytes(args.bytes), args.rate, args.profile, cal,
                    **overrides)
    r = simulate(p)
    b = p["rate_bps"] / 8
    print("psim run: %d workers, %d %s servers, %s, %s links, profile %s" % (
        p["n"], r.servers, {"ps": "separate", "colocated": "colocated",
                            "mixed": "(colocated + CPU)"}[p["placement"]],
        fmt_bytes(p["size"]), fmt_rate(p["rate_bps"]), p["profile"]))
    print("partitions %s, credit %s, lookahead %.0f B, cut-through %s" % (
        parts_text(r.parts), ("%d B" % r.credit) if r.credit else "off", r.lookahead,
        "on (%d B chunks)" % chunk_for(p["server_chunk_bytes"], max(r.parts), p["chunk_per_push"])
        if r.cut_through else "off"))
    print("time %.3f ms   bound %s = %.3f ms   time/bound %.3f" % (
        r.time * 1e3, r.bound_name, r.bound * 1e3, r.ratio))
    print("ring all-reduce: formula %.3f ms, with TCP efficiency and latency %.3f ms" % (
        ring_formula(p["n"], p["size"], b) * 1e3,
        ring_model(p["n"], p["size"], b, p["tcp_efficiency"], p["latency_s"]) * 1e3))
    print("limits (share of the time): %s" % limits_text(r.limits, top=6))
    print("scheduler CPU per worker: %d partitions x %.0f ns = %.1f us" % (
        len(r.parts), cal["cluster"]["scheduler_cpu_per_partition_s"] * 1e9,
        len(r.parts) * cal["cluster"]["scheduler_cpu_per_partition_s"] * 1e6))
    return 0


def cmd_bounds(args):
    n, k = args.workers, args.servers if args.servers is not None else args.workers
    m, b = parse_bytes(args.bytes), parse_rate(args.rate) / 8
    print("M = %s, B = %s, n = %d, k = %d; seconds" % (fmt_bytes(m), fmt_rate(b * 8), n, k))
    print("ring all-reduce      2(n-1)/n M/B          %.6f" % ring_formula(n, m, b))
    print("ps (k separate)      max(M/B, nM/(kB))     %.6f" % bound_ps(n, k, m, b))
    print("colocated            2(n-1)/n M/B          %.6f" % bound_colocated(n, m, b))
    print("mixed (n + k)        2n(n-1)M/((n^2+kn-2k)B) %.6f  (CPU servers carry %.3f)" % (
        bound_mixed(n, k, m, b), mixed_cpu_fraction(n, k)))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="psim.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n"
               "  psim.py run --workers 4 --servers 4 --bytes 64M --rate 1gbit --profile emulated\n"
               "  psim.py validate\n"
               "  psim.py predict                     # 16..1024 workers, 25 and 100 Gbit/s\n"
               "  psim.py whatif --workers 256        # what each change buys at one size\n"
               "  psim.py bounds --workers 256 --servers 128 --bytes 64M --rate 100gbit\n"
               "Constants: calibration.json beside this file; --set NAME=VALUE overrides one.")
    ap.add_argument("--calibration", default=CALIBRATION, help="calibration file")
    sub = ap.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="simulate one push_pull and print time and time/bound")
    r.add_argument("--workers", "-n", type=int, required=True)
    r.add_argument("--servers", "-k", type=int, help="k (default n); CPU servers in mixed mode")
    r.add_argument("--placement", choices=["ps", "colocated", "mixed"], default="ps")
    r.add_argument("--bytes", "-m", default="64M", help="tensor size (64M = 64 MiB)")
    r.add_argument("--rate", default="1gbit", help="link rate per direction (1gbit, 25gbit)")
    r.add_argument("--profile", choices=["cluster", "emulated"], default="cluster")
    r.add_argument("--partition-bytes", help="BYTEPS_PARTITION_BYTES (default: auto)")
    r.add_argument("--credit", type=int, help="BYTEPS_SCHEDULING_CREDIT (0: off)")
    r.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="override a constant of calibration.json (repeatable)")
    r.set_defaults(func=cmd_run)

    v = sub.add_parser("validate", help="compare with the emulated runs of performance.md; "
                                        "exit 1 if a gated error exceeds 10%%")
    v.add_argument("--set", action="append", metavar="NAME=VALUE")
    v.set_defaults(func=cmd_validate)

    pr = sub.add_parser("predict", help="tables for 16..1024 workers at 25 and 100 Gbit/s")
    pr.add_argument("--bytes", "-m", default="64M")
    pr.add_argument("--rates", default="25gbit,100gbit")
    pr.add_argument("--workers", help="comma-separated n (default 16,32,...,1024)")
    pr.add_argument("--configs", help="subset of ps-n,ps-half,mixed")
    pr.add_argument("--network-only", action="store_true",
                    help="no CPU cost anywhere (links, credit, chunks and latency only)")
    pr.add_argument("--set", action="append", metavar="NAME=VALUE")
    pr.set_defaults(func=cmd_predict)

    w = sub.add_parser("whatif", help="defaults against single changes at one n")
    w.add_argument("--workers", "-n", type=int, default=256)
    w.add_argument("--bytes", "-m", default="64M")
    w.add_argument("--rates", default="25gbit,100gbit")
    w.add_argument("--set", action="append", metavar="NAME=VALUE")
    w.set_defaults(func=cmd_whatif)

    b = sub.add_parser("bounds", help="the formulas of MISSION.md for one case")
    b.add_argument("--workers", "-n", type=int, required=True)
    b.add_argument("--servers", "-k", type=int)
    b.add_argument("--bytes", "-m", default="64M")
    b.add_argument("--rate", default="1gbit")
    b.set_defaults(func=cmd_bounds)

    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
