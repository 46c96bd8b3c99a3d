#!/usr/bin/env bash
# A server's CPU per byte (issue 37): one server summing W workers' pushes of one tensor on
# loopback, its CPU time (user + system, from the shell that ran it) per GB of pushes summed,
# for each dtype asked. The bound is what a server must read and write, each push once and the
# sum once, (W + 1) x the tensor's bytes a round, at this machine's memory bandwidth on one
# core: twice memcpy's rate (a copy reads and writes each byte). Two rates give two bounds:
# x_bound with bps-micro's BM_memcpy/4096000 (the default partition, the size the server's
# loops run over, which fits in the last-level cache) and x_mem with BM_memcpy/67108864 (past
# the cache: memory itself, where a round of W 64 MiB pushes lies). Each is the measured CPU
# over that bound. Prints one table row per dtype.
#   benchmarks/server-cpu.sh [--build DIR] [--workers W] [--bytes SIZE] [--iters N]
#                            [--dtypes LIST] [--marginal M]
# --marginal M: also runs M iterations (M > N) and prints a second row per dtype, "+rounds",
# with what the extra M - N rounds cost per GB: the per-byte cost without the server's fixed
# cost (joining, mapping rings, taking its buffers), which a short job's figure includes.
# Defaults: build-bench, 4 workers, 64M, 20 iterations, float32,float16. The build needs
# bps-bench, bps-micro and byteps-server (-DBYTEPS_BUILD_BENCHMARKS=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bench workers=4 bytes=64M iters=20 dtypes=float32,float16 marginal=0
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --marginal) marginal=$2; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "server-cpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $iters =~ ^[0-9]+$ && $marginal =~ ^[0-9]+$ ]] ||
  { echo "server-cpu.sh: --iters and --marginal take a number of iterations" >&2; exit 2; }
((marginal == 0 || marginal > iters)) ||
  { echo "server-cpu.sh: --marginal $marginal must be more than --iters $iters" >&2; exit 2; }
[[ -d $build ]] || { echo "server-cpu.sh: no build folder $build (see --help)" >&2; exit 2; }
build=$(cd "$build" && pwd)
for tool in benchmarks/bps-bench benchmarks/bps-micro tools/byteps-server tools/byteps-launch; do
  [[ -x $build/$tool ]] || { echo "server-cpu.sh: $build/$tool is missing; build the" \
    "benchmarks (-DBYTEPS_BUILD_BENCHMARKS=ON) into $build or pass --build" >&2; exit 2; }
done
to_bytes() {
  local n=${1%[KMG]} unit=${1: -1}
  case $unit in K) echo $((n << 10)) ;; M) echo $((n << 20)) ;; G) echo $((n << 30)) ;; *) echo "$1" ;; esac
}
size=$(to_bytes "$bytes")
work=$(mktemp -d)
trap '[[ -n ${KEEP_WORK:-} ]] || rm -rf "$work"' EXIT

# memcpy's rate on this machine (bytes/s, one core) for `$1` bytes.
memcpy_rate_of() {
  local rate
  rate=$("$build/benchmarks/bps-micro" --benchmark_filter="^BM_memcpy/$1\$" \
    --benchmark_format=json 2>/dev/null | python3 -c '
import json, sys
rows = [b for b in json.load(sys.stdin)["benchmarks"] if b.get("run_type") != "aggregate"]
print(rows[0]["bytes_per_second"] if rows else "")')
  [[ -n $rate ]] || { echo "server-cpu.sh: bps-micro has no BM_memcpy/$1" >&2; exit 1; }
  echo "$rate"
}
memcpy_rate=$(memcpy_rate_of 4096000)      # the default partition, in the cache
memory_rate=$(memcpy_rate_of 67108864)     # past the last-level cache

# The server, wrapped so that its shell prints the CPU its child used when it exits (the
# scheduler runs the same program, and prints its own; only server 0's line is read).
cat >"$work/server" <<WRAP
#!/usr/bin/env bash
"$build/tools/byteps-server" "\$@" && status=0 || status=\$?
times >"\$0.\$\$.times"  # in this shell: a subshell's children are not the server
echo "server-cpu: \$(tail -1 "\$0.\$\$.times")" >&2
exit \$status
WRAP
chmod +x "$work/server"

printf '# %s workers, 1 server, %s bytes per push, %s iterations (+5 warm-up), loopback; memcpy %.2f GB/s (4096000 bytes), %.2f GB/s (64 MiB)\n' \
  "$workers" "$size" "$iters" "$(python3 -c "print($memcpy_rate / 1e9)")" \
  "$(python3 -c "print($memory_rate / 1e9)")"
printf '# %-8s %8s %8s %10s %13s %9s %7s\n' dtype user_s sys_s GB_summed cpu_s_per_GB x_bound x_mem
# Runs one job of `$2` iterations of dtype `$1`; sets `user` and `system`, the server's CPU
# seconds.
server_times() {
  local log=$work/$1.$2.log line
  "$build/tools/byteps-launch" --workers "$workers" --servers 1 --server-bin "$work/server" -- \
    "$build/benchmarks/bps-bench" --min-bytes "$size" --max-bytes "$size" --iters "$2" \
    --dtype "$1" >"$log" 2>&1 || { cat "$log"; echo "server-cpu.sh: the job failed" >&2; exit 1; }
  line=$(grep -E '^\[server 0\] server-cpu: ' "$log")
  read -r user system < <(python3 -c '
import re, sys
print(*(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", sys.argv[1])))' "$line")
}

# One table row: `label`, user and system seconds over `rounds` rounds of the job.
row() {
  python3 - "$@" "$workers" "$size" "$memcpy_rate" "$memory_rate" <<'PY'
import sys
label, user, system, rounds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
workers, size = int(sys.argv[5]), int(sys.argv[6])
cache_rate, memory_rate = float(sys.argv[7]), float(sys.argv[8])
cpu = user + system
summed = workers * size * rounds         # bytes of pushes the server summed
moved = (workers + 1) * size * rounds    # bytes it must read and write
print(f"  {label:<8} {user:8.2f} {system:8.2f} {summed / 1e9:10.2f} {cpu / (summed / 1e9):13.3f} "
      f"{cpu / (moved / (2 * cache_rate)):9.1f} {cpu / (moved / (2 * memory_rate)):7.1f}")
PY
}

IFS=, read -ra list <<<"$dtypes"
for dtype in "${list[@]}"; do
  server_times "$dtype" "$iters"
  row "$dtype" "$user" "$system" $((iters + 5))  # bps-bench's 5 warm-up rounds are summed too
  if ((marginal > 0)); then
    first_user=$user first_system=$system
    server_times "$dtype" "$marginal"
    row "+rounds" "$(python3 -c "print($user - $first_user)")" \
      "$(python3 -c "print($system - $first_system)")" $((marginal - iters))
  fi
done
