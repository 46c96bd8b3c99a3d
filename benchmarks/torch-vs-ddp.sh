#!/usr/bin/env bash
# byteps's libtorch plugin (examples/train_torch) against what a PyTorch user runs instead,
# DistributedDataParallel over gloo (benchmarks/torch_ddp.py, python3-torch), on loopback: 2
# workers each, byteps with 2 summation servers on the same machine. The same model, data,
# per-worker batch and optimizer (SGD, momentum 0.9), one libtorch thread per worker; the two
# alternate, ROUNDS times per model, so that a change in the machine's load hits both.
#
#   benchmarks/torch-vs-ddp.sh [BUILD_DIR]        (default build; needs train_torch built)
#   MODELS="cnn transformer" ROUNDS=2 EPOCHS=3 STEPS=6 CNN_BATCH=64 LM_BATCH=8 LM_CONTEXT=64
#
# Prints, per model and system: samples/s (global samples over the wall time of the epochs
# after the first, the warm-up, averaged over rounds), the step time that makes, the ratio
# byteps/DDP, and each run's final loss (the same model, data and seed: they should be close).
# Compile nothing meanwhile: it refuses to start while a compiler runs (FORCE=1 overrides).
set -euo pipefail
build=${1:-build}
launch=$build/tools/byteps-launch train=$build/examples/train_torch
here=$(cd "$(dirname "$0")" && pwd)
models=${MODELS:-cnn transformer} rounds=${ROUNDS:-2} epochs=${EPOCHS:-3} steps=${STEPS:-6}
for f in "$launch" "$train"; do
  [[ -x $f ]] || { echo "torch-vs-ddp: $f is not built" >&2; exit 2; }
done
/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' ||
  { echo "torch-vs-ddp: /usr/bin/python3 has no torch with gloo (python3-torch)" >&2; exit 2; }
if [[ -z ${FORCE:-} ]] && (( $(pgrep -c cc1plus || true) > 0 )); then
  echo "torch-vs-ddp: a compiler is running: measure on a quiet machine (FORCE=1 to go on)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

args_of() {  # args_of MODEL: the arguments both trainers get
  if [[ $1 == cnn ]]; then
    echo "--model cnn --epochs $epochs --steps $steps --batch ${CNN_BATCH:-64}"
  else
    echo "--model transformer --epochs $epochs --steps $steps --batch ${LM_BATCH:-8} --context ${LM_CONTEXT:-64}"
  fi
}
# summarize LOG: "samples/s final-loss" from rank 0's epoch lines, epochs after the first.
summarize() {
  sed -n 's/^\(\[worker 0\] \)\{0,1\}epoch \([0-9]*\)\/[0-9]* loss \([0-9.]*\) | \([0-9.]*\) samples\/s.*/\2 \3 \4/p' "$1" |
    awk '$1 > 1 { inv += 1 / $3; n++ } { loss = $2 } END { if (n == 0) exit 1; printf "%.2f %s\n", n / inv, loss }'
}
run_byteps() {
  BYTEPS_LOG_LEVEL=WARNING "$launch" --workers 2 --servers 2 --timeout 600 -- "$train" $(args_of "$1") >"$2" 2>&1
}
run_ddp() {
  local port=$((20000 + RANDOM % 20000)) pids=() r
  for r in 0 1; do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 OMP_NUM_THREADS=1 \
      /usr/bin/python3 "$here/torch_ddp.py" $(args_of "$1") >"$2.$r" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r"; done
  cp "$2.0" "$2"
}

printf '%-12s %-7s %12s %10s %12s  %s\n' model system samples/s step_ms final_loss "runs (samples/s)"
for model in $models; do
  declare -A sps=() loss=() runs=()
  for ((i = 1; i <= rounds; i++)); do
    order=(byteps ddp)
    ((i % 2 == 0)) && order=(ddp byteps)
    for sys in "${order[@]}"; do
      log=$work/$model.$sys.$i.log
      "run_$sys" "$model" "$log" || { echo "torch-vs-ddp: $sys $model round $i failed:" >&2; tail -20 "$log" >&2; exit 1; }
      read -r s l < <(summarize "$log")
      runs[$sys]+=" $s"
      loss[$sys]+=" $l"
    done
  done
  for sys in byteps ddp; do
    sps[$sys]=$(echo "${runs[$sys]}" | awk '{ for (i = 1; i <= NF; i++) inv += 1 / $i; printf "%.2f", NF / inv }')
  done
  batch=$([[ $model == cnn ]] && echo "${CNN_BATCH:-64}" || echo "${LM_BATCH:-8}")
  for sys in byteps ddp; do
    printf '%-12s %-7s %12s %10.1f %12s  %s\n' "$model" "$sys" "${sps[$sys]}" \
      "$(awk -v s="${sps[$sys]}" -v b="$batch" 'BEGIN { print 1000 * b / s }')" \
      "$(echo "${loss[$sys]}" | awk '{ print $NF }')" "${runs[$sys]# }"
  done
  awk -v a="${sps[byteps]}" -v b="${sps[ddp]}" -v m="$model" \
    'BEGIN { printf "%-12s byteps/DDP samples/s ratio: %.2f\n", m, a / b }'
  unset sps loss runs
done
