#!/usr/bin/env bash
# The README's libtorch trainer on 2 workers x 1 server: it must exit 0, each worker must print
# its final weights and loss, the weights must be the same text on both workers (the trainer
# prints them with 9 significant digits, enough to tell floats apart), and the loss must
# have fallen under 0.01 (it learns y = sum(x), which a Linear(10, 1) fits exactly).
#   readme_job.sh BYTEPS_LAUNCH TRAINER
set -uo pipefail
launch=${1:?usage: readme_job.sh BYTEPS_LAUNCH TRAINER} trainer=${2:?}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
BYTEPS_LOG_LEVEL=WARNING "$launch" --workers 2 --servers 1 --timeout 240 -- "$trainer" >"$log" 2>&1 || status=$?
cat "$log"
((status == 0)) || { echo "FAIL: byteps-launch exited $status"; exit 1; }
w0=$(sed -n 's/^\[worker 0\] rank 0: loss [0-9.e-]*, weights \(.*\)$/\1/p' "$log")
w1=$(sed -n 's/^\[worker 1\] rank 1: loss [0-9.e-]*, weights \(.*\)$/\1/p' "$log")
loss=$(sed -n 's/^\[worker 0\] rank 0: loss \([0-9.e-]*\),.*$/\1/p' "$log")
[[ -n $w0 && -n $w1 ]] || { echo "FAIL: a worker did not print 'rank R: loss L, weights ...'"; exit 1; }
[[ $w0 == "$w1" ]] || { echo "FAIL: the workers' weights differ: '$w0' and '$w1'"; exit 1; }
awk -v l="$loss" 'BEGIN { exit !(l < 0.01) }' || { echo "FAIL: final loss $loss is not under 0.01"; exit 1; }
echo "PASS: both workers hold weights $w0; final loss $loss < 0.01"
