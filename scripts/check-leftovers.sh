#!/usr/bin/env bash
# Checks that a test run left nothing on the machine: no new entry of the system's temporary
# folder that byteps or its tests make (tmp.*, byteps*, bps-*), no new /dev/shm/bps-* segment,
# and no process of a test sandbox of this checkout (BYTEPS_TEST_SANDBOX in its environment,
# naming a folder inside the checkout) still running: another checkout's tests running on the
# same machine are not this run's.
#   check-leftovers.sh snapshot FILE   record what is there now
#   check-leftovers.sh check FILE      fail, naming each one, if anything new is there
# .ci/run takes a snapshot before each suite and checks after it.
set -uo pipefail

usage="usage: check-leftovers.sh snapshot|check FILE"
action=${1:?$usage}
file=${2:?$usage}
tmp=${TMPDIR:-/tmp}
places="/tmp, /dev/shm"
[[ $tmp != /tmp ]] && places="$tmp, $places"

entries() {
  local path
  for path in "$tmp"/tmp.* "$tmp"/byteps* "$tmp"/bps-* /tmp/tmp.* /tmp/byteps* /tmp/bps-* /dev/shm/bps-*; do
    if [[ -e $path ]]; then echo "$path"; fi
  done | sort -u
}

sandbox_processes() {
  local pid
  local root
  root=$(cd "$(dirname "$0")/.." && pwd -P)
  for pid in $("$root/tests/sandbox/sandbox.sh" pids-under "$root"); do
    echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)"
  done
}

case $action in
  snapshot)
    entries >"$file"
    ;;
  check)
    [[ -f $file ]] || { echo "check-leftovers.sh: no snapshot $file" >&2; exit 2; }
    new=$(entries | comm -13 "$file" -)
    procs=$(sandbox_processes)
    if [[ -z $new && -z $procs ]]; then
      echo "check-leftovers: nothing of the run is left in $places, and no test process runs"
      exit 0
    fi
    [[ -n $new ]] && echo "check-leftovers: FAILED: the run left these behind:" && sed 's/^/  /' <<<"$new"
    [[ -n $procs ]] && echo "check-leftovers: FAILED: test processes still running:" && sed 's/^/  /' <<<"$procs"
    exit 1
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
