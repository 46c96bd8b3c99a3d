#!/usr/bin/env bash
# Reads the files a benchmark's --times DIR wrote (one per rank: "bytes iteration
# left_barrier_ns end_ns") and prints, per system and size, the medians over the timed
# iterations of:
#   slowest  the slowest rank's own time from leaving the barrier to its result (the table's
#            p50 column)
#   skew     from the first rank leaving the barrier to the last
#   span     from the first rank leaving the barrier to the last result: the round as the
#            cluster sees it
#   period   from one iteration's first barrier exit to the next one's (barrier and round)
# The ranks' clocks must be one clock: ranks of one host, or run-emulated.sh's namespaces.
# A change can move the slowest rank's time and leave span and period level: it moved when
# the ranks start, not how fast the cluster sums.
#
# usage: benchmarks/round-spans.sh DIR
set -euo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -eq 1 ]] && exit 0 || exit 2
fi
dir=$1
shopt -s nullglob
files=("$dir"/*-rank*.txt)
((${#files[@]} > 0)) || { echo "round-spans.sh: no *-rank*.txt files in $dir (run with --times $dir)" >&2; exit 1; }

# Per iteration of each system and size: the four figures, one line each.
for f in "${files[@]}"; do
  name=$(basename "$f" .txt)
  awk -v sys="${name%-rank*}" '$2 >= 0 { print sys, $1, $2, $3, $4 }' "$f"
done | awk '
  {
    k = $1 " " $2 " " $3
    if (!(k in first)) { first[k] = $4; last[k] = $4; end[k] = $5; slow[k] = $5 - $4; ranks[k] = 0 }
    if ($4 < first[k]) first[k] = $4
    if ($4 > last[k]) last[k] = $4
    if ($5 > end[k]) end[k] = $5
    if ($5 - $4 > slow[k]) slow[k] = $5 - $4
    ranks[k]++
  }
  END {
    for (k in first) {
      split(k, p, " ")
      print p[1], p[2], "slowest", slow[k] / 1e3
      print p[1], p[2], "skew", (last[k] - first[k]) / 1e3
      print p[1], p[2], "span", (end[k] - first[k]) / 1e3
      nk = p[1] " " p[2] " " (p[3] + 1)
      if (nk in first) print p[1], p[2], "period", (first[nk] - first[k]) / 1e3
      print p[1], p[2], "ranks", ranks[k]
    }
  }' | sort -k1,1 -k2,2n -k3,3 -k4,4g | awk '
  function flush() {
    if (n == 0) return
    med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    if (metric == "ranks") { rk[group] = (v[1] == v[n]) ? v[1] : v[1] "-" v[n]; iters[group] = n }
    else fig[group, metric] = med
    n = 0
  }
  {
    g = $1 " " $2
    if (g != group || $3 != metric) { flush(); group = g; metric = $3 }
    if (!(g in seen)) { seen[g] = 1; order[++groups] = g }
    v[++n] = $4
  }
  END {
    flush()
    printf "# medians over the timed iterations, us (benchmarks/round-spans.sh)\n"
    printf "#%11s %-10s %6s %6s %9s %9s %9s %9s\n", "size", "system", "ranks", "iters", "slowest", "skew", "span", "period"
    for (i = 1; i <= groups; i++) {
      g = order[i]; split(g, p, " ")
      printf "%12s %-10s %6s %6d %9.1f %9.1f %9.1f %9s\n", p[2], p[1], rk[g], iters[g],
        fig[g, "slowest"], fig[g, "skew"], fig[g, "span"],
        ((g, "period") in fig) ? sprintf("%.1f", fig[g, "period"]) : "-"
    }
  }'
