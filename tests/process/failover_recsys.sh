#!/usr/bin/env bash
# Embedding tables with server failover, in real processes started by byteps-launch:
# examples/train_recsys (2 tables on 2 servers, 2 workers) runs
#   1. with failover on and nothing killed;
#   2. the same with a standby server, and server 1 SIGKILLed (with its process group) in the
#      middle of training; the standby replays its tables' journal (docs/tables.md).
# Both must exit 0 (train_recsys checks that the loss fell and the workers agree), the second
# must show the standby taking the rank and the workers re-sending their table requests, and
# the final digest (the MLP and 64 rows of each table) must be the same bits.
#   failover_recsys.sh BYTEPS_LAUNCH TRAIN_RECSYS [STEPS [KILL_AFTER_STEP]]
set -uo pipefail

usage="usage: failover_recsys.sh BYTEPS_LAUNCH TRAIN_RECSYS [STEPS [KILL_AFTER_STEP]]"
launch=${1:?$usage}
train=${2:?$usage}
steps=${3:-800}
kill_after=${4:-200}
[[ $steps =~ ^[0-9]+$ && $kill_after =~ ^[0-9]+$ ]] && ((kill_after % 10 == 0 && kill_after > 0 && kill_after < steps)) ||
  { echo "$usage: need 0 < KILL_AFTER_STEP < STEPS, KILL_AFTER_STEP a multiple of 10" >&2; exit 2; }
train_args=(--steps "$steps" --report 10 --rows 200000)

# shellcheck source=SCRIPTDIR/failover_lib.sh
source "$(dirname "$0")/failover_lib.sh"

export BYTEPS_LOG_LEVEL=INFO
unset BYTEPS_SERVER_STANDBY BYTEPS_TABLE_JOURNAL_DIR
export BYTEPS_FAILOVER_TIMEOUT_MS=20000

# 1. No fault.
"$launch" --workers 2 --servers 2 --timeout 240 -- "$train" "${train_args[@]}" >"$work/clean.log" 2>&1 ||
  fail "train_recsys with no fault exited $?"
clean=$(digest_of "$work/clean.log")
[[ -n $clean ]] || fail "the run with no fault printed no digest"

# 2. A standby; server 1 is killed once step $kill_after is reported.
mkdir "$work/pids"
"$launch" --workers 2 --servers 2 --standby-servers 1 --pid-dir "$work/pids" --timeout 240 -- \
  "$train" "${train_args[@]}" >"$work/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 6000); do
  grep -q "step $kill_after/" "$work/killed.log" && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.005
done
grep -q "step $kill_after/" "$work/killed.log" || fail "step $kill_after never came"
kill -KILL -- "-$(cat "$work/pids/server-1.pid")" || fail "could not kill server 1"
killed_at=$(grep -o "step [0-9]*/$steps" "$work/killed.log" | tail -1)
grep -q "step $steps/$steps" "$work/killed.log" && fail "training ended before the kill ($killed_at)"
wait "$launcher"
rc=$?
launcher=
((rc == 0)) || fail "train_recsys with server 1 killed exited $rc"
grep -q "replaced by the standby server" "$work/killed.log" ||
  fail "the scheduler did not report the standby taking the dead server's rank"
grep -Eq "re-sent .* [1-9][0-9]* table request" "$work/killed.log" ||
  fail "no worker reported re-sending table requests to the replacement"
killed=$(digest_of "$work/killed.log")
[[ -n $killed ]] || fail "the run with a server killed printed no digest"
[[ $killed == "$clean" ]] ||
  fail "final parameters differ: digest $killed with a server killed, $clean with no fault"
echo "ok: server 1 SIGKILLed at $killed_at, the standby replayed its tables' journal;" \
  "final digest $killed, the same bits as the run with no fault"
