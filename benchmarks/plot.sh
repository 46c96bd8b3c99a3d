#!/usr/bin/env bash
# plot.sh: busbw against size, one line per system, as a PNG (gnuplot).
#
#   benchmarks/plot.sh SUMMARY [OUT.png] [TITLE]
#       SUMMARY: the summary.txt that run-emulated.sh writes (columns: size system time_us
#       busbw_GBps ...), one line per system in it.
#   benchmarks/plot.sh --tables NAME=TABLE [NAME=TABLE ...] [--out OUT.png] [--title TITLE]
#       TABLE: a table printed by bps-bench, gloo-allreduce or mpi-allreduce (busbw is column 7).
set -euo pipefail
prog=$(basename "$0")
die() {
  echo "$prog: error: $*" >&2
  exit 2
}
[[ ${1:-} == -h || ${1:-} == --help || $# -eq 0 ]] && {
  sed -n '2,9s/^# \{0,1\}//p' "$0"
  exit 0
}
command -v gnuplot >/dev/null || die "needs gnuplot (apt-get install gnuplot-nox)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bps-plot.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
names=()
title="busbw against size"
if [[ $1 == --tables ]]; then
  shift
  out=busbw.png
  while (($# > 0)); do
    case $1 in
      --out) out=${2:?}; shift 2 ;;
      --title) title=${2:?}; shift 2 ;;
      *=*)
        name=${1%%=*} file=${1#*=}
        [[ -r $file ]] || die "cannot read $file"
        awk '!/^#/ && $1 ~ /^[0-9]+$/ { print $1, $7 }' "$file" >"$tmp/$name.dat"
        names+=("$name")
        shift
        ;;
      *) die "expected NAME=TABLE, --out or --title, got '$1'" ;;
    esac
  done
else
  summary=$1
  out=${2:-busbw.png}
  [[ -n ${3:-} ]] && title=$3
  [[ -r $summary ]] || die "cannot read $summary"
  head=$(grep -m1 '^# run-emulated' "$summary" || true)
  [[ -n $head && -z ${3:-} ]] && title="busbw against size (${head#\# run-emulated.sh })"
  while read -r name; do
    awk -v s="$name" '!/^#/ && $2 == s { print $1, $4 }' "$summary" >"$tmp/$name.dat"
    names+=("$name")
  done < <(awk '!/^#/ && NF >= 4 && !seen[$2]++ { print $2 }' "$summary")
fi
((${#names[@]} > 0)) || die "no data found"

plot=""
for n in "${names[@]}"; do
  plot+="${plot:+, }'$tmp/$n.dat' using 1:2 with linespoints title '$n'"
done
gnuplot <<EOF
set terminal pngcairo size 1000,600 noenhanced
set output '$out'
set title "${title//\"/\'}"
set logscale x 2
set format x '%.0b%B'
set xlabel 'size (bytes)'
set ylabel 'busbw (GB/s)'
set key top left
set grid
plot $plot
EOF
echo "$prog: wrote $out"
