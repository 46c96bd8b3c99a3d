#!/usr/bin/env bash
# Elastic training: a worker joins a running job (examples/train_mlp --model small, 3 worker
# machines x 2 servers started by byteps-launch, BYTEPS_MIN_NUM_WORKER=2):
#   1. BYTEPS_MAX_NUM_WORKER=4: once rank 0 printed its first epoch, a 4th train_mlp starts
#      with the same options. It must join at a step boundary the scheduler names, and every
#      worker, the newcomer too, must pass train_mlp's checks: the loss fell, the parameters
#      equal rank 0's bit for bit right after the step it joined at and at the end, and they
#      equal the single-process replay that adds machine 3 at that step. Prints how long the
#      join took, from the newcomer's hello to the scheduler's "joined".
#   2. BYTEPS_MAX_NUM_WORKER=3: the same 4th worker is refused, naming the maximum, and the
#      job of 3 finishes as if it never came.
#   With LOCAL_SIZE > 1 every machine runs that many processes, the 4th machine too (it joins
#   whole, DMLC_WORKER_ID=3), and part 2 is left out.
#   elastic_join.sh BYTEPS_LAUNCH TRAIN_MLP [EPOCHS [LOCAL_SIZE]]
set -uo pipefail

usage="usage: elastic_join.sh BYTEPS_LAUNCH TRAIN_MLP [EPOCHS [LOCAL_SIZE]]"
launch=${1:?$usage}
train=${2:?$usage}
epochs=${3:-30}
local_size=${4:-1}
train_args=(--model small --epochs "$epochs" --batch 384)

# shellcheck source=SCRIPTDIR/failover_lib.sh
source "$(dirname "$0")/failover_lib.sh"

export BYTEPS_LOG_LEVEL=INFO BYTEPS_MIN_NUM_WORKER=2
unset BYTEPS_FAILOVER_TIMEOUT_MS BYTEPS_SERVER_STANDBY BYTEPS_ENABLE_ASYNC DMLC_WORKER_ID

# Starts the job of 3 in the background and, once rank 0 finished epoch 1, a 4th machine's
# processes (their output in $work/$1-joiner.L.log, by local rank); sets joiner_rc (the worst
# of theirs) and job_rc.
run_with_a_late_worker() {
  local tag=$1 log="$work/$1.log"
  "$launch" --workers 3 --local-size "$local_size" --servers 2 --timeout 240 -- "$train" \
    "${train_args[@]}" >"$log" 2>&1 &
  launcher=$!
  local waited=0
  until grep -Eq "\[worker 0(\.0)?\] epoch 1/" "$log"; do
    kill -0 "$launcher" 2>/dev/null || fail "$tag: the job ended before its first epoch"
    ((waited++ < 2400)) || fail "$tag: rank 0 printed no first epoch within 120 s"
    sleep 0.05
  done
  local port
  port=$(grep -o "\[scheduler\].*listening on 127.0.0.1:[0-9]*" "$log" | head -1 | sed 's/.*://')
  [[ -n $port ]] || fail "$tag: the scheduler's port is not in the log"
  local pids=() l rc
  for ((l = 0; l < local_size; l++)); do
    if ((local_size == 1)); then
      DMLC_ROLE=worker DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_WORKER=3 \
        DMLC_NUM_SERVER=2 timeout 240 "$train" "${train_args[@]}" >"$work/$tag-joiner.$l.log" 2>&1 &
    else
      DMLC_ROLE=worker DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_WORKER=3 \
        DMLC_NUM_SERVER=2 DMLC_WORKER_ID=3 BYTEPS_LOCAL_RANK=$l BYTEPS_LOCAL_SIZE=$local_size \
        timeout 240 "$train" "${train_args[@]}" >"$work/$tag-joiner.$l.log" 2>&1 &
    fi
    pids+=($!)
  done
  joiner_rc=0
  for l in "${pids[@]}"; do
    wait "$l"
    rc=$?
    ((rc > joiner_rc)) && joiner_rc=$rc
  done
  wait "$launcher"
  job_rc=$?
  launcher=
}

