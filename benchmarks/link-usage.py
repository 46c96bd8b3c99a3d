#!/usr/bin/env python3
"""How busy each emulated host's link was during the timed rounds of a benchmark.

  link-usage.py record FILE [--interval-ms MS] [--packets]
      Run beside benchmarks/run-emulated.sh (same machine, as root). Waits for a job in the
      emulated hosts (network namespaces named PREFIX-h<i>, emulate.sh's), then every MS
      milliseconds (default 5) writes one line to FILE: the monotonic clock in seconds, then
      for each host its eth0 bytes sent and received (read from /proc/PID/net/dev of a process
      in the host); with --packets, packets sent and received instead (GSO aggregates count
      once: how many small packets, acknowledgements, went out). Stops when the job's
      processes are gone. `report` reads byte records only.

  link-usage.py report FILE TIMES_DIR --rate RATE [--bins HOST,...]
      TIMES_DIR holds the files of the benchmark's --times DIR (one clock with the record: the
      emulated hosts share the machine's). For each timed round (first rank out of the barrier
      to the last result) it prints each host's bytes sent as a share of RATE (e.g. 1gbit): over
      the whole round, its first 10%, middle 80% and last 10%; with --bins, the share in 20 ms
      steps from the round's start for the hosts named, averaged over the rounds.

The counters count what the host's interface carried, headers included: TCP at full speed shows
about 0.96 of the tbf rate here (emulate.sh --verify).
"""
import bisect
import glob
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emulated_hosts import record_report_parser, wait_for_job  # noqa: E402


def parse_rate(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)(bit|bps)", text.lower())
    if not m:
        raise SystemExit(f"link-usage.py: --rate '{text}': expected e.g. 1gbit or 400mbit")
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    bits = float(m.group(1)) * mult
    return bits / 8 if m.group(3) == "bit" else bits  # bytes per second (tc: bps is bytes)


def counters(pid, packets=False):
    """eth0's (sent, received) bytes, or packets, in the namespace of process `pid`."""
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "eth0":
                v = rest.split()
                return (int(v[9]), int(v[1])) if packets else (int(v[8]), int(v[0]))
    raise FileNotFoundError


def record(path, interval_ms, packets=False):
    hosts = {h: pids[-1] for h, pids in wait_for_job("link-usage.py").items()}
    print(f"link-usage.py: recording {len(hosts)} hosts every {interval_ms} ms into {path}",
          file=sys.stderr)
    lines = 0
    with open(path, "w") as f:
        while True:
            t = time.monotonic()
            try:
                row = [counters(hosts[h], packets) for h in sorted(hosts)]
            except (FileNotFoundError, ProcessLookupError):
                break  # a process of the job ended: the job is over
            f.write(f"{t:.6f} " + " ".join(f"{tx} {rx}" for tx, rx in row) + "\n")
            lines += 1
            time.sleep(interval_ms / 1e3)
    print(f"link-usage.py: {lines} samples", file=sys.stderr)


def report(path, times_dir, rate, bin_hosts):
    rows = [[float(x) for x in line.split()] for line in open(path) if line.strip()]
    if len(rows) < 2:
        raise SystemExit(f"link-usage.py: {path}: fewer than 2 samples")
    hosts = (len(rows[0]) - 1) // 2
    rounds = {}
    for name in glob.glob(os.path.join(times_dir, "*-rank*.txt")):
        for line in open(name):
            size, it, t0, t1 = line.split()
            if int(it) >= 0:
                rounds.setdefault((int(size), int(it)), []).append((int(t0) / 1e9, int(t1) / 1e9))
    if not rounds:
        raise SystemExit(f"link-usage.py: no timed rounds in {times_dir} (run with --times)")
    times = [r[0] for r in rows]

    def sent_at(t, host):  # bytes sent by `host` up to time t, between samples linearly
        k = bisect.bisect_left(times, t)
        if k == 0 or k >= len(times):
            return None
        a, b = rows[k - 1], rows[k]
        col = 1 + 2 * host
        return a[col] + (b[col] - a[col]) * (t - a[0]) / (b[0] - a[0])

    def share(host, start, end):
        x0, x1 = sent_at(start, host), sent_at(end, host)
        return None if x0 is None or x1 is None else ((x1 - x0), end - start)

    windows = [(min(a for a, _ in v), max(b for _, b in v)) for _, v in sorted(rounds.items())]
    phases = [("round", 0, 1), ("first 10%", 0, 0.1), ("middle 80%", 0.1, 0.9),
              ("last 10%", 0.9, 1)]
    print(f"# {len(windows)} timed rounds, mean {1e3 * sum(e - s for s, e in windows) / len(windows):.1f} ms"
          f" (first rank out of the barrier to the last result); bytes sent / ({rate * 8 / 1e9:g} Gbit/s"
          " x time)")
    print("# host " + " ".join(f"{p[0]:>11}" for p in phases))
    for h in range(hosts):
        cells = []
        for _, a, b in phases:
            sent = span = 0.0
            for s, e in windows:
                got = share(h, s + (e - s) * a, s + (e - s) * b)
                if got:
                    sent += got[0]
                    span += got[1]
            cells.append(f"{sent / span / rate:11.3f}" if span else f"{'-':>11}")
        print(f"{h:6d} " + " ".join(cells))
    for h in bin_hosts:
        if not 0 <= h < hosts:
            raise SystemExit(f"link-usage.py: --bins: no host {h} (0 .. {hosts - 1})")
        steps = int(max(e - s for s, e in windows) / 0.02) + 1
        shares = []
        for k in range(steps):
            got = [share(h, s + 0.02 * k, s + 0.02 * (k + 1)) for s, e in windows
                   if s + 0.02 * (k + 1) <= e]
            got = [g for g in got if g]
            if got:
                shares.append(sum(g[0] for g in got) / sum(g[1] for g in got) / rate)
        print(f"# host {h}, 20 ms steps: " + " ".join(f"{x:.2f}" for x in shares))


def main():
    ap, rec, rep = record_report_parser(__doc__, default_interval_ms=5)
    rec.add_argument("--packets", action="store_true")
    rep.add_argument("times_dir")
    rep.add_argument("--rate", required=True)
    rep.add_argument("--bins", default="")
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.file, args.interval_ms, args.packets)
    else:
        bins = [int(x) for x in args.bins.split(",") if x != ""]
        report(args.file, args.times_dir, parse_rate(args.rate), bins)


if __name__ == "__main__":
    main()
