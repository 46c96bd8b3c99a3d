#!/usr/bin/env bash
# rows-emulated.sh: issue 38's benchmark on the emulated cluster: embedding-table steps through
# byteps (bps-rows-bench: pull_rows and push_rows, then the dense push_pull of the table) with N
# workers on hosts 0..N-1 and N servers on hosts N..2N-1, then Gloo's all-gather of the same
# (id, gradient) pairs (gloo-rows-allgather) on hosts 0..N-1, over the same tbf-shaped links.
# Needs root (benchmarks/emulate.sh makes and deletes the hosts).
#
#   sudo benchmarks/rows-emulated.sh [--workers 4] [--rate 1gbit] [--build DIR] [-- BENCH ARGS]
#
# BENCH ARGS go to both programs (--rows, --dim, --batch, --zipf, --steps, --warmup; see
# bps-rows-bench --help). Prints both tables; each program's log is kept under --out.
set -euo pipefail
prog=rows-emulated.sh
here=$(cd "$(dirname "$0")" && pwd)
workers=4 rate=1gbit build= out= timeout_s=900
bench_args=()
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --inside) inside=1; shift ;;
    --) shift; bench_args=("$@"); break ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "$prog: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
build=${build:-$(cd "$here/.." && pwd)}
[[ -x $build/benchmarks/bps-rows-bench && -x $build/tools/byteps-server ]] ||
  { echo "$prog: $build has no benchmarks/bps-rows-bench or tools/byteps-server (-DBYTEPS_BUILD_BENCHMARKS=ON)" >&2; exit 2; }

if [[ -z ${inside:-} ]]; then
  out=${out:-$build/bench-results/rows-emulated-$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$out"
  exec "$here/emulate.sh" --hosts $((2 * workers)) --rate "$rate" -- \
    "$0" --inside --workers "$workers" --build "$build" --out "$out" --timeout "$timeout_s" -- "${bench_args[@]}"
fi

read -r -a ns <<<"${EMU_NS:?run through emulate.sh}"
read -r -a addr <<<"${EMU_ADDRS:?}"
on_host() { local h=$1; shift; ip netns exec "${ns[h]}" "$@"; }
common=(DMLC_NUM_WORKER="$workers" DMLC_NUM_SERVER="$workers" DMLC_PS_ROOT_URI="${addr[workers]}"
        DMLC_PS_ROOT_PORT=9000 BYTEPS_LOG_LEVEL=WARNING)
pids=()
on_host "$workers" env "${common[@]}" DMLC_ROLE=scheduler timeout "$timeout_s" \
  "$build/tools/byteps-server" >"$out/scheduler.log" 2>&1 & pids+=($!)
for ((i = 0; i < workers; i++)); do
  on_host $((workers + i)) env "${common[@]}" DMLC_ROLE=server DMLC_NODE_HOST="${addr[workers + i]}" \
    timeout "$timeout_s" "$build/tools/byteps-server" >"$out/server$i.log" 2>&1 & pids+=($!)
done
workers_pids=()
for ((i = 0; i < workers; i++)); do
  on_host "$i" env "${common[@]}" DMLC_ROLE=worker DMLC_WORKER_ID=$i DMLC_NODE_HOST="${addr[i]}" \
    timeout "$timeout_s" "$build/benchmarks/bps-rows-bench" "${bench_args[@]}" \
    >"$out/byteps-worker$i.txt" 2>&1 & workers_pids+=($!)
done
rc=0
for p in "${workers_pids[@]}"; do wait "$p" || rc=$?; done
for p in "${pids[@]}"; do wait "$p" || true; done
cat "$out/byteps-worker0.txt"
((rc == 0)) || { echo "$prog: a byteps worker failed (exit $rc); see $out" >&2; exit 1; }

if [[ -x $build/benchmarks/gloo-rows-allgather ]]; then
  store=$(mktemp -d "$EMU_DIR/gloo.XXXXXX")
  gloo_pids=()
  for ((i = 0; i < workers; i++)); do
    on_host "$i" timeout "$timeout_s" "$build/benchmarks/gloo-rows-allgather" --rank $i \
      --size "$workers" --store "$store" --host "${addr[i]}" "${bench_args[@]}" \
      >"$out/gloo-rank$i.txt" 2>&1 & gloo_pids+=($!)
  done
  for p in "${gloo_pids[@]}"; do wait "$p" || rc=$?; done
  cat "$out/gloo-rank0.txt"
  ((rc == 0)) || { echo "$prog: a Gloo rank failed (exit $rc); see $out" >&2; exit 1; }
else
  echo "$prog: no gloo-rows-allgather in $build (libgloo-dev): Gloo not run" >&2
fi
