#!/usr/bin/env bash
# The issue-4 measurement, end to end (docs/performance.md): installs the benchmarks'
# dependencies, builds them into BUILD_DIR, then runs, writing everything under RESULTS:
#   1. micro.txt        bps-micro pinned to one core (reducer vs memcpy, partition + schedule,
#                       wire header)
#   2. loopback/        2 workers + 2 servers on this machine vs Gloo and MPI with 2 ranks
#   3. emulated/        emulated cluster at RATE: 4 workers + 4 separate servers, and 4 machines
#                       each a worker + colocated server, vs Gloo ring and MPI_Allreduce over the
#                       same 4 worker hosts (needs root: network namespaces)
#   4. idle-cpu.txt     CPU used by an idle loopback job (scripts/bench-idle-cpu.sh)
# loopback/ and emulated/ each hold summary.txt (the combined table) and busbw.png.
#
# Environment knobs: BUILD_DIR (build-bench), RESULTS (BUILD_DIR/bench-results/all-<date>),
# RATE (1gbit), WORKERS (4), SERVERS (WORKERS), MAX_BYTES (256M), LOOPBACK_MAX_BYTES (64M),
# DTYPE (float32), ITERS (20), WARMUP (5), SKIP (comma list of micro,loopback,emulated,idle),
# BUILD_JOBS (nproc).
# Run it on a quiet machine: other processes on its 2 cores change every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-bench}
rate=${RATE:-1gbit}
workers=${WORKERS:-4}
servers=${SERVERS:-$workers}
max_bytes=${MAX_BYTES:-256M}
loopback_max=${LOOPBACK_MAX_BYTES:-64M}
dtype=${DTYPE:-float32}
iters=${ITERS:-20}
warmup=${WARMUP:-5}
skip=${SKIP:-}

scripts/install-bench-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBYTEPS_BUILD_BENCHMARKS=ON \
  -DBYTEPS_BUILD_TESTS=OFF -DBYTEPS_BUILD_EXAMPLES=OFF
cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}" --target bps-bench bps-micro gloo-allreduce \
  mpi-allreduce byteps-server

results=${RESULTS:-$build/bench-results/all-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$results"
results=$(cd "$results" && pwd)
{
  echo "date:    $(date -Is)"
  echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "nproc:   $(nproc)"
  echo "kernel:  $(uname -r)"
  echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory:  $(free -h | awk '/^Mem:/ { print $2 }')"
  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$results/machine.txt"

has_skip() { [[ ",$skip," == *",$1,"* ]]; }

if ! has_skip micro; then
  echo "== bps-micro" >&2
  taskset -c "$(($(nproc) - 1))" "$build/benchmarks/bps-micro" --benchmark_min_time=0.5 2>&1 |
    tee "$results/micro.txt"
fi
if ! has_skip loopback; then
  echo "== loopback" >&2
  benchmarks/run-emulated.sh --mode loopback --build "$build" --workers 2 --servers 2 \
    --max-bytes "$loopback_max" --dtype "$dtype" --iters "$iters" --warmup "$warmup" \
    --out "$results/loopback"
fi
if ! has_skip emulated; then
  echo "== emulated, $rate" >&2
  sudo=()
  ((EUID == 0)) || sudo=(sudo -E)
  "${sudo[@]}" benchmarks/run-emulated.sh --mode emulated --build "$build" --workers "$workers" \
    --servers "$servers" --rate "$rate" --max-bytes "$max_bytes" --dtype "$dtype" \
    --iters "$iters" --warmup "$warmup" --out "$results/emulated"
fi
if ! has_skip idle; then
  echo "== idle CPU" >&2
  BUILD_DIR=$build scripts/bench-idle-cpu.sh | tee "$results/idle-cpu.txt" || true
fi
echo "bench-all: results in $results" >&2
