#!/usr/bin/env bash
# Several worker processes per machine (bps::local::host) as real processes:
#   1. 2 machines x 2 local ranks + 2 servers, every dtype, ROUNDS rounds: exact sums;
#   2. machines of 1 and 3 local ranks: exact sums;
#   3. one local rank SIGKILLs itself mid-run: the job fails, the others exit;
# and after each, nothing of the job is left in /dev/shm;
#   4. every local rank of a machine SIGKILLs itself mid-run: the names its segments kept (the
#      colocated servers read its slices in place) stay until the next job on the machine.
# Usage: local_shm_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK [ROUNDS [CHECK_ARGS...]]
# ROUNDS (default 20, at least 4: a rank is killed at round 3) is 5 in the sanitizer suites;
# CHECK_ARGS go to every push_pull_check (the sanitizer suites pass --max-elements).
set -uo pipefail
launch=$1
check=$2
rounds=${3:-20}
check_args=("${@:4}")
[[ $rounds =~ ^[0-9]+$ ]] && ((rounds >= 4)) || { echo "ROUNDS must be a whole number >= 4, got '$rounds'" >&2; exit 2; }
# Every job that shares segments on a machine removes what dead jobs left in /dev/shm (case 4
# relies on it), so a job of another test running beside this one could remove case 4's
# leftovers before this script looks, or this script's jobs remove another test's. As root with
# unshare, the script runs in a mount namespace of its own with a private /dev/shm (a tmpfs,
# gone with the namespace); otherwise in the machine's, and it says so.
# shellcheck source=private_shm.sh
source "$(dirname "$0")/private_shm.sh"
if [[ -z ${BPS_LOCAL_SHM_PRIVATE:-} ]]; then
  if can_have_private_shm; then
    export BPS_LOCAL_SHM_PRIVATE=1
    with_private_shm "" "$0" "$@"
    exit $?
  fi
  echo "note: not root or no unshare: running in this machine's /dev/shm, which a job of another test" \
    "running beside this one may sweep (case 4 then finds nothing left to remove)"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failures=0

# The job ids the workers printed; fails the case if any of its segments is left.
left_in_shm() {
  local ids
  ids=$(grep -o 'job [0-9a-f]\{16\}' "$log" | awk '{print $2}' | sort -u)
  if [[ -z $ids ]]; then
    echo "  no job id was printed" >&2
    return 1
  fi
  local id left=0
  for id in $ids; do
    if compgen -G "/dev/shm/bps-$id-*" >/dev/null; then
      echo "  left in /dev/shm: $(ls /dev/shm | grep "bps-$id-" | tr '\n' ' ')" >&2
      left=1
    fi
  done
  return $left
}

# report NAME OK WHAT: one PASS or FAIL line (WHAT: how it ended), the log's tail on failure.
report() {
  if (($2)); then
    echo "PASS $1 ($3, nothing left in /dev/shm)"
  else
    echo "FAIL $1 ($3)"
    tail -20 "$log"
    failures=$((failures + 1))
  fi
}

run_case() {
  local name=$1 expect=$2
  shift 2
  local rc=0 start=$SECONDS
  "$launch" --servers 2 --timeout 120 "$@" >"$log" 2>&1 || rc=$?
  local ok=1
  if [[ $expect == pass && $rc -ne 0 ]]; then ok=0; fi
  if [[ $expect == fail && $rc -eq 0 ]]; then ok=0; fi
  left_in_shm || ok=0
  report "$name" "$ok" "launcher exit $rc after $((SECONDS - start)) s"
}

export BYTEPS_PARTITION_BYTES=65536 BYTEPS_LOG_LEVEL=WARNING
run_case "2 machines x 2 local ranks - every dtype - $rounds rounds" pass --workers 2 --local-size 2 -- "$check" --rounds "$rounds" "${check_args[@]}"
run_case "machines of 1 and 3 local ranks - every dtype - $rounds rounds" pass --local-sizes 1,3 -- "$check" --rounds "$rounds" "${check_args[@]}" --local-stage host
# Killed before its first push_pull: the other local rank of its machine created segments that
# this one never mapped; the survivors remove them when they fail.
run_case "a local rank killed before its first push_pull: the job fails, shared memory is gone" fail \
  --workers 2 --local-size 2 -- "$check" --rounds "$rounds" "${check_args[@]}" --kill-rank 1 --kill-at-round 0
run_case "a local rank killed at round 3: the job fails, shared memory is gone" fail \
  --workers 2 --local-size 2 -- "$check" --rounds "$rounds" "${check_args[@]}" --kill-rank 1 --kill-at-round 3
# Case 4: nobody of machine 1 is left to unlink its segments, whose names stay while the job
# runs; the next job that shares segments on the machine removes them (their pids are dead).
case_machine_killed() {
  local name="every local rank of a machine killed at round 3: the next job removes what it left"
  local rc=0 ok=1 start=$SECONDS first
  "$launch" --servers 2 --timeout 120 --workers 2 --local-size 2 -- "$check" --rounds "$rounds" "${check_args[@]}" \
    --kill-machine 1 --kill-at-round 3 >"$log" 2>&1 || rc=$?
  first=$(grep -o 'job [0-9a-f]\{16\}' "$log" | awk '{print $2}' | sort -u | head -1)
  if ((rc == 0)) || [[ -z $first ]]; then
    echo "  the job did not fail as planned (exit $rc, job '${first}')" >&2
    ok=0
  elif ! compgen -G "/dev/shm/bps-$first-m1-*" >/dev/null; then
    echo "  the killed machine left nothing behind: nothing to remove, the case tests nothing" >&2
    ok=0
  fi
  "$launch" --servers 2 --timeout 120 --workers 2 --local-size 2 -- "$check" --rounds 1 >"$log" 2>&1 ||
    { echo "  the next job failed" >&2; ok=0; }
  if [[ -n $first ]] && compgen -G "/dev/shm/bps-$first-*" >/dev/null; then
    echo "  still in /dev/shm after the next job: $(ls /dev/shm | grep "bps-$first-" | tr '\n' ' ')" >&2
    ok=0
  fi
  left_in_shm || ok=0
  report "$name" "$ok" "$((SECONDS - start)) s"
}
case_machine_killed
exit $((failures > 0))
