#!/usr/bin/env bash
# run-emulated.sh: byteps against Gloo's ring all-reduce and MPI_Allreduce, over the SAME hosts,
# sizes, dtype and link rate, and one table of the results.
#
# Emulated mode (default; needs root): benchmarks/emulate.sh makes N+K hosts (network
# namespaces, tbf-shaped links); then, one after the other:
#   byteps-ps         N workers on hosts 0..N-1, K separate servers on hosts N..N+K-1
#                     (the scheduler shares host N); bound max(M/B, N*M/(K*B))
#   byteps-colocated  N machines (hosts 0..N-1), each a worker plus a server; bound 2(N-1)/N*M/B
#   gloo-ring         Gloo ring all-reduce over hosts 0..N-1; bound 2(N-1)/N*M/B
#   mpi-ring          MPI_Allreduce (Open MPI, TCP, ring algorithm) over hosts 0..N-1
# Loopback mode: N workers + K servers on this machine (byteps-launch) against Gloo and MPI with
# N ranks over TCP on 127.0.0.1. No link rate, so no bound. Each runs where its own launcher puts
# it: byteps-launch each worker on CPUs of its own (--worker-cpus split), mpirun its ranks by its
# default binding (a core each for 2 ranks), and Gloo, which has no launcher, anywhere (bound to a
# core each, a rank's waiting thread and its transport's thread take turns on it and 4 KiB took
# 4 ms: docs/performance.md).
# With --model NAME, each system runs a real network's gradient mix instead of the sweep
# (bps-bench --model, gloo-allreduce --model: Gloo per tensor and fused; MPI has no mix), and
# the table gives byteps' speed-up over Gloo's better variant.
#
# Output: OUT/<system>.txt (each program's table), OUT/logs/, OUT/summary.txt (the table below,
# also printed), and OUT/busbw.png when gnuplot is there (benchmarks/plot.sh).
set -euo pipefail

prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$prog"

usage() {
  cat <<EOF
Usage: $prog [OPTIONS]

Options:
  --mode M          emulated (default; needs root) or loopback
  --workers N       worker machines / ranks (default 4; loopback: 2)
  --servers K       separate servers for the ps topology (default: N)
  --rate R          emulated link rate, tc units (default 1gbit)
  --topologies L    byteps placements, comma separated: ps,colocated (default both; loopback: ps)
  --peers L         comma separated: gloo,mpi (default both; with --model: gloo; empty: none)
  --model NAME      instead of the sweep, one backward pass's gradients of NAME (resnet50 or
                    vgg16) per iteration; the size and dtype options do not apply
  --min-bytes S     smallest size (default 4K)
  --max-bytes S     largest size (default 256M)
  --step-factor F   multiply the size by F each step (default 2)
  --dtype T         one dtype for every system (default float32; Gloo and MPI lack bfloat16,
                    MPI lacks float16)
  --iters N         timed iterations per size (default 20)
  --warmup N        untimed iterations per size (default 5)
  --check 0|1       check every result against the exact sum (default 1)
  --build DIR       build tree with benchmarks/ and tools/ (default: the one this script is in,
                    else ./build)
  --out DIR         results directory (default BUILD/bench-results/<mode>-<date>)
  --verify S        emulated: iperf3 check of the shaping for S seconds first (default 5; 0: off)
  --verify-load S   emulated: then every link loaded at once for S seconds (default 0: off)
  --cc NAME         emulated: TCP congestion control inside the hosts (default reno)
  --emulate-args A  extra arguments for emulate.sh, e.g. '--burst 131072 --limit 32M'
  --timeout S       give up on one system's sweep after S seconds (default 3600)
  --repeat N        run every system N times, in turn (byteps, Gloo, MPI, byteps, ...), each
                    run's tables in OUT/runK/, then one table of the medians (a sweep only;
                    default 1)
  --bench-args A    extra arguments for bps-bench (byteps systems only), e.g.
                    '--compressor ef_onebit:scaling=1' (its table then follows the sweep's in
                    OUT/byteps-*.txt)
  --help            print this help

Environment: BYTEPS_* variables (e.g. BYTEPS_PARTITION_BYTES) reach every byteps process.

