#!/usr/bin/env bash
# The GPU path's figures on one machine (issue 14), as docs/performance.md reports them:
#   1. pinned host <-> device copy bandwidth (bps-gpu-bench --copy): the copy stages' bound;
#   2. push_pull of device buffers, 4 KiB .. 256 MiB, N workers (default 2) x 2 servers on
#      loopback, through bps::local::nccl (bps-gpu-bench under byteps-launch; exact sums
#      checked), then the same sweep on host buffers over plain TCP (bps-bench, when built) for
#      the GPU path's cost;
#   3. per size, a traced job whose `byteps-trace summary` gives the time per stage:
#      local_reduce (the wait for the caller's stream, the local reduce), copy_out (each
#      partition to pinned host memory), queue, push and pull (the servers), copy_in (each
#      partition back), local_gather (the broadcast).
#
#   benchmarks/gpu-sweep.sh [BUILD_DIR] [--workers N] [--max-bytes N] [--trace-sizes "4K 1M ..."]
#
# With one GPU, --workers 1 is the job in which no two worker processes share the device.
#
# BUILD_DIR (default: build) holds benchmarks/bps-gpu-bench, tools/byteps-launch,
# tools/byteps-server and tools/byteps-trace. Exits 77 where there is no CUDA device.
set -euo pipefail

build=build
workers=2
max_bytes=256M
trace_sizes="4K 64K 1M 16M 256M"
while (($#)); do
  case "$1" in
    --max-bytes) max_bytes=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --trace-sizes) trace_sizes=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-sweep.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done

bench=$build/benchmarks/bps-gpu-bench
launch=$build/tools/byteps-launch
trace=$build/tools/byteps-trace
for f in "$bench" "$launch" "$trace"; do
  [[ -x $f ]] || { echo "gpu-sweep.sh: $f is missing: build with -DBYTEPS_WITH_CUDA=ON -DBYTEPS_BUILD_BENCHMARKS=ON" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-sweep.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== 1. copy bandwidth (pinned host memory)"
rc=0
"$bench" --copy --min-bytes 4K --max-bytes "$max_bytes" --step-factor 4 || rc=$?
((rc == 77)) && exit 77
((rc == 0)) || { echo "gpu-sweep.sh: the copy measurement failed (exit $rc)" >&2; exit 1; }

echo "== 2. push_pull of device buffers, $workers worker(s) x 2 servers on loopback"
BYTEPS_LOG_LEVEL=WARNING "$launch" --workers "$workers" --servers 2 --timeout 300 -- \
  "$bench" --min-bytes 4K --max-bytes "$max_bytes" --step-factor 4

host_bench=$build/benchmarks/bps-bench
if [[ -x $host_bench ]]; then
  echo "== 2b. the same sweep on host buffers (bps-bench, plain TCP: BYTEPS_ENABLE_IPC=0)"
  BYTEPS_LOG_LEVEL=WARNING BYTEPS_ENABLE_IPC=0 "$launch" --workers "$workers" --servers 2 --timeout 300 -- \
    "$host_bench" --min-bytes 4K --max-bytes "$max_bytes" --step-factor 4
fi

echo "== 3. time per stage (traced job per size: 3 warm-up + 10 traced push_pulls)"
for size in $trace_sizes; do
  dir=$work/trace-$size
  mkdir -p "$dir"
  echo "-- $size"
  BYTEPS_LOG_LEVEL=WARNING BYTEPS_TRACE_ON=1 BYTEPS_TRACE_DIR="$dir" BYTEPS_TRACE_START_STEP=3 \
    BYTEPS_TRACE_END_STEP=13 "$launch" --workers "$workers" --servers 2 --timeout 300 -- \
    "$bench" --min-bytes "$size" --max-bytes "$size" --warmup 3 --iters 10 >"$dir/job.log" 2>&1 ||
    { cat "$dir/job.log"; echo "gpu-sweep.sh: the traced job at $size failed" >&2; exit 1; }
  grep -v '^#' "$dir/job.log" | grep -E '^\[worker 0\] +[0-9]' || true
  "$trace" summary "$dir" | sed -n '/^Time per stage/,/^$/p'
done
