#!/usr/bin/python3
"""How evenly a step's rows spread over the servers, by hash (what byteps does:
embedding/placement.hpp's row_server) and by contiguous ranges of ids, for the workload of
bps-rows-bench (benchmarks/rows_workload.hpp): each worker draws --batch ids a step from a Zipf
distribution over 0 .. rows-1 (small ids hottest) and sends each unique id once. Prints, per
skew, the busiest server's rows over the mean (1.0 is even): the busiest server's link and CPU
set a step's time.

  /usr/bin/python3 benchmarks/rows_placement.py [--rows N] [--servers S] [--workers W]
      [--batch B] [--steps T] [--zipf S,S,...] [--seed N]
"""
import argparse

import numpy as np

MASK = (1 << 64) - 1


def mix(x):
    """embedding::mix, splitmix64's finaliser."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def tensor_key(name):
    """core/keys.hpp's FNV-1a of a name."""
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & MASK
    return h


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=200000)
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--zipf", default="0.9,1.05,1.2")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    key = mix(tensor_key("rows") ^ 0x7461626C655F6B79)  # embedding::table_key("rows")
    rng = np.random.default_rng(a.seed)
    print(f"# {a.workers} workers x {a.batch} ids a step over {a.rows} rows, {a.servers} servers, "
          f"{a.steps} steps; busiest server's rows / mean")
    print(f"# {'zipf':>6} {'hash':>8} {'ranges':>8}")
    for s in (float(x) for x in a.zipf.split(",")):
        weights = 1.0 / np.arange(1, a.rows + 1) ** s
        weights /= weights.sum()
        by_hash, by_range = [], []
        for _ in range(a.steps):
            h = np.zeros(a.servers)
            r = np.zeros(a.servers)
            for _ in range(a.workers):
                ids = np.unique(rng.choice(a.rows, a.batch, p=weights))
                for i in ids:
                    h[mix(int(i) ^ key) % a.servers] += 1
                r += np.bincount((ids * a.servers) // a.rows, minlength=a.servers)
            by_hash.append(h.max() / h.mean())
            by_range.append(r.max() / r.mean())
        print(f"  {s:>6} {np.mean(by_hash):>8.3f} {np.mean(by_range):>8.3f}")


if __name__ == "__main__":
    main()
