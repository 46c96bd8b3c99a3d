#!/usr/bin/env bash
# Compile time and peak memory, one translation unit at a time (nothing else should run):
#
#   benchmarks/compile-time.sh [--build DIR] [--runs N] [FILE...]
#
# First the minimal trainer (benchmarks/compile/minimal_trainer.cpp) at -O2, header-only and in
# compiled mode (-DBYTEPS_COMPILED, as byteps::compiled sets it), as a consumer compiles it
# against include/. Then each FILE (a source of this repository) with the exact command of
# DIR/compile_commands.json (default: build; configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON,
# which scripts/build.sh does); a file the build compiles in a unity batch gets its batch's
# command, precompiled header included, compiling the file alone. Each compile runs N times (default 1); the table shows the
# fastest wall time and the largest peak RSS. docs/performance.md, "Compile time", has the
# figures and the files.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
runs=1
files=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "compile-time.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
command -v /usr/bin/time >/dev/null || { echo "compile-time.sh: needs /usr/bin/time (Debian: time)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# measure LABEL COMMAND...: prints "LABEL  seconds  MiB" (best time, largest memory of $runs).
measure() {
  local label=$1 best="" peak=0 t m
  shift
  for ((i = 0; i < runs; i++)); do
    if ! /usr/bin/time -f "%e %M" -o "$out/time" "$@" >"$out/log" 2>&1; then
      echo "compile-time.sh: $label failed to compile:" >&2
      cat "$out/log" >&2
      return 1
    fi
    read -r t m <"$out/time"
    if [[ -z $best ]] || awk "BEGIN {exit !($t < $best)}"; then best=$t; fi
    ((m > peak)) && peak=$m
  done
  printf '| %-58s | %6.1f s | %5d MiB |\n' "$label" "$best" $((peak / 1024))
}

cxx=${CXX:-c++}
echo "| translation unit | wall | peak RSS |"
echo "|---|---|---|"
trainer=benchmarks/compile/minimal_trainer.cpp
measure "minimal trainer, header-only (byteps::byteps)" \
  "$cxx" -std=c++20 -O2 -Iinclude -c "$trainer" -o "$out/trainer.o"
measure "minimal trainer, compiled mode (byteps::compiled)" \
  "$cxx" -std=c++20 -O2 -DBYTEPS_COMPILED -Iinclude -c "$trainer" -o "$out/trainer.o"

((${#files[@]})) || exit 0
db=$build/compile_commands.json
[[ -f $db ]] || { echo "compile-time.sh: $db not found: configure $build with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON" >&2; exit 1; }
for f in "${files[@]}"; do
  abs=$(realpath "$f")
  # The entry's command, with its output sent to the scratch folder. The command is run by the
  # shell in the entry's directory, as the build runs it.
  entry=$(python3 - "$db" "$abs" <<'PY'
import json, shlex, sys
entries = json.load(open(sys.argv[1]))
want = sys.argv[2]
def shown(e, source):
    args = e.get("arguments") or shlex.split(e["command"])
    if "-o" in args:
        args[args.index("-o") + 1] = "/dev/null"
    args = [source if a == e["file"] else a for a in args]
    print(e["directory"])
    print(shlex.join(args))
for e in entries:
    if e["file"] == want:
        shown(e, want)
        break
else:
    # A file compiled in a unity batch: its batch's command (precompiled header and all), with
    # the file in place of the batch.
    for e in entries:
        if "/Unity/" in e["file"] and f'#include "{want}"' in open(e["file"]).read():
            shown(e, want)
            break
PY
)
  [[ -n $entry ]] || { echo "compile-time.sh: $f is not in $db" >&2; exit 1; }
  dir=$(head -1 <<<"$entry")
  cmd=$(tail -1 <<<"$entry")
  measure "$f" bash -c "cd '$dir' && $cmd"
done