# 1. Room for a 4th machine: it joins.
export BYTEPS_MAX_NUM_WORKER=4
run_with_a_late_worker joined
# The launcher's 124 first: stopping the cluster at its deadline fails the newcomer too.
((job_rc != 124)) || fail "the job passed byteps-launch's --timeout 240 (its log says what still ran)"
((joiner_rc == 0)) || fail "the worker that joined exited $joiner_rc"
((job_rc == 0)) || fail "the job the 4th worker joined exited $job_rc"
log="$work/joined.log" joiner="$work/joined-joiner.0.log"
members=()
for m in 0 1 2; do
  if ((local_size == 1)); then members+=("$m"); else
    for ((l = 0; l < local_size; l++)); do members+=("$m.$l"); done
  fi
done
line=$(grep -o "\[scheduler\].*worker machine 3 at .* joined the job at step boundary [0-9]*" "$log") ||
  fail "the scheduler did not report worker machine 3 joining"
boundary=${line##* }
step=$(grep -o "joined the running job at step [0-9][0-9]*" "$joiner" | awk '{print $NF}')
[[ -n $step ]] || fail "the 4th worker did not report the step it joined at"
((step == boundary - 1)) ||
  fail "the 4th worker trained first at step $step, not at the one after boundary $boundary"
for w in "${members[@]}"; do
  grep -q "\[worker $w\].*worker 3 joined the job at step boundary $boundary" "$log" ||
    fail "worker $w did not see worker 3 join at step boundary $boundary"
done
for check in "OK loss fell" "OK parameters equal rank 0's bit for bit after the step a worker joined at (step $step)" \
  "OK parameters equal rank 0's bit for bit$" \
  "OK parameters equal the elastic reference bit for bit"; do
  for w in "${members[@]}"; do
    grep -q "\[worker $w\] $check" "$log" || fail "worker $w did not report: $check"
  done
  for ((l = 0; l < local_size; l++)); do
    grep -q "^$check" "$work/joined-joiner.$l.log" ||
      fail "process $l of the machine that joined did not report: $check"
  done
done
grep -q "FAILED" "$log" "$work"/joined-joiner.*.log && fail "a check failed"
ms() { sed 's/.*\[\([0-9]*\)\.\([0-9]*\)\].*/\1\2/' <<<"$1"; }
asked=$(grep "\[scheduler\].*asks to join the running job as machine 3" "$log" | tail -1)
took=$(($(ms "$line") - $(ms "$asked")))
if ((local_size > 1)); then
  echo "ok: a 4th machine of $local_size processes joined at step boundary $boundary (its first" \
    "step $step) in $took ms from its last process's hello; all agreed bit for bit after that" \
    "step and at the end, and equalled the replay that adds it there"
  exit 0
fi

# 2. No room: the 4th is refused naming the maximum, and the 3 finish.
export BYTEPS_MAX_NUM_WORKER=3
run_with_a_late_worker refused
((joiner_rc != 0)) || fail "a worker past BYTEPS_MAX_NUM_WORKER=3 exited 0"
grep -q "refused this node: the job already has 3 worker machines, its most (BYTEPS_MAX_NUM_WORKER=3)" \
  "$work/refused-joiner.0.log" || fail "the refused worker did not name the maximum"
((job_rc == 0)) || fail "the job of 3 exited $job_rc after refusing a 4th worker"
for w in 0 1 2; do
  grep -q "\[worker $w\] OK parameters equal the elastic reference bit for bit" "$work/refused.log" ||
    fail "worker $w of the job that refused a 4th did not equal the replay"
done

echo "ok: a 4th worker joined at step boundary $boundary (its first step $step) in $took ms from" \
  "its hello; all 4 agreed bit for bit after that step and at the end, and equalled the replay" \
  "that adds it there; with BYTEPS_MAX_NUM_WORKER=3 it was refused naming the maximum"
