#!/usr/bin/env bash
# byteps's libtorch plugin (examples/train_torch) against what a PyTorch user runs instead,
# DistributedDataParallel over gloo (benchmarks/torch_ddp.py, python3-torch). The same model,
# data, global batch and optimizer (SGD, momentum 0.9), one libtorch thread per worker; the two
# alternate, ROUNDS times per model, so that a change in the machine's load hits both.
#
# Loopback (default): N workers (default 2) on this machine, byteps with N summation servers
# beside them (byteps-launch, which puts each worker on CPUs of its own by default; DDP's ranks,
# started here as torch.distributed's own launcher would, run anywhere).
# Emulated (--emulated, needs root): benchmarks/emulate.sh makes 2N hosts (default N = 4) with
# tbf-shaped links (--rate, default 1gbit); byteps runs its workers on hosts 0..N-1 and its N
# servers on hosts N..2N-1 (the scheduler beside server 0), DDP runs its N ranks on hosts
# 0..N-1, the same hosts as byteps's workers.
#
#   benchmarks/torch-vs-ddp.sh [--emulated] [--workers N] [--rate R] [BUILD_DIR]
#   MODELS="cnn transformer" ROUNDS=2 EPOCHS=3 STEPS=6 CNN_BATCH=64 LM_BATCH=8 LM_CONTEXT=64
#   (the batches are global: each worker takes BATCH / N of them; BATCH must divide by N)
#   LOGS=DIR keeps every run's output there (rank 0's, and each process's beside it)
#
# Prints, per model and system: samples/s (global samples over the wall time of the epochs
# after the first, the warm-up, averaged over rounds), the step time that makes, the ratio
# byteps/DDP, and each run's final loss (the same model, data and seed: they should be close).
# Compile nothing meanwhile: it refuses to start while a compiler runs (FORCE=1 overrides).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prog=$(basename "$0")

usage() {
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
}

mode=loopback workers= rate=1gbit build=build inside=0
while (($#)); do
  case $1 in
    --emulated) mode=emulated ;;
    --workers) workers=${2:?--workers needs a number}; shift ;;
    --rate) rate=${2:?--rate needs a tc rate, e.g. 1gbit}; shift ;;
    --inside) inside=1 ;;  # run by emulate.sh as its driver, with EMU_* set
    --help | -h) usage; exit 0 ;;
    -*) echo "$prog: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
[[ -n $workers ]] || workers=$([[ $mode == emulated ]] && echo 4 || echo 2)
[[ $workers =~ ^[1-9][0-9]*$ ]] || { echo "$prog: --workers '$workers': expected a positive number" >&2; exit 2; }
build=$(cd "$build" && pwd)
launch=$build/tools/byteps-launch server=$build/tools/byteps-server train=$build/examples/train_torch
models=${MODELS:-cnn transformer} rounds=${ROUNDS:-2} epochs=${EPOCHS:-3} steps=${STEPS:-6}
cnn_batch=${CNN_BATCH:-64} lm_batch=${LM_BATCH:-8}
for f in "$launch" "$server" "$train"; do
  [[ -x $f ]] || { echo "$prog: $f is not built" >&2; exit 2; }
done
for b in "$cnn_batch" "$lm_batch"; do
  ((b % workers == 0)) || { echo "$prog: batch $b does not divide by $workers workers" >&2; exit 2; }
done

if [[ $mode == emulated && $inside == 0 ]]; then
  ((EUID == 0)) || { echo "$prog: --emulated needs root (network namespaces)" >&2; exit 2; }
  exec "$here/emulate.sh" --hosts $((2 * workers)) --rate "$rate" --verify 3 -- \
    "$here/$prog" --emulated --inside --workers "$workers" "$build"
fi

/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' ||
  { echo "$prog: /usr/bin/python3 has no torch with gloo (python3-torch)" >&2; exit 2; }
if [[ -z ${FORCE:-} ]] && (( $(pgrep -c cc1plus || true) > 0 )); then
  echo "$prog: a compiler is running: measure on a quiet machine (FORCE=1 to go on)" >&2
  exit 2
