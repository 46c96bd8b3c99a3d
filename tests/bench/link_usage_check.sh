#!/usr/bin/env bash
# link-usage.py report on a made-up record: host 0 sends at exactly the rate, host 1 at half of
# it for the first half of the round and not at all after; the shares are worked out by hand.
# A record without timed rounds and a rate without a unit are refused by name.
set -euo pipefail
script=${1:?usage: link_usage_check.sh PATH/link-usage.py}
dir=$(mktemp -d "${TMPDIR:-/tmp}/link-usage.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# Samples every 10 ms from t = 1.000 s to 2.000 s; at 1 Gbit/s a host sends 1,250,000 bytes in
# 10 ms. Host 0: always at the rate. Host 1: half the rate until t = 1.5 s, then nothing.
awk 'BEGIN {
  for (k = 0; k <= 100; k++) {
    t = 1 + k / 100
    h1 = (t <= 1.5) ? k * 625000 : 50 * 625000
    printf "%.6f %d 0 %d 0\n", t, k * 1250000, h1
  }
}' > "$dir/record.txt"
# One round, from t = 1.1 s (first rank out) to 1.9 s (last result), two ranks.
mkdir "$dir/times"
echo "67108864 0 1100000000 1800000000" > "$dir/times/byteps-rank0.txt"
echo "67108864 0 1150000000 1900000000" > "$dir/times/byteps-rank1.txt"
echo "67108864 -1 0 1000000000" >> "$dir/times/byteps-rank1.txt"  # warm-up: left out

# Round 1.1 .. 1.9 s (800 ms): host 0 1.000 throughout. Host 1: first 10% (1.10 .. 1.18) 0.500,
# middle 80% (1.18 .. 1.82) sends until 1.5 s: 0.32 s x 0.5 / 0.64 s = 0.250, last 10% 0.000,
# whole round 0.4 s x 0.5 / 0.8 s = 0.250.
got=$("$script" report "$dir/record.txt" "$dir/times" --rate 1gbit | grep -v '^#' | tr -s ' ' | sed 's/^ //')
want="0 1.000 1.000 1.000 1.000
1 0.250 0.500 0.250 0.000"
if [[ "$got" != "$want" ]]; then
  printf 'link-usage.py report printed:\n%s\nexpected:\n%s\n' "$got" "$want" >&2
  exit 1
fi

# Errors name what is wrong.
mkdir "$dir/empty"
if msg=$("$script" report "$dir/record.txt" "$dir/empty" --rate 1gbit 2>&1); then
  echo "link-usage.py accepted a folder without timed rounds" >&2
  exit 1
fi
[[ $msg == *"no timed rounds in $dir/empty"* ]] || { echo "unclear message: $msg" >&2; exit 1; }
if msg=$("$script" report "$dir/record.txt" "$dir/times" --rate 1000 2>&1); then
  echo "link-usage.py accepted a rate without a unit" >&2
  exit 1
fi
[[ $msg == *"--rate '1000'"* ]] || { echo "unclear message: $msg" >&2; exit 1; }
echo "link-usage.py report: shares as worked out by hand; errors named"
