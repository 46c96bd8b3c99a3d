# Sourced by run-emulated.sh, which calls these once every system ran: the combined tables,
# from each system's output in $out/<system>.txt. Uses run-emulated.sh's variables (mode, model,
# workers, servers, topologies, dtype, link_gbps, rate, iters, warmup, systems, out) and its
# has().
# shellcheck shell=bash

# The servers, for a table's first line: " + K servers" on loopback, ", K separate servers
# (ps)" on the emulated cluster with the ps placement, nothing otherwise.
servers_text() {
  if [[ $mode == loopback ]]; then
    echo " + $servers servers"
  elif has "$topologies" ps; then
    echo ", $servers separate servers (ps)"
  fi
}

# A sweep's table: one row per size and system, with byteps' speed-up over Gloo and MPI.
sweep_summary() {
  local ps_servers
  ps_servers=$(servers_text)
  echo "# run-emulated.sh --mode $mode: $workers workers$ps_servers, dtype $dtype," \
    "${link_gbps:+link $link_gbps Gbit/s (tbf $rate), }iters $iters + warmup $warmup"
  echo "# time = p50 of the slowest rank, us; busbw = size/time*2(n-1)/n, GB/s;" \
    "x_gloo, x_mpi = the peer's time / this system's time (byteps rows only)"
  printf '#%11s %-17s %12s %11s %10s %7s %7s %7s\n' size system time_us busbw_GBps time/bound \
    wrong x_gloo x_mpi
  awk -v systems="${systems[*]}" -v dir="$out" '
    BEGIN {
      n = split(systems, sys, " ")
      for (s = 1; s <= n; s++) {
        file = dir "/" sys[s] ".txt"
        while ((getline line < file) > 0) {
          if (line ~ /^#/ || line ~ /^[[:space:]]*$/) continue
          nf = split(line, f, " ")
          if (f[1] !~ /^[0-9]+$/) continue
          key = f[1]
          if (!(key in seen)) { seen[key] = 1; sizes[++m] = key + 0 }
          t[sys[s], key] = f[4]; bw[sys[s], key] = f[7]; wr[sys[s], key] = f[8]
          ratio[sys[s], key] = nf >= 9 ? f[9] : "-"
        }
        close(file)
      }
      # sizes in increasing order (insertion sort; a few dozen)
      for (i = 2; i <= m; i++) { v = sizes[i]; j = i - 1
        while (j > 0 && sizes[j] > v) { sizes[j + 1] = sizes[j]; j-- } sizes[j + 1] = v }
      for (i = 1; i <= m; i++) {
        key = sizes[i] ""
        for (s = 1; s <= n; s++) {
          if (!((sys[s], key) in t)) continue
          xg = "-"; xm = "-"
          if (sys[s] ~ /^byteps/ && t[sys[s], key] > 0) {
            if (("gloo-ring", key) in t) xg = sprintf("%.2f", t["gloo-ring", key] / t[sys[s], key])
            if (("mpi-ring", key) in t) xm = sprintf("%.2f", t["mpi-ring", key] / t[sys[s], key])
          }
          printf "%12s %-17s %12s %11s %10s %7s %7s %7s\n", key, sys[s], t[sys[s], key],
            bw[sys[s], key], ratio[sys[s], key], wr[sys[s], key], xg, xm
        }
      }
    }'
}

# A --model run's table: every system's rows (a byteps row named after its placement), and
# byteps' speed-up over Gloo's better variant, per tensor or fused (the one a Gloo user picks).
mix_summary() {
  local ps_servers s
  ps_servers=$(servers_text)
  echo "# run-emulated.sh --mode $mode --model $model: $workers workers$ps_servers," \
    "${link_gbps:+link $link_gbps Gbit/s (tbf $rate), }iters $iters + warmup $warmup"
  for s in "${systems[@]}"; do grep -m1 '^# model ' "$out/$s.txt" 2>/dev/null && break; done
  echo "# p50, p99 of the slowest rank's time per iteration, ms;" \
    "x_gloo = the p50 of Gloo's better variant / this system's p50 (byteps rows only)"
  printf '#%-17s %10s %10s %7s %7s\n' system p50_ms p99_ms wrong x_gloo
  awk -v systems="${systems[*]}" -v dir="$out" '
    BEGIN {
      n = split(systems, sys, " ")
      best = 0
      for (s = 1; s <= n; s++) {
        file = dir "/" sys[s] ".txt"
        while ((getline line < file) > 0) {
          if (line ~ /^#/ || line ~ /^[[:space:]]*$/) continue
          nf = split(line, f, " ")
          if (nf < 4 || f[2] !~ /^[0-9.]+$/) continue
          name = sys[s] ~ /^byteps/ ? sys[s] : f[1]
          rows[++m] = name; p50[m] = f[2]; p99[m] = f[3]; wr[m] = f[4]
          if (name ~ /^gloo/ && f[2] > 0 && (best == 0 || f[2] + 0 < best)) best = f[2] + 0
        }
        close(file)
      }
      for (i = 1; i <= m; i++) {
        x = "-"
        if (rows[i] ~ /^byteps/ && best > 0 && p50[i] > 0) x = sprintf("%.2f", best / p50[i])
        printf "%-18s %10s %10s %7s %7s\n", rows[i], p50[i], p99[i], wr[i], x
      }
    }'
}

# The sweep tables of several runs (--repeat), each a summary.txt of sweep_summary, as one:
# per size and system the median of the runs' p50 times, busbw and time/bound, the median of
# each run's own x_gloo and x_mpi (every ratio taken within one run), `wrong` summed, and last
# the runs' p50 times from fastest to slowest. With an even count a median is the mean of the
# middle two.
repeat_summary() {
  local ps_servers
  ps_servers=$(servers_text)
  echo "# run-emulated.sh --mode $mode: $workers workers$ps_servers, dtype $dtype," \
    "${link_gbps:+link $link_gbps Gbit/s (tbf $rate), }iters $iters + warmup $warmup;" \
    "$# runs, every system once a run"
  echo "# medians over the runs: time = p50 of the slowest rank, us; busbw, GB/s; x_gloo, x_mpi" \
    "= the median of each run's ratio; wrong = summed; runs_us = each run's time, sorted"
  printf '#%11s %-17s %12s %11s %10s %7s %7s %7s  %s\n' size system time_us busbw_GBps \
    time/bound wrong x_gloo x_mpi runs_us
  awk '
    # The values of the space-separated `list` into v[1..n], in increasing numeric order (the
    # text of each kept); returns n.
    function sort_values(list, v,    n, i, j, x) {
      n = split(list, v, " ")
      for (i = 2; i <= n; i++) { x = v[i]; j = i - 1
        while (j > 0 && v[j] + 0 > x + 0) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
      return n
    }
    function median(list,    n, v) {
      n = sort_values(list, v)
      if (n == 0) return "-"
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    function sorted(list,    n, v, i, out) {
      n = sort_values(list, v)
      out = v[1]
      for (i = 2; i <= n; i++) out = out "," v[i]
      return out
    }
    function fmt(v, d) { return v == "-" ? "-" : sprintf("%." d "f", v) }
    function add(arr, k, v) { if (v != "-") arr[k] = (k in arr) ? arr[k] " " v : v }
    /^#/ || NF < 8 || $1 !~ /^[0-9]+$/ { next }
    {
      k = $1 SUBSEP $2
      if (!(k in seen)) { seen[k] = 1; keys[++m] = k }
      add(t, k, $3); add(bw, k, $4); add(tb, k, $5); add(xg, k, $7); add(xm, k, $8)
      wr[k] += $6
    }
    END {
      for (i = 1; i <= m; i++) {
        split(keys[i], p, SUBSEP)
        printf "%12s %-17s %12s %11s %10s %7s %7s %7s  %s\n", p[1], p[2], fmt(median(t[keys[i]]), 1),
          fmt(median(bw[keys[i]]), 4), fmt(median(tb[keys[i]]), 3), wr[keys[i]],
          fmt(median(xg[keys[i]]), 2), fmt(median(xm[keys[i]]), 2), sorted(t[keys[i]])
      }
    }
  ' "$@"
}