Examples:
  sudo $prog --workers 4 --rate 1gbit --max-bytes 256M          # the issue-4 measurement
  sudo $prog --workers 2 --servers 2 --rate 200mbit --max-bytes 4M --iters 3 --warmup 1
  $prog --mode loopback --max-bytes 64M
  $prog --mode loopback --model resnet50 --iters 10 --warmup 3
EOF
}

die() {
  echo "$prog: error: $*" >&2
  exit 2
}

mode=emulated
workers=
servers=
rate=1gbit
topologies=
peers=
peers_given=0
model=
min_bytes=4K
max_bytes=256M
step=2
dtype=float32
iters=20
warmup=5
check=1
build=
out=
verify=5
verify_load=0
cc=reno
emulate_args=
bench_args=
timeout_s=3600
repeat=1
inside=0
orig_args=("$@")
while (($# > 0)); do
  case $1 in
    --mode) mode=${2:?}; shift 2 ;;
    --workers) workers=${2:?}; shift 2 ;;
    --servers) servers=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --topologies) topologies=${2:?}; shift 2 ;;
    --peers) peers=${2-}; peers_given=1; shift 2 ;;
    --model) model=${2:?}; shift 2 ;;
    --min-bytes) min_bytes=${2:?}; shift 2 ;;
    --max-bytes) max_bytes=${2:?}; shift 2 ;;
    --step-factor) step=${2:?}; shift 2 ;;
    --dtype) dtype=${2:?}; shift 2 ;;
    --iters) iters=${2:?}; shift 2 ;;
    --warmup) warmup=${2:?}; shift 2 ;;
    --check) check=${2:?}; shift 2 ;;
    --build) build=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --verify) verify=${2:?}; shift 2 ;;
    --verify-load) verify_load=${2:?}; shift 2 ;;
    --cc) cc=${2:?}; shift 2 ;;
    --emulate-args) emulate_args=${2-}; shift 2 ;;
    --timeout) timeout_s=${2:?}; shift 2 ;;
    --repeat) repeat=${2:?}; shift 2 ;;
    --bench-args) bench_args=${2-}; shift 2 ;;
    --inside) inside=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
case $mode in emulated | loopback) ;; *) die "--mode must be emulated or loopback" ;; esac
[[ -n $workers ]] || workers=$([[ $mode == loopback ]] && echo 2 || echo 4)
[[ -n $servers ]] || servers=$workers
[[ -n $topologies ]] || topologies=$([[ $mode == loopback ]] && echo ps || echo ps,colocated)
if ! [[ $workers =~ ^[0-9]+$ ]] || ((workers < 1)); then die "--workers must be >= 1"; fi
if ! [[ $servers =~ ^[0-9]+$ ]] || ((servers < 1)); then die "--servers must be >= 1"; fi
for t in ${topologies//,/ }; do
  case $t in ps | colocated) ;; *) die "--topologies: unknown '$t' (ps, colocated)" ;; esac
done
case $model in '' | resnet50 | vgg16) ;; *) die "--model: unknown '$model' (resnet50, vgg16)" ;; esac
if ((!peers_given)); then peers=$([[ -n $model ]] && echo gloo || echo gloo,mpi); fi
for p in ${peers//,/ }; do
  case $p in gloo | mpi) ;; *) die "--peers: unknown '$p' (gloo, mpi)" ;; esac
done
has() { [[ ",$1," == *",$2,"* ]]; }
if [[ -n $model ]] && has "$peers" mpi; then die "--model: mpi-allreduce has no model mix (use --peers gloo)"; fi
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "--repeat '$repeat': expected a count of runs, 1 or more"
if [[ -n $model ]] && ((repeat > 1)); then die "--repeat: for a sweep only, not with --model"; fi

if [[ -z $build ]]; then
  if [[ -x $here/bps-bench ]]; then build=$(cd "$here/.." && pwd); else build=$(pwd)/build; fi
fi
build=$(cd "$build" 2>/dev/null && pwd) || die "--build: no such directory"
bench_bin=$build/benchmarks/bps-bench
server_bin=$build/tools/byteps-server
launch_bin=$build/tools/byteps-launch
gloo_bin=$build/benchmarks/gloo-allreduce
mpi_bin=$build/benchmarks/mpi-allreduce
[[ -x $bench_bin && -x $server_bin ]] ||
  die "$bench_bin or $server_bin is missing: build with -DBYTEPS_BUILD_BENCHMARKS=ON (see docs/performance.md)"
