#!/usr/bin/env bash
# round-spans.sh on two systems' --times files whose medians are worked out by hand below; a
# warm-up line (negative iteration) must be left out, and an empty folder named.
set -euo pipefail
script=${1:?usage: round_spans_check.sh PATH/round-spans.sh}
dir=$(mktemp -d "${TMPDIR:-/tmp}/round-spans.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# byteps, 2 ranks, 4 KiB, three timed iterations (ns: size iteration left_barrier end):
#   iteration 0: own times 300 and 260 us -> slowest 300; skew 50; span 310; period 1000
#   iteration 1: 200 and 150 -> 200; skew 100; span 250; period 1000
#   iteration 2: 500 and 380 -> 500; skew 20; span 500; no next iteration
#   medians: slowest 300, skew 50, span 310, period 1000
cat > "$dir/byteps-rank0.txt" <<'END'
4096 -1 0 900000000
4096 0 1000000 1300000
4096 1 2000000 2200000
4096 2 3000000 3500000
END
cat > "$dir/byteps-rank1.txt" <<'END'
4096 -1 0 900000000
4096 0 1050000 1310000
4096 1 2100000 2250000
4096 2 3020000 3400000
END
# gloo, 1 rank, two sizes of one iteration each: period "-".
cat > "$dir/gloo-rank0.txt" <<'END'
16384 0 5000000 5123400
4096 0 4000000 4001000
END

got=$("$script" "$dir" | grep -v '^#' | tr -s ' ' | sed 's/^ //')
want="4096 byteps 2 3 300.0 50.0 310.0 1000.0
4096 gloo 1 1 1.0 0.0 1.0 -
16384 gloo 1 1 123.4 0.0 123.4 -"
if [[ "$got" != "$want" ]]; then
  printf 'round-spans.sh printed:\n%s\nexpected:\n%s\n' "$got" "$want" >&2
  exit 1
fi

# An empty folder: exit 1, and the message names the folder and the flag.
mkdir "$dir/empty"
if msg=$("$script" "$dir/empty" 2>&1); then
  echo "round-spans.sh accepted a folder without files" >&2
  exit 1
fi
[[ $msg == *"$dir/empty"*"--times"* ]] || { echo "unclear message: $msg" >&2; exit 1; }
echo "round-spans.sh: medians as worked out by hand; an empty folder is named"
