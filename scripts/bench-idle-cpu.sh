#!/usr/bin/env bash
# Idle CPU of a byteps job (issue 4: "idle byteps processes use no CPU"): starts a loopback job
# (a scheduler, SERVERS servers, WORKERS workers running bps-bench), lets it do a short sweep,
# then measures the CPU time every process of the job uses while the workers sit idle for
# IDLE seconds with the job up (connections open, heartbeats on). Prints each process's CPU
# in percent of one core over the measured window; exits 1 if any exceeds LIMIT_PERCENT.
#
# Environment: BUILD_DIR (build-bench), WORKERS (2), SERVERS (2), IDLE (10 s; at most ~50: the
# workers' barrier after the idle period must come within BYTEPS_OP_TIMEOUT_MS), LIMIT_PERCENT (1).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-bench}
workers=${WORKERS:-2}
servers=${SERVERS:-2}
idle=${IDLE:-10}
limit=${LIMIT_PERCENT:-1}
bench=$build/benchmarks/bps-bench
[[ -x $bench && -x $build/tools/byteps-launch ]] ||
  { echo "bench-idle-cpu: build $bench first (see docs/performance.md)" >&2; exit 2; }
((idle >= 4)) || { echo "bench-idle-cpu: IDLE must be >= 4 seconds" >&2; exit 2; }

log=$(mktemp "${TMPDIR:-/tmp}/bench-idle.XXXXXX")
set -m
BYTEPS_LOG_LEVEL=${BYTEPS_LOG_LEVEL:-WARNING} "$build/tools/byteps-launch" --workers "$workers" \
  --servers "$servers" --timeout $((idle + 120)) -- \
  "$bench" --max-bytes 64K --iters 3 --warmup 1 --idle "$idle" >"$log" 2>&1 &
launcher=$!
set +m
trap 'kill -TERM -- "-$launcher" 2>/dev/null || true; wait "$launcher" 2>/dev/null || true; rm -f -- "$log"' EXIT

# Wait for the idle period to begin, then one more second for the last replies to settle.
for _ in $(seq 600); do
  grep -q 'bps-bench: idle for' "$log" && break
  kill -0 "$launcher" 2>/dev/null || { cat "$log" >&2; echo "bench-idle-cpu: the job ended early" >&2; exit 1; }
  sleep 0.1
done
grep -q 'bps-bench: idle for' "$log" || { echo "bench-idle-cpu: the sweep did not finish" >&2; exit 1; }
sleep 1

# Every process of the job: the byteps-server and bps-bench processes below the launcher.
descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1"); do
    echo "$c"
    descendants "$c"
  done
}
pids=()
for p in $(descendants "$launcher"); do
  case $(ps -o comm= -p "$p") in byteps-server | bps-bench) pids+=("$p") ;; esac
done
((${#pids[@]} > 0)) || { echo "bench-idle-cpu: found no job processes" >&2; exit 1; }
ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
declare -A before
for p in "${pids[@]}"; do before[$p]=$(ticks "$p"); done
window=$((idle - 2))
sleep "$window"
hz=$(getconf CLK_TCK)
worst=0
echo "# idle CPU over $window s, $workers workers + $servers servers + scheduler (percent of one core)"
for p in "${pids[@]}"; do
  after=$(ticks "$p")
  pct=$(awk -v d=$((after - before[$p])) -v hz="$hz" -v w="$window" 'BEGIN { printf "%.2f", 100 * d / hz / w }')
  role=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^DMLC_ROLE=//p')
  printf '%8s %-14s %-10s %6s%%\n' "$p" "$(ps -o comm= -p "$p")" "${role:-?}" "$pct"
  worst=$(awk -v a="$worst" -v b="$pct" 'BEGIN { print (b > a) ? b : a }')
done
wait "$launcher" || { cat "$log" >&2; echo "bench-idle-cpu: the job failed" >&2; exit 1; }
echo "bench-idle-cpu: busiest process ${worst}% of a core (limit ${limit}%)"
awk -v w="$worst" -v l="$limit" 'BEGIN { exit !(w <= l) }'
