#!/usr/bin/env bash
# The test suite's sandbox: every CTest test of byteps runs with TMPDIR set to a folder of the
# build tree and BYTEPS_TEST_SANDBOX naming it. CTest kills a test that passes its timeout with
# SIGKILL, so the test's own traps never run; this script, run as a CTest fixture around the
# whole suite, removes what such a test leaves behind:
#   sandbox.sh setup DIR    start empty: DIR is (re)created
#   sandbox.sh pids [DIR]   print the pids of the processes of sandbox DIR (of any sandbox
#                           without DIR); the tests use it
#   sandbox.sh pids-under ROOT
#                           the pids of the processes of every sandbox inside folder ROOT (a
#                           checkout); scripts/check-leftovers.sh uses it, so that another
#                           checkout's tests running on the same machine are not counted
#   sandbox.sh cleanup DIR  stop every process still running with BYTEPS_TEST_SANDBOX=DIR,
#                           remove DIR, and remove each /dev/shm/bps-* segment that no live
#                           process maps (byteps names all its shared memory bps-...) and that
#                           was not there at setup (listed in DIR.shm-before)
# Cleanup prints what it removed and fails (exit 1) when it had to remove anything, so a test
# that leaks is seen even when it passed. A segment still mapped by a live process belongs to
# something else running on the machine and is left alone.
set -uo pipefail

# Pids of the processes whose environment holds BYTEPS_TEST_SANDBOX=$1 (any value when $1 is
# empty; with $2 = under, any folder inside $1), this script and its caller excepted.
sandbox_pids() {
  local env_file pid setting value
  for env_file in /proc/[0-9]*/environ; do
    pid=${env_file#/proc/}
    pid=${pid%/environ}
    ((pid == $$ || pid == BASHPID || pid == PPID)) && continue
    # sed reads all its input (grep -q would stop early, and pipefail would then see tr's
    # SIGPIPE); setting is "=VALUE" when the variable is set, even to nothing.
    setting=$({ tr '\0' '\n' <"$env_file"; } 2>/dev/null | sed -n 's/^BYTEPS_TEST_SANDBOX=/=/p')
    [[ -n $setting ]] || continue
    value=${setting#=}
    if [[ -z ${1:-} || $value == "$1" || (${2:-} == under && $value == "${1%/}"/*) ]]; then
      echo "$pid"
    fi
  done
}

usage="usage: sandbox.sh setup|cleanup DIR, sandbox.sh pids [DIR], or sandbox.sh pids-under ROOT"
action=${1:?$usage}
case $action in
  pids)
    sandbox_pids "${2:-}"
    exit 0
    ;;
  pids-under)
    root=${2:?$usage}
    [[ $root == /* ]] || { echo "sandbox.sh: ROOT must be an absolute path, got '$root'" >&2; exit 2; }
    sandbox_pids "$root" under
    exit 0
    ;;
esac
dir=${2:?$usage}
[[ $dir == /* ]] || { echo "sandbox.sh: DIR must be an absolute path, got '$dir'" >&2; exit 2; }

before=$dir.shm-before

# bps-* segments in /dev/shm that no live process has mapped and that were not there at setup.
unmapped_segments() {
  local mapped seg old=
  mapped=$(cat /proc/[0-9]*/maps 2>/dev/null | grep -o '/dev/shm/bps-[^ ]*' | sort -u)
  [[ -f $before ]] && old=$(<"$before")
  for seg in /dev/shm/bps-*; do
    [[ -e $seg ]] || continue
    grep -qxF "$seg" <<<"$mapped" && continue
    grep -qxF "$seg" <<<"$old" && continue
    echo "$seg"
  done
}

case $action in
  setup)
    rm -rf -- "$dir"
    mkdir -p -- "$dir"
    compgen -G '/dev/shm/bps-*' >"$before" || true
    echo "sandbox: $dir is empty; tests put their temporary files there"
    ;;
  cleanup)
    removed=0
    pids=$(sandbox_pids "$dir")
    if [[ -n $pids ]]; then
      echo "sandbox: stopping processes a test left running: $(echo $pids)"
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null
      removed=1
    fi
    if [[ -d $dir ]] && [[ -n $(ls -A "$dir") ]]; then
      echo "sandbox: removing what tests left in $dir: $(ls -A "$dir" | tr '\n' ' ')"
      removed=1
    fi
    rm -rf -- "$dir"
    segments=$(unmapped_segments)
    if [[ -n $segments ]]; then
      echo "sandbox: removing shared memory nobody maps: $(echo $segments)"
      # shellcheck disable=SC2086
      rm -f -- $segments
      removed=1
    fi
    if ((removed)); then
      echo "sandbox: FAILED: tests left the above behind (removed now)"
      rm -f -- "$before"
      exit 1
    fi
    rm -f -- "$before"
    echo "sandbox: nothing was left behind"
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
