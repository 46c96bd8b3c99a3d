#!/usr/bin/env bash
# Elastic training on the main job (examples/train_mlp --model small, 3 worker machines of
# LOCAL_SIZE processes x 2 servers), in real processes started by byteps-launch:
#   1. BYTEPS_MIN_NUM_WORKER=2: the last process (of machine 2) ends itself with SIGKILL at the
#      start of step DIE_AT (train_mlp --die-at-step). The job must exit 0 with 2 machines, the
#      scheduler must say it removed machine 2 (with its other local ranks), and train_mlp's
#      checks must pass on every process left: the loss fell, they agree bit for bit, they saw
#      the removal at the same step, and they equal the single-process replay that drops machine
#      2 from that step on.
#   2. BYTEPS_MIN_NUM_WORKER=3: the same death fails the job, naming the worker and the minimum.
#   elastic_main_job.sh BYTEPS_LAUNCH TRAIN_MLP [EPOCHS [DIE_AT [BATCH [LOCAL_SIZE]]]]
set -uo pipefail

usage="usage: elastic_main_job.sh BYTEPS_LAUNCH TRAIN_MLP [EPOCHS [DIE_AT [BATCH [LOCAL_SIZE]]]]"
launch=${1:?$usage}
train=${2:?$usage}
epochs=${3:-6}
die_at=${4:-20}
batch=${5:-384}
local_size=${6:-1}
train_args=(--model small --epochs "$epochs" --batch "$batch" --die-at-step "$die_at")

# shellcheck source=SCRIPTDIR/failover_lib.sh
source "$(dirname "$0")/failover_lib.sh"

export BYTEPS_LOG_LEVEL=INFO
unset BYTEPS_FAILOVER_TIMEOUT_MS BYTEPS_SERVER_STANDBY BYTEPS_MAX_NUM_WORKER

# 1. Two of three may go on.
BYTEPS_MIN_NUM_WORKER=2 "$launch" --workers 3 --local-size "$local_size" --servers 2 --timeout 240 -- "$train" "${train_args[@]}" \
  >"$work/survived.log" 2>&1
rc=$?
((rc == 0)) || fail "the elastic job that lost worker 2 exited $rc"
grep -q "ending itself with SIGKILL at step $die_at" "$work/survived.log" ||
  fail "worker 2 did not end itself at step $die_at"
grep -q "\[scheduler\].*worker 2 .*removed from the job; 2 worker machines go on" "$work/survived.log" ||
  fail "the scheduler did not report removing worker 2"
survivors=()
for m in 0 1; do
  if ((local_size == 1)); then survivors+=("$m"); else
    for ((l = 0; l < local_size; l++)); do survivors+=("$m.$l"); done
  fi
done
for w in "${survivors[@]}"; do
  for check in "OK loss fell" "OK parameters equal rank 0's bit for bit" \
    "OK parameters equal the elastic reference bit for bit" \
    "OK every worker saw the removal at the same step"; do
    grep -q "\[worker $w\] $check" "$work/survived.log" || fail "worker $w did not report: $check"
  done
done
grep -q "FAILED" "$work/survived.log" && fail "a check failed"
took=$(grep -o "step $die_at, the first without machine 2, took [0-9]* ms" "$work/survived.log")
[[ -n $took ]] || fail "rank 0 did not report the step worker 2 died in"

# 2. All three must stay: the death fails the job, naming why.
BYTEPS_MIN_NUM_WORKER=3 "$launch" --workers 3 --local-size "$local_size" --servers 2 --timeout 240 -- "$train" "${train_args[@]}" \
  >"$work/failed.log" 2>&1
rc=$?
((rc != 0)) || fail "the job below BYTEPS_MIN_NUM_WORKER exited 0"
grep -q "\[scheduler\].*worker 2 .*2 worker machines remain, fewer than BYTEPS_MIN_NUM_WORKER=3" \
  "$work/failed.log" || fail "the scheduler did not name the lost worker and the minimum"
grep -Eq "\[worker 0(\.0)?\].*fewer than BYTEPS_MIN_NUM_WORKER=3" "$work/failed.log" ||
  fail "worker 0 did not fail naming the minimum"

echo "ok: machine 2 of 3 ($local_size process(es) each) lost at step $die_at; with" \
  "BYTEPS_MIN_NUM_WORKER=2 the 2 left trained on, agreed bit for bit and equalled the replay" \
  "without it ($took); with 3 the job failed naming why"
