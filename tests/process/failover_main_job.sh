#!/usr/bin/env bash
# Server failover on the main job (examples/train_mlp --model small, 2 worker machines x 2
# servers, each machine with LOCAL_SIZE worker processes), in real processes started by
# byteps-launch:
#   1. the plain main job, no fault, failover off;
#   2. the same job with BYTEPS_FAILOVER_TIMEOUT_MS set and a standby server, and one server
#      SIGKILLed (with its whole process group) in the middle of training.
# Both must exit 0, the second must show the standby taking the dead server's rank and the
# workers re-sending to it, and the final parameters (train_mlp prints their digest) must be
# the same bits.
# With MODE `async` (asynchronous training, BYTEPS_ENABLE_ASYNC=1, train_mlp --async; LOCAL_SIZE
# must be 1) there is no run to compare bits with (async sums depend on timing): step 1 is
# skipped, and the killed run must exit 0, which train_mlp --async does only when rank 0's loss
# fell and every worker ends with the servers' parameters, the same bits.
#   failover_main_job.sh BYTEPS_LAUNCH TRAIN_MLP [LOCAL_SIZE [EPOCHS [KILL_AFTER_EPOCH [BATCH [MODE]]]]]
# The plain suite runs 40 epochs of batch 256 with the kill after epoch 3; the sanitizer suites,
# where every process runs 5-20 times slower, 6 epochs of batch 1024 (4 steps each) with the kill
# after epoch 2: the same property (the replacement ends on the same bits) with epochs left to
# train after the kill.
set -uo pipefail

usage="usage: failover_main_job.sh BYTEPS_LAUNCH TRAIN_MLP [LOCAL_SIZE [EPOCHS [KILL_AFTER_EPOCH [BATCH [sync|async]]]]]"
launch=${1:?$usage}
train=${2:?$usage}
local_size=${3:-1}
epochs=${4:-40}
kill_after_epoch=${5:-3}
batch=${6:-256}
mode=${7:-sync}
[[ $mode == sync || $mode == async ]] || { echo "$usage: MODE is sync or async, not '$mode'" >&2; exit 2; }
train_args=(--model small --epochs "$epochs" --batch "$batch")
if [[ $mode == async ]]; then
  ((local_size == 1)) || { echo "$usage: async mode runs one worker process per machine (LOCAL_SIZE 1)" >&2; exit 2; }
  export BYTEPS_ENABLE_ASYNC=1
  train_args+=(--async)
fi
[[ $epochs =~ ^[0-9]+$ && $kill_after_epoch =~ ^[0-9]+$ ]] && ((kill_after_epoch >= 1 && kill_after_epoch < epochs)) ||
  { echo "$usage: need 1 <= KILL_AFTER_EPOCH < EPOCHS" >&2; exit 2; }

# shellcheck source=SCRIPTDIR/failover_lib.sh
source "$(dirname "$0")/failover_lib.sh"

export BYTEPS_LOG_LEVEL=INFO
unset BYTEPS_FAILOVER_TIMEOUT_MS BYTEPS_SERVER_STANDBY

# 1. No fault, failover off: the plain main job.
if [[ $mode == sync ]]; then
  "$launch" --workers 2 --local-size "$local_size" --servers 2 --timeout 240 -- "$train" "${train_args[@]}" >"$work/clean.log" 2>&1 ||
    fail "the main job with no fault exited $?"
  clean=$(digest_of "$work/clean.log")
  [[ -n $clean ]] || fail "the run with no fault printed no parameter digest"
fi

# 2. Failover on, one standby; server 0 is killed once epoch $kill_after_epoch is reported.
mkdir "$work/pids"
BYTEPS_FAILOVER_TIMEOUT_MS=20000 "$launch" --workers 2 --local-size "$local_size" --servers 2 --standby-servers 1 \
  --pid-dir "$work/pids" --timeout 240 -- "$train" "${train_args[@]}" >"$work/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 3000); do
  grep -q "epoch $kill_after_epoch/" "$work/killed.log" && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.01
done
grep -q "epoch $kill_after_epoch/" "$work/killed.log" || fail "epoch $kill_after_epoch never came"
grep -q "epoch $epochs/$epochs" "$work/killed.log" && fail "training ended before the kill"
kill -KILL -- "-$(cat "$work/pids/server-0.pid")" || fail "could not kill server 0"
killed_at=$(grep -c "epoch .*/$epochs" "$work/killed.log")
wait "$launcher"
rc=$?
launcher=
((rc == 0)) || fail "the main job with server 0 killed exited $rc"
grep -q "replaced by the standby server" "$work/killed.log" ||
  fail "the scheduler did not report the standby taking the dead server's rank"
grep -q "re-sent" "$work/killed.log" || fail "no worker reported re-sending to the replacement"
if [[ $mode == async ]]; then
  grep -q "OK loss fell" "$work/killed.log" || fail "train_mlp --async did not report its loss falling"
  echo "ok (async): server 0 SIGKILLed after epoch $killed_at of $epochs, the standby took its rank;" \
    "training went on, rank 0's loss fell, and every worker ended with the servers' parameters"
  exit 0
fi
killed=$(digest_of "$work/killed.log")
[[ -n $killed ]] || fail "the run with a server killed printed no parameter digest"
[[ $killed == "$clean" ]] ||
  fail "final parameters differ: digest $killed with a server killed, $clean with no fault"
echo "ok ($local_size worker process(es) per machine): server 0 SIGKILLed after epoch $killed_at of $epochs, the standby took its rank;" \
  "final parameters digest $killed, the same bits as the run with no fault"
