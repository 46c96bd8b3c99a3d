#!/usr/bin/env bash
# Checks the sandbox fixture (sandbox.sh) on a real case: a suite of one byteps-launch job that
# CTest kills at its 15 s timeout (tests/sandbox/killed_job; 15 s so that a loaded machine still
# starts the job before it). CTest's SIGKILL gives the job's
# traps no chance to run, so its temporary folder and a shared-memory segment its worker made
# stay behind; the fixture's cleanup must remove them, say so, and leave no process running.
#   killed_job_check.sh BYTEPS_LAUNCH BYTEPS_SERVER
set -uo pipefail
launch=${1:?usage: killed_job_check.sh BYTEPS_LAUNCH BYTEPS_SERVER}
server=${2:?usage: killed_job_check.sh BYTEPS_LAUNCH BYTEPS_SERVER}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sandbox=$work/sandbox

fail() {
  echo "FAIL: $*"
  echo "---- the inner suite's output"
  cat "$work/ctest.log"
  exit 1
}

cmake -S "$here/killed_job" -B "$work/build" -DSANDBOX_SCRIPT="$here/sandbox.sh" \
  -DSANDBOX="$sandbox" -DLAUNCH="$launch" -DSERVER="$server" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
ctest --test-dir "$work/build" --output-on-failure >"$work/ctest.log" 2>&1  # fails by design: a timeout and a leak

grep -q "a job that outlives its timeout .*Timeout" "$work/ctest.log" ||
  fail "the job was not killed at its timeout"
grep -q "sandbox: removing what tests left in $sandbox: .*byteps-launch\." "$work/ctest.log" ||
  fail "the cleanup did not report the launcher's temporary folder"
grep -q "sandbox: removing shared memory nobody maps: .*/dev/shm/bps-sandbox-check-" "$work/ctest.log" ||
  fail "the cleanup did not report the worker's shared-memory segment"
grep -q "cleanup .*Failed" "$work/ctest.log" || fail "the cleanup did not fail the inner suite"
[[ ! -e $sandbox ]] || fail "$sandbox is still there"
compgen -G "/dev/shm/bps-sandbox-check-*" >/dev/null && fail "a segment is still in /dev/shm"
left=$("$here/sandbox.sh" pids "$sandbox")
[[ -z $left ]] || fail "processes of the killed job still run: $(echo $left)"
echo "ok: the job was killed at its timeout; the fixture removed its temporary folder and its" \
  "shared-memory segment, failed the inner suite for them, and no process of it runs"