fi
work=$(mktemp -d "${EMU_DIR:-${TMPDIR:-/tmp}}/torch-vs-ddp.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Where host i is and how to run a command there.
if [[ $mode == emulated ]]; then
  read -r -a host_ns <<<"${EMU_NS:?run through emulate.sh}"
  read -r -a host_addr <<<"${EMU_ADDRS:?}"
  on_host() { local h=$1; shift; ip netns exec "${host_ns[h]}" "$@"; }
else
  on_host() { shift; "$@"; }
fi

args_of() {  # args_of MODEL: the arguments both trainers get
  if [[ $1 == cnn ]]; then
    echo "--model cnn --epochs $epochs --steps $steps --batch $cnn_batch"
  else
    echo "--model transformer --epochs $epochs --steps $steps --batch $lm_batch --context ${LM_CONTEXT:-64}"
  fi
}
# summarize LOG: "samples/s final-loss" from rank 0's epoch lines, epochs after the first.
summarize() {
  sed -n 's/^\(\[worker 0\] \)\{0,1\}epoch \([0-9]*\)\/[0-9]* loss \([0-9.]*\) | \([0-9.]*\) samples\/s.*/\2 \3 \4/p' "$1" |
    awk '$1 > 1 { inv += 1 / $3; n++ } { loss = $2 } END { if (n == 0) exit 1; printf "%.2f %s\n", n / inv, loss }'
}
run_byteps() {
  if [[ $mode == loopback ]]; then
    BYTEPS_LOG_LEVEL=WARNING "$launch" --workers "$workers" --servers "$workers" --timeout 600 -- \
      "$train" $(args_of "$1") >"$2" 2>&1
    return
  fi
  local port=9000 i rc=0 p
  local -a all=() ws=()
  local -a env=(DMLC_NUM_WORKER="$workers" DMLC_NUM_SERVER="$workers"
    DMLC_PS_ROOT_URI="${host_addr[workers]}" DMLC_PS_ROOT_PORT=$port BYTEPS_LOG_LEVEL=WARNING)
  on_host "$workers" env "${env[@]}" DMLC_ROLE=scheduler timeout 600 "$server" >"$2.scheduler" 2>&1 &
  all+=($!)
  for ((i = 0; i < workers; i++)); do
    on_host $((workers + i)) env "${env[@]}" DMLC_ROLE=server DMLC_NODE_HOST="${host_addr[workers + i]}" \
      timeout 600 "$server" >"$2.server$i" 2>&1 &
    all+=($!)
  done
  for ((i = 0; i < workers; i++)); do
    on_host "$i" env "${env[@]}" DMLC_ROLE=worker DMLC_WORKER_ID=$i DMLC_NODE_HOST="${host_addr[i]}" \
      timeout 600 "$train" $(args_of "$1") >"$2.$i" 2>&1 &
    all+=($!) ws+=($!)
  done
  for p in "${ws[@]}"; do wait "$p" || rc=$?; done
  ((rc == 0)) || for p in "${all[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${all[@]}"; do wait "$p" 2>/dev/null || true; done
  cat "$2.0" >"$2"
  ((rc == 0)) || cat "$2".server* "$2.scheduler" >>"$2"
  return "$rc"
}
run_ddp() {
  local port=$((20000 + RANDOM % 20000)) pids=() r master=127.0.0.1 rc=0
  [[ $mode == emulated ]] && master=${host_addr[0]}
  for ((r = 0; r < workers; r++)); do
    # GLOO_SOCKET_IFNAME: in a namespace the host name resolves to no interface the others reach.
    on_host "$r" env MASTER_ADDR="$master" MASTER_PORT=$port RANK=$r WORLD_SIZE="$workers" \
      OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME="$([[ $mode == emulated ]] && echo eth0 || echo lo)" \
      /usr/bin/python3 "$here/torch_ddp.py" $(args_of "$1") >"$2.$r" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  cp "$2.0" "$2"
  return "$rc"
}

echo "# $mode: $workers workers$([[ $mode == emulated ]] && echo " on hosts 0..$((workers - 1)), byteps's $workers servers on hosts $workers..$((2 * workers - 1)), links ${EMU_RATE:-$rate}" || echo ", byteps with $workers servers, all on 127.0.0.1")"
printf '%-12s %-7s %12s %10s %12s  %s\n' model system samples/s step_ms final_loss "runs (samples/s)"
for model in $models; do
  declare -A sps=() loss=() runs=()
  for ((i = 1; i <= rounds; i++)); do
    order=(byteps ddp)
    ((i % 2 == 0)) && order=(ddp byteps)
    for sys in "${order[@]}"; do
      log=$work/$model.$sys.$i.log
      "run_$sys" "$model" "$log" || { echo "$prog: $sys $model round $i failed:" >&2; tail -20 "$log" >&2; exit 1; }
      [[ -z ${LOGS:-} ]] || { mkdir -p "$LOGS" && cp "$log"* "$LOGS/"; }
      read -r s l < <(summarize "$log")
      runs[$sys]+=" $s"
      loss[$sys]+=" $l"
      echo "# $model $sys round $i: $s samples/s, final loss $l" >&2
    done
  done
  for sys in byteps ddp; do
    sps[$sys]=$(echo "${runs[$sys]}" | awk '{ for (i = 1; i <= NF; i++) inv += 1 / $i; printf "%.2f", NF / inv }')
  done
  batch=$([[ $model == cnn ]] && echo "$cnn_batch" || echo "$lm_batch")
  for sys in byteps ddp; do
    printf '%-12s %-7s %12s %10.1f %12s  %s\n' "$model" "$sys" "${sps[$sys]}" \
      "$(awk -v s="${sps[$sys]}" -v b="$batch" 'BEGIN { print 1000 * b / s }')" \
      "$(echo "${loss[$sys]}" | awk '{ print $NF }')" "${runs[$sys]# }"
  done
  awk -v a="${sps[byteps]}" -v b="${sps[ddp]}" -v m="$model" \
    'BEGIN { printf "%-12s byteps/DDP samples/s ratio: %.2f\n", m, a / b }'
  unset sps loss runs
done
