#!/usr/bin/env bash
# A train_torch job on 2 workers x 2 servers, checked by what its workers print.
#   torch_job.sh BYTEPS_LAUNCH TRAIN_TORCH [W:LINE]... -- TRAIN_TORCH_ARGS...
# Each W:LINE is a regular expression (grep -E) that a whole line of worker W's output must
# match; the job must also exit 0 and no line may say FAILED.
set -uo pipefail
launch=${1:?usage: torch_job.sh BYTEPS_LAUNCH TRAIN_TORCH [W:LINE]... -- ARGS...}
train=${2:?}
shift 2
expect=()
while (($# > 0)) && [[ $1 != -- ]]; do
  expect+=("$1")
  shift
done
[[ ${1:-} == -- ]] && shift

log=$(mktemp)
trap 'rm -f "$log"' EXIT
export BYTEPS_LOG_LEVEL=WARNING
status=0
"$launch" --workers 2 --servers 2 --timeout 240 -- "$train" "$@" >"$log" 2>&1 || status=$?
echo "---- train_torch $*: exit $status"
grep -E '^\[worker [01]\] |^byteps-launch:' "$log"
failures=0
if ((status != 0)); then
  echo "FAIL: byteps-launch exited $status, expected 0"
  tail -30 "$log"
  failures=$((failures + 1))
fi
if grep -q 'FAILED' "$log"; then
  echo "FAIL: a check FAILED"
  failures=$((failures + 1))
fi
for e in "${expect[@]}"; do
  w=${e%%:*} line=${e#*:}
  if ! grep -qxE "\[worker $w\] $line" "$log"; then
    echo "FAIL: worker $w printed no line matching '$line'"
    failures=$((failures + 1))
  fi
done
((failures == 0)) && echo "PASS: exit 0, every expected line"
exit $((failures == 0 ? 0 : 1))
