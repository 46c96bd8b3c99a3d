#!/usr/bin/env bash
# The main job (examples/train_mlp, 2 workers x 2 servers, in real processes started by
# byteps-launch) with its gradients compressed by each RECIPE given: byteps-server decodes, sums
# and re-encodes with no setting of its own. Each run must exit 0 and rank 0 must print a loss
# for every epoch and the three checks of a compressed run: the loss fell, every worker holds
# rank 0's parameters bit for bit, and the final loss ends at most train_mlp's stated tolerance
# (loss_tolerance) above the uncompressed single-process run's. BYTEPS_MIN_COMPRESS_BYTES=0, since the small model's
# tensors are all under the default threshold.
#   compressed_main_job.sh BYTEPS_LAUNCH TRAIN_MLP RECIPE [RECIPE...] -- [TRAIN_MLP ARGS...]
set -uo pipefail

usage="usage: compressed_main_job.sh BYTEPS_LAUNCH TRAIN_MLP RECIPE [RECIPE...] -- [ARGS...]"
launch=${1:?$usage}
train=${2:?$usage}
shift 2
recipes=()
while (($# > 0)) && [[ $1 != -- ]]; do recipes+=("$1"); shift; done
(($# > 0)) && shift
((${#recipes[@]} > 0)) || { echo "$usage" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export BYTEPS_LOG_LEVEL=WARNING BYTEPS_MIN_COMPRESS_BYTES=0
unset BYTEPS_COMPRESSOR

for recipe in "${recipes[@]}"; do
  log="$work/run.log"
  if ! "$launch" --workers 2 --servers 2 --timeout 240 -- "$train" "$@" --compressor "$recipe" >"$log" 2>&1; then
    echo "FAIL: train_mlp --compressor $recipe exited non-zero"; tail -30 "$log"; exit 1
  fi
  epochs=$(grep -c "epoch [0-9]*/[0-9]* loss" "$log")
  want=$(grep -o "epoch 1/[0-9]*" "$log" | head -1 | cut -d/ -f2)
  for line in "gradients compressed with" "OK loss fell" "OK parameters equal rank 0's bit for bit" \
              "OK final loss .* from the uncompressed run's"; do
    grep -q "$line" "$log" || { echo "FAIL: $recipe: no line '$line'"; tail -30 "$log"; exit 1; }
  done
  [[ -n $want && $epochs == "$want" ]] || { echo "FAIL: $recipe: $epochs epoch lines, expected $want"; exit 1; }
  # With BYTEPS_MIN_COMPRESS_BYTES=0 every gradient tensor must go through the compressor: a run
  # that compressed nothing would pass the loss checks above just as well.
  counts=$(grep -o "gradients compressed with .*: [0-9]* of [0-9]* tensors" "$log" | head -1 |
    sed -E 's/.*: ([0-9]+) of ([0-9]+) tensors/\1 \2/')
  read -r compressed tensors <<<"$counts"
  [[ -n ${tensors:-} && $tensors -gt 0 && $compressed == "$tensors" ]] ||
    { echo "FAIL: $recipe: compressed ${compressed:-?} of ${tensors:-?} gradient tensors, expected all"; exit 1; }
  echo "$recipe: $(grep -o "loss fell from .*" "$log" | head -1); $(grep -o "final loss .*" "$log" | head -1)"
done
echo "PASS"