if has "$peers" gloo; then [[ -x $gloo_bin ]] || die "$gloo_bin is missing (libgloo-dev?)"; fi
if has "$peers" mpi; then
  [[ -x $mpi_bin ]] || die "$mpi_bin is missing (libopenmpi-dev?)"
  command -v mpirun >/dev/null || die "mpirun is missing (openmpi-bin)"
fi

sweep_args=(--min-bytes "$min_bytes" --max-bytes "$max_bytes" --step-factor "$step" --dtype "$dtype" --iters "$iters"
  --warmup "$warmup" --check "$check")
# A mix has the model's sizes and float32; --topology and --link-gbps, still passed, only
# shape the sweep's time/bound column.
[[ -n $model ]] && sweep_args=(--model "$model" --iters "$iters" --warmup "$warmup" --check "$check")

# ------------------------------------------------------------------ outside: set up, recurse
if [[ $mode == emulated && $inside == 0 ]]; then
  ((EUID == 0)) || die "emulated mode needs root (network namespaces); or use --mode loopback"
  [[ -n $out ]] || out=$build/bench-results/emulated-$(date +%Y%m%d-%H%M%S)
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  hosts=$workers
  has "$topologies" ps && hosts=$((workers + servers))
  emu=("$here/emulate.sh")
  [[ -x ${emu[0]} ]] || emu=("$(cd "$here/../.." 2>/dev/null && pwd)/benchmarks/emulate.sh")
  verify_args=()
  ((verify > 0)) && verify_args+=(--verify "$verify")
  ((verify_load > 0)) && verify_args+=(--verify-load "$verify_load")
  # shellcheck disable=SC2086 # emulate_args is a word list on purpose
  exec "${emu[@]}" --hosts "$hosts" --rate "$rate" --cc "$cc" "${verify_args[@]}" $emulate_args \
    -- "$self" "${orig_args[@]}" --build "$build" --out "$out" --inside
fi

[[ -n $out ]] || out=$build/bench-results/$mode-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)

pids=()  # what this script started and has not reaped
# shellcheck disable=SC2317
stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

# The per-host commands, emulated or not: host index -> how to run a command there.
if [[ $mode == emulated ]]; then
  read -r -a host_ns <<<"${EMU_NS:?run through emulate.sh}"
  read -r -a host_addr <<<"${EMU_ADDRS:?}"
  link_gbps=$EMU_RATE_GBPS
  on_host() { local h=$1; shift; ip netns exec "${host_ns[h]}" "$@"; }
else
  host_addr=()
  for ((i = 0; i < workers + servers; i++)); do host_addr+=(127.0.0.1); done
  link_gbps=
  on_host() { shift; "$@"; }
fi
bound_args=()
[[ -n $link_gbps ]] && bound_args=(--link-gbps "$link_gbps")

log() { echo "$prog: $*" >&2; }

