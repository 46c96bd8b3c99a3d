#!/usr/bin/env bash
# bps-ps-traffic on loopback, 2 workers and 2 servers as four processes on 127.0.0.1 (the
# variables emulate.sh would set, by hand): both modes, and --stagger, finish their rounds,
# every receiver finds the bytes its peers sent (the program exits non-zero otherwise), host 0
# prints one time per timed round; and a host started outside emulate.sh is told which variable
# is missing.
set -uo pipefail
program=${1:?usage: ps_traffic_check.sh PATH/bps-ps-traffic}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run_mode() {  # MODE [OPTION]: four hosts, host 0's output in $dir/MODE.out
  local mode=$1 extra=${2:-} h rc=0
  local -a pids=()
  mkdir -p "$dir/$mode"
  for h in 0 1 2 3; do
    EMU_HOST=$h EMU_ADDRS="127.0.0.1 127.0.0.1 127.0.0.1 127.0.0.1" EMU_DIR="$dir/$mode" \
      EMU_RATE=1gbit EMU_RATE_GBPS=1 "$program" --workers 2 --bytes 2M --chunk 64K \
      --rounds 4 --warmup 1 --answers "${mode%-*}" $extra --deadline 30 >"$dir/$mode.$h.out" 2>&1 &
    pids+=($!)
  done
  for h in 0 1 2 3; do
    wait "${pids[h]}" || { rc=$?; echo "host $h exited $rc:" >&2; cat "$dir/$mode.$h.out" >&2; }
  done
  ((rc == 0)) || fail "--answers $mode: a host failed"
  grep -q "answers ${mode%-*}" "$dir/$mode.0.out" || fail "--answers $mode: no header: $(cat "$dir/$mode.0.out")"
  local rounds
  rounds=$(grep 'rounds (ms):' "$dir/$mode.0.out" | sed 's/.*rounds (ms): //' | tr ',' '\n' | grep -c .)
  ((rounds == 3)) || fail "--answers $mode: $rounds timed rounds printed, 3 expected"
  grep -q 'median .* of M/B' "$dir/$mode.0.out" || fail "--answers $mode: no median"
  echo "PASS --answers $mode: 3 timed rounds, every byte as sent"
}
run_mode free
run_mode gated
run_mode free-staggered --stagger
grep -q "staggered (one peer at a time)" "$dir/free-staggered.0.out" || fail "--stagger is not in the header"

msg=$(env -u EMU_HOST "$program" --workers 1 2>&1) && fail "ran without EMU_HOST"
[[ $msg == *'$EMU_HOST is not set'* ]] || fail "the missing variable is not named: $msg"
echo "PASS without EMU_HOST: '$msg'"
