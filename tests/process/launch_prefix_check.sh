#!/usr/bin/env bash
# byteps-launch's prefixes agree with what each process logs (issue 36): every line of "[server I]"
# that names a server names "server I", the gate's lines too once the server has its rank.
# A job of 2 machines x 2 local ranks and 2 servers runs push_pull_check; once both servers say
# "serving on", the workers are stopped (SIGSTOP, so the job cannot end meanwhile), a stranger
# sends each server an HTTP request, which its gate drops with a WARNING, and the workers go on.
# Usage: launch_prefix_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK [CHECK_ARGS...]
set -uo pipefail
launch=${1:?usage: launch_prefix_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK [CHECK_ARGS...]}
check=${2:?usage: launch_prefix_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK [CHECK_ARGS...]}
shift 2
work=$(mktemp -d)
launcher=
trap '[[ -n $launcher ]] && kill -TERM "$launcher" 2>/dev/null; wait; rm -rf -- "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

mkdir "$work/pids"
BYTEPS_LOG_LEVEL=INFO "$launch" --workers 2 --local-size 2 --servers 2 --timeout 240 \
  --pid-dir "$work/pids" -- "$check" "$@" >"$work/job.log" 2>&1 &
launcher=$!
# Each server's port, from its own "serving on" line.
declare -A port=()
for _ in $(seq 3000); do
  for s in 0 1; do
    [[ -n ${port[$s]:-} ]] && continue
    p=$(sed -n "s/^\[server $s\] .* INFO server $s: serving on 127\.0\.0\.1:\([0-9]*\) .*/\1/p" "$work/job.log")
    [[ -n $p ]] && port[$s]=$p
  done
  ((${#port[@]} == 2)) && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.01
done
# gate_line S: server S's gate's line about the stranger, named as the server's rank.
gate_line() {
  grep -E "^\[server $1\] .* WARNING server $1: the connection from 127\.0\.0\.1:[0-9]+ closed before its hello: .*bad magic" "$work/job.log"
}
stopped=()
for f in "$work"/pids/worker-*.pid; do
  [[ -f $f ]] && kill -STOP -- "-$(cat "$f")" 2>/dev/null && stopped+=("$(cat "$f")")
done
for s in 0 1; do
  if [[ -z ${port[$s]:-} ]]; then
    fail "no '[server $s] ... server $s: serving on' line: the prefix and the rank the server logs differ"
    continue
  fi
  # A stranger: its first 64 bytes are not a frame header, so the gate drops it. In a subshell
  # that ignores SIGPIPE: a write after the server closed fails instead of ending this script.
  (
    trap '' PIPE
    exec 3<>"/dev/tcp/127.0.0.1/${port[$s]}" || exit 1
    printf 'GET /%s HTTP/1.0\r\n\r\n' "$(printf 'x%.0s' {1..80})" >&3
    exec 3>&-
  ) 2>/dev/null || fail "could not send to server $s on port ${port[$s]}"
done
for _ in $(seq 500); do # both gates' lines, at most 5 s; the workers are stopped meanwhile
  gate_line 0 >/dev/null && gate_line 1 >/dev/null && break
  sleep 0.01
done
for pgid in "${stopped[@]}"; do kill -CONT -- "-$pgid" 2>/dev/null; done
wait "$launcher"
rc=$?
launcher=
((rc == 0)) || fail "the job exited $rc"
grep -q "elements equal the reference sums" "$work/job.log" || fail "no exact sums"

# Every line a server prints about itself names the rank of its prefix; only before its rank
# came ("serving on") may it say plain "server".
bad=$(awk '
  match($0, /^\[server [0-9]+\] /) {
    prefix = substr($0, 9, RLENGTH - 10)
    if (match($0, / (TRACE|DEBUG|INFO|WARNING|ERROR) server[ 0-9]*: /)) {
      named = substr($0, RSTART, RLENGTH); sub(/^ [A-Z]+ server ?/, "", named); sub(/: $/, "", named)
      if (named != prefix && !(named == "" && !serving[prefix])) print
      if (named == prefix && $0 ~ / serving on /) serving[prefix] = 1
    }
  }' "$work/job.log")
[[ -z $bad ]] || fail "lines whose prefix differs from the server they name:"$'\n'"$bad"
for s in 0 1; do
  if gate_line "$s" >/dev/null; then
    echo "ok: [server $s]'s gate logged the stranger as 'server $s'"
  else
    fail "no '[server $s] ... WARNING server $s: the connection from ... closed before its hello' line (the gate's name)"
  fi
done
if ((failures > 0)); then
  echo "--- the job's output"
  cat "$work/job.log"
  exit 1
fi
echo "ok: every server line's prefix names the rank the server logs, the gate's lines included"