# run_byteps NAME TOPOLOGY: scheduler, servers and workers placed per topology.
run_byteps() {
  local name=$1 topo=$2 port=9000 i rc=0 sched_host first_server_host
  local -a server_host=() worker_pids=() all=()
  if [[ $topo == ps ]]; then
    for ((i = 0; i < servers; i++)); do server_host+=($((workers + i))); done
  else
    for ((i = 0; i < workers; i++)); do server_host+=("$i"); done
  fi
  first_server_host=${server_host[0]}
  sched_host=$first_server_host
  local k=${#server_host[@]}
  local -a common_env=(DMLC_NUM_WORKER="$workers" DMLC_NUM_SERVER="$k"
    DMLC_PS_ROOT_URI="${host_addr[sched_host]}" DMLC_PS_ROOT_PORT="$port"
    BYTEPS_LOG_LEVEL="${BYTEPS_LOG_LEVEL:-WARNING}")
  log "$name: $workers workers, $k servers ($topo), scheduler on host $sched_host"
  on_host "$sched_host" env "${common_env[@]}" DMLC_ROLE=scheduler \
    timeout "$timeout_s" "$server_bin" >"$out/logs/$name-scheduler.log" 2>&1 &
  pids+=($!) all+=($!)
  for ((i = 0; i < k; i++)); do
    on_host "${server_host[i]}" env "${common_env[@]}" DMLC_ROLE=server \
      DMLC_NODE_HOST="${host_addr[server_host[i]]}" \
      timeout "$timeout_s" "$server_bin" >"$out/logs/$name-server$i.log" 2>&1 &
    pids+=($!) all+=($!)
  done
  for ((i = 0; i < workers; i++)); do
    local stdout=$out/logs/$name-worker$i.out
    ((i == 0)) && stdout=$out/$name.txt
    on_host "$i" env "${common_env[@]}" DMLC_ROLE=worker DMLC_WORKER_ID=$i \
      DMLC_NODE_HOST="${host_addr[i]}" \
      timeout "$timeout_s" "$bench_bin" "${sweep_args[@]}" --topology "$topo" \
      "${bound_args[@]}" --label "$topo ${workers}w+${k}s" $bench_args \
      >"$stdout" 2>"$out/logs/$name-worker$i.log" &
    pids+=($!) all+=($!) worker_pids+=($!)
  done
  for p in "${worker_pids[@]}"; do
    local r=0
    wait "$p" || r=$?
    ((r == 0)) || rc=$r
  done
  if ((rc != 0)); then
    log "$name: a worker failed (exit $rc); see $out/logs/$name-*.log"
    for p in "${all[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  fi
  # The scheduler and servers exit once every worker said bye (bounded by their timeout).
  for p in "${all[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  return "$rc"
}

run_byteps_loopback() {
  local name=$1 rc=0
  log "$name: byteps-launch, $workers workers + $servers servers on 127.0.0.1"
  # byteps-launch prefixes each line with its process; worker 0's stdout lines are the table.
  BYTEPS_LOG_LEVEL="${BYTEPS_LOG_LEVEL:-WARNING}" "$launch_bin" --workers "$workers" \
    --servers "$servers" --server-bin "$server_bin" --timeout "$timeout_s" -- \
    "$bench_bin" "${sweep_args[@]}" --topology ps --label "loopback ${workers}w+${servers}s" $bench_args \
    >"$out/logs/$name.launch.log" 2>&1 || rc=$?
  # Table rows and '#' comments of worker 0 (its stderr lines are progress, not table): a
  # sweep's rows start with the size, a mix's with the system.
  sed -n 's/^\[worker 0\] //p' "$out/logs/$name.launch.log" |
    grep -E '^(#|[[:space:]]*[0-9]|byteps +[0-9])' >"$out/$name.txt" || true
  ((rc == 0)) || log "$name: byteps-launch exited $rc; see $out/logs/$name.launch.log"
  return "$rc"
}

run_gloo() {
  local name=gloo-ring i rc=0 store
  local -a ps=()
  store=$(mktemp -d "${EMU_DIR:-${TMPDIR:-/tmp}}/gloo-store.XXXXXX")
  log "$name: $workers ranks"
  for ((i = 0; i < workers; i++)); do
    local stdout=$out/logs/$name-rank$i.out
    ((i == 0)) && stdout=$out/$name.txt
    on_host "$i" timeout "$timeout_s" "$gloo_bin" --rank $i --size "$workers" --store "$store" \
      --host "${host_addr[i]}" "${sweep_args[@]}" --topology ring "${bound_args[@]}" \
      --label ring >"$stdout" 2>"$out/logs/$name-rank$i.log" &
    pids+=($!) ps+=($!)
  done
  for p in "${ps[@]}"; do
    local r=0
    wait "$p" || r=$?
    ((r == 0)) || rc=$r
  done
  pids=()
  rm -rf -- "$store"
  ((rc == 0)) || log "$name: a rank failed (exit $rc); see $out/logs/$name-*.log"
  return "$rc"
}

# Open MPI settings for both modes (../shared/EMULATION.md): TCP only, ob1, yield when idle on
# 2 cores, ring all-reduce. Emulated, no binding (every namespace looks like its own node to Open
# MPI, so its default binding would put every rank on core 0); on loopback its default binding.
# shellcheck disable=SC2054 # "self,tcp" is one argument
mpi_common=(--allow-run-as-root --mca pml ob1 --mca btl self,tcp
  --mca mpi_yield_when_idle 1 --mca coll_tuned_use_dynamic_rules 1
  --mca coll_tuned_allreduce_algorithm 4)

run_mpi() {
  local name=mpi-ring rc=0
  local -a cmd
  if [[ $mode == emulated ]]; then
    # mpirun runs on host 0 and starts an orted on every other host through an "rsh agent" that
    # enters that host's namespace instead of ssh-ing to it: hosts are named by address, and
    # Open MPI's out-of-band and byte transfers both use the namespaces' subnet only.
    local agent=$out/logs/mpi-netns-agent.sh hostfile=$out/logs/mpi-hostfile subnet
    subnet="${host_addr[0]%.*}.0/24"
    # shellcheck disable=SC2016 # the agent's own variables, written literally
    {
      echo '#!/usr/bin/env bash'
      echo '# Open MPI rsh agent: "agent [options] HOST COMMAND..." runs COMMAND in HOST'"'"'s namespace.'
      echo 'while [[ ${1:-} == -* ]]; do shift; done'
      echo 'host=$1; shift'
      echo "declare -A ns=($(for ((i = 0; i < workers; i++)); do printf '[%s]=%s ' "${host_addr[i]}" "${host_ns[i]}"; done))"
      echo '[[ -n ${ns[$host]:-} ]] || { echo "mpi agent: unknown host $host" >&2; exit 1; }'
      echo 'exec ip netns exec "${ns[$host]}" /bin/sh -c "$*"'
    } >"$agent"
    chmod +x "$agent"
    : >"$hostfile"
    for ((i = 0; i < workers; i++)); do echo "${host_addr[i]} slots=1" >>"$hostfile"; done
    cmd=(on_host 0 timeout "$timeout_s" mpirun "${mpi_common[@]}" --bind-to none -np "$workers"
      --hostfile "$hostfile" --map-by node
      --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
      --mca oob_tcp_if_include "$subnet" --mca btl_tcp_if_include "$subnet"
      "$mpi_bin" "${sweep_args[@]}" --topology ring "${bound_args[@]}" --label ring)
  else
    cmd=(timeout "$timeout_s" mpirun "${mpi_common[@]}" -np "$workers"
      --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo
      "$mpi_bin" "${sweep_args[@]}" --topology ring --label "ring, loopback")
  fi
  log "$name: $workers ranks"
  "${cmd[@]}" >"$out/$name.txt" 2>"$out/logs/$name.log" || rc=$?
  ((rc == 0)) || log "$name: mpirun exited $rc; see $out/logs/$name.log"
  return "$rc"
}

# The tables, each from the systems' output in $out.
# shellcheck source=summary-tables.sh
source "$here/summary-tables.sh"

# Every system once, its output in $out; a failure is named with the prefix $1 ("run2 ").
run_systems() {
  local run_name=${1-}
  systems=()
  if [[ $mode == emulated ]]; then
    for t in ${topologies//,/ }; do
      run_byteps "byteps-$t" "$t" || failed+=("${run_name}byteps-$t")
      systems+=("byteps-$t")
    done
  else
    run_byteps_loopback byteps-ps || failed+=("${run_name}byteps-ps")
    systems+=(byteps-ps)
  fi
  if has "$peers" gloo; then run_gloo || failed+=("${run_name}gloo-ring"); systems+=(gloo-ring); fi
  if has "$peers" mpi; then run_mpi || failed+=("${run_name}mpi-ring"); systems+=(mpi-ring); fi
}

failed=()
if ((repeat > 1)); then
  top_out=$out
  for ((run = 1; run <= repeat; run++)); do
    out=$top_out/run$run
    mkdir -p "$out/logs"
    log "run $run of $repeat"
    run_systems "run$run "
    sweep_summary >"$out/summary.txt"
    cat "$out/summary.txt" >&2
  done
  out=$top_out
else
  run_systems
fi

# ------------------------------------------------------------------ the combined table

summary=$out/summary.txt
if [[ -n $model ]]; then
  mix_summary >"$summary"
elif ((repeat > 1)); then
  repeat_summary "$out"/run*/summary.txt >"$summary"
else
  sweep_summary >"$summary"
fi
cat "$summary"
if [[ -z $model ]] && command -v gnuplot >/dev/null && [[ -x $here/plot.sh ]]; then
  if "$here/plot.sh" "$summary" "$out/busbw.png" >/dev/null 2>&1; then
    log "plot: $out/busbw.png"
  else
    log "plot failed (benchmarks/plot.sh $summary)"
  fi
fi
log "results in $out"
if ((${#failed[@]} > 0)); then
  log "failed: ${failed[*]}"
  exit 1
fi
