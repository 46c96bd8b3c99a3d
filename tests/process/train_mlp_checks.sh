#!/usr/bin/env bash
# train_mlp's own end checks hold whatever the run's length (issue 34, item 5):
#  - one epoch: the loss has nothing to fall from, so that check says SKIPPED and the job
#    passes on its other checks (synchronous and --async);
#  - a single-process reference that runs longer than BYTEPS_OP_TIMEOUT_MS: no worker waits for
#    it on the cluster, so the job passes, and every worker reports the reference check.
#   train_mlp_checks.sh BYTEPS_LAUNCH TRAIN_MLP OP_TIMEOUT_MS -- LONG_RUN_ARGS...
# LONG_RUN_ARGS make train_mlp's reference outlast OP_TIMEOUT_MS (checked from the time it
# prints) while each operation of the training stays far inside it.
set -uo pipefail
launch=${1:?usage: train_mlp_checks.sh BYTEPS_LAUNCH TRAIN_MLP OP_TIMEOUT_MS -- LONG_RUN_ARGS...}
train=${2:?} op_timeout_ms=${3:?}
shift 3
[[ ${1:-} == -- ]] && shift
long_args=("$@")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export BYTEPS_LOG_LEVEL=WARNING
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# expect_line LOG LINE: LOG holds LINE exactly (a whole line), for each worker.
expect_line() {
  local w
  for w in 0 1; do
    grep -qxF "[worker $w] $2" "$1" || fail "worker $w did not print '$2'"
  done
}
# expect_reference_ok LOG: each worker reports the reference check passed.
expect_reference_ok() {
  local w
  for w in 0 1; do
    grep -qxE "\[worker $w\] OK max relative difference to the single-process reference [0-9.e+-]+ \(limit 1e-05\)" "$1" ||
      fail "worker $w did not report 'OK max relative difference ... (limit 1e-05)'"
  done
}
run() {  # run NAME ARGS...: the job on 2 workers x 2 servers; its output in $work/NAME.log
  local name=$1 status=0
  shift
  "$launch" --workers 2 --servers 2 --timeout 240 -- "$train" "$@" >"$work/$name.log" 2>&1 || status=$?
  echo "---- $name: train_mlp $*: exit $status"
  grep -E '^\[worker [01]\] (OK|FAILED|SKIPPED|single-process)|^byteps-launch:|\] train_mlp: ' "$work/$name.log"
  if ((status != 0)); then
    fail "$name: byteps-launch exited $status, expected 0"
    tail -20 "$work/$name.log"
  fi
  ! grep -q 'FAILED' "$work/$name.log" || fail "$name: a check FAILED"
}

# One epoch.
run one_epoch --model small --epochs 1
expect_line "$work/one_epoch.log" "SKIPPED: loss fell: it needs at least 2 epochs to compare, and this run trained 1"
expect_line "$work/one_epoch.log" "OK parameters equal rank 0's bit for bit"
expect_reference_ok "$work/one_epoch.log"

# One epoch of asynchronous training: the same loss check, the same skip.
BYTEPS_ENABLE_ASYNC=1 run async_one_epoch --model small --epochs 1 --async
expect_line "$work/async_one_epoch.log" "SKIPPED: loss fell: it needs at least 2 epochs to compare, and this run trained 1"
expect_line "$work/async_one_epoch.log" "OK parameters equal the servers' and rank 0's bit for bit"

# A reference that outlasts BYTEPS_OP_TIMEOUT_MS.
BYTEPS_OP_TIMEOUT_MS=$op_timeout_ms run long_reference "${long_args[@]}"
log=$work/long_reference.log
re='^\[worker 0\] single-process reference run: [0-9]+ steps in ([0-9.]+) s$'
line=$(grep -E "$re" "$log" | head -1)
if [[ $line =~ $re ]]; then
  ms=$(awk -v s="${BASH_REMATCH[1]}" 'BEGIN { printf "%d", s * 1000 }')
  ((ms > op_timeout_ms)) ||
    fail "the reference took $ms ms, not more than BYTEPS_OP_TIMEOUT_MS=$op_timeout_ms: this case shows nothing; give it a longer run"
else
  fail "worker 0 did not print how long the reference took"
fi
expect_reference_ok "$log"
expect_line "$log" "OK parameters equal rank 0's bit for bit"
for w in 0 1; do
  grep -qE "^\[worker $w\] OK loss fell from " "$log" || fail "worker $w did not print 'OK loss fell'"
done

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "ok: one epoch (synchronous and async) skips the loss check and passes; a reference longer than BYTEPS_OP_TIMEOUT_MS=$op_timeout_ms ms passes"
