#!/usr/bin/env python3
"""What TCP did in each emulated host during a job: retransmissions, and whether they were real.

  tcp-events.py record FILE [--interval-ms MS]
      Run beside benchmarks/run-emulated.sh (same machine, as root). Waits for a job in the
      emulated hosts (network namespaces named PREFIX-h<i>, emulate.sh's), reads each host's
      TCP counters (/proc/PID/net/netstat and snmp of a process in it: the namespace's) when the
      job is found and then every MS milliseconds (default 100) until that host's processes are
      gone, and writes FILE: for each host the programs that ran in it and how much each counter
      rose from the first reading to the last.

  tcp-events.py report FILE [--all]
      One row per event, one column per host: segments sent and retransmitted, how many of the
      retransmitted ones the receiver reported back as duplicates (D-SACK: they had arrived, so
      the retransmission was spurious), the rest (an upper bound on segments really lost: a
      receiver need not report every duplicate), recoveries and the reordering TCP detected,
      tail-loss probes, retransmission timeouts and segments received out of order. With
      --all, every counter that rose, by its kernel name.

The counters are the namespace's, so each host's figure covers all its processes' connections.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emulated_hosts import record_report_parser, wait_for_job  # noqa: E402

# (row label, kernel counters summed into it); "not reported" is derived in report().
ROWS = [
    ("segments sent", ["Tcp.OutSegs"]),
    ("retransmitted", ["Tcp.RetransSegs"]),
    ("  reported back as duplicates", ["TcpExt.TCPDSACKRecvSegs"]),
    ("  not reported (lost at most)", None),
    ("recoveries (SACK)", ["TcpExt.TCPSackRecovery"]),
    ("  reordering detected", ["TcpExt.TCPSACKReorder", "TcpExt.TCPTSReorder",
                               "TcpExt.TCPRenoReorder"]),
    ("  undone", ["TcpExt.TCPFullUndo", "TcpExt.TCPPartialUndo", "TcpExt.TCPDSACKUndo",
                  "TcpExt.TCPLossUndo"]),
    ("tail-loss probes", ["TcpExt.TCPLossProbes"]),
    ("retransmission timeouts", ["TcpExt.TCPTimeouts"]),
    ("received out of order", ["TcpExt.TCPOFOQueue"]),
]


def read_counters(pid):
    """{"Tcp.OutSegs": n, "TcpExt.TCPTimeouts": n, ...} of the namespace of process `pid`."""
    values = {}
    for table in ("netstat", "snmp"):
        with open(f"/proc/{pid}/net/{table}") as f:
            lines = f.read().splitlines()
        for names, numbers in zip(lines[::2], lines[1::2]):
            keys, vals = names.split(), numbers.split()
            for key, val in zip(keys[1:], vals[1:]):
                try:
                    values[f"{keys[0].rstrip(':')}.{key}"] = int(val)
                except ValueError:
                    pass
    return values


# What emulate.sh and run-emulated.sh start a host's program with: not worth a column's name.
WRAPPERS = {"timeout", "bash", "sh", "env", "setsid", "taskset"}


def programs(pids):
    """The names of the programs among `pids`, launch wrappers left out."""
    names = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            if name not in WRAPPERS:
                names.add(name)
        except OSError:
            pass
    return sorted(names)


def record(path, interval_ms):
    hosts = wait_for_job("tcp-events.py")
    first, last, names, live = {}, {}, {}, {}
    for h, pids in hosts.items():
        names[h] = programs(pids)
        live[h] = pids
    print(f"tcp-events.py: recording {len(hosts)} hosts every {interval_ms:g} ms into {path}",
          file=sys.stderr)
    while live:
        for h in list(live):
            for pid in list(live[h]):
                try:
                    values = read_counters(pid)
                    break
                except OSError:  # this process ended; another of the host may still run
                    live[h].remove(pid)
            else:
                del live[h]
                continue
            first.setdefault(h, values)
            last[h] = values
        time.sleep(interval_ms / 1e3)
    out = {"hosts": [{"host": h, "programs": names[h],
                      "counters": {k: v - first[h].get(k, 0) for k, v in last[h].items()
                                   if v != first[h].get(k, 0)}}
                     for h in sorted(last)]}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"tcp-events.py: {len(last)} hosts written", file=sys.stderr)


def report(path, everything):
    try:
        with open(path) as f:
            hosts = json.load(f)["hosts"]
        columns = [(f"h{h['host']} {'+'.join(h['programs']) or '-'}", h["counters"]) for h in hosts]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"tcp-events.py: {path}: not a record of tcp-events.py record ({e})")
    if not columns:
        raise SystemExit(f"tcp-events.py: {path}: no hosts recorded")
    width = max(12, max(len(name) for name, _ in columns))
    label_width = 30

    def cells(values):
        return " ".join(f"{v:>{width}}" for v in values)

    print(f"{'# event':<{label_width}} " + cells(name for name, _ in columns))
    if everything:
        keys = sorted({k for _, c in columns for k in c})
        for k in keys:
            print(f"{k:<{label_width}} " + cells(c.get(k, 0) for _, c in columns))
        return
    for label, keys in ROWS:
        if keys is None:  # retransmitted, less those reported back as duplicates
            values = [max(0, c.get("Tcp.RetransSegs", 0) - c.get("TcpExt.TCPDSACKRecvSegs", 0))
                      for _, c in columns]
        else:
            values = [sum(c.get(k, 0) for k in keys) for _, c in columns]
        print(f"{label:<{label_width}} " + cells(values))


def main():
    ap, _, rep = record_report_parser(__doc__, default_interval_ms=100)
    rep.add_argument("--all", action="store_true")
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.file, args.interval_ms)
    else:
        report(args.file, args.all)


if __name__ == "__main__":
    main()
