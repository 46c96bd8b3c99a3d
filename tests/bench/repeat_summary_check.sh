#!/usr/bin/env bash
# summary-tables.sh's repeat_summary (run-emulated.sh --repeat) on three made-up runs' tables:
# medians of an odd and an even count, the median of each run's own ratio (not the ratio of
# the medians), `wrong` summed, a system missing from one run, and the runs' times sorted.
set -euo pipefail
tables=${1:?usage: repeat_summary_check.sh PATH/summary-tables.sh}
dir=$(mktemp -d "${TMPDIR:-/tmp}/repeat-summary.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# What run-emulated.sh's sweep_summary writes, one file per run. byteps's x_gloo per run: 2.00,
# 1.00, 3.00 (median 2.00), where the medians of the times (300 / 200) would give 1.50.
mkdir -p "$dir/run1" "$dir/run2" "$dir/run3"
cat > "$dir/run1/summary.txt" <<'T'
# run-emulated.sh --mode emulated: made up
#       size system                 time_us  busbw_GBps time/bound   wrong  x_gloo   x_mpi
        4096 byteps-ps                100.0      0.0600      1.500       0    2.00       -
        4096 gloo-ring                200.0      0.0300      3.000       0       -       -
T
cat > "$dir/run2/summary.txt" <<'T'
        4096 byteps-ps                300.0      0.0200      4.500       2    1.00       -
        4096 gloo-ring                300.0      0.0200      4.500       0       -       -
T
cat > "$dir/run3/summary.txt" <<'T'
        4096 byteps-ps                200.0      0.0300      3.000       0    3.00       -
T
got=$(mode=emulated workers=4 servers=4 topologies=ps dtype=float32 link_gbps=1 rate=1gbit \
  iters=10 warmup=2 bash -c 'has() { [[ ",$1," == *",$2,"* ]]; }
    source "$1"; shift; repeat_summary "$@"' _ "$tables" "$dir"/run{1,2,3}/summary.txt)
rows=$(grep -v '^#' <<<"$got" | tr -s ' ' | sed 's/^ //')
want="4096 byteps-ps 200.0 0.0300 3.000 2 2.00 - 100.0,200.0,300.0
4096 gloo-ring 250.0 0.0250 3.750 0 - - 200.0,300.0"
if [[ "$rows" != "$want" ]]; then
  printf 'repeat_summary printed:\n%s\nexpected:\n%s\n' "$rows" "$want" >&2
  exit 1
fi
[[ $(head -1 <<<"$got") == *"3 runs, every system once a run"* ]] ||
  { echo "first line does not count the runs: $(head -1 <<<"$got")" >&2; exit 1; }
echo "repeat_summary: medians, per-run ratios and sorted runs as worked out by hand"
