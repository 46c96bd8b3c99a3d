#!/usr/bin/env bash
# Soak run: 2 workers x 2 servers, 200 tensors, 5000 rounds (override: TENSORS, ROUNDS), every
# sum checked. Samples the resident memory of all five processes every few seconds and fails if
# any grew by more than 10% (and 4 MiB) between the end of warm-up (a fifth of the run) and the
# end. With BUILD_DIR=build-asan (configured by scripts/sanitize.sh asan; the two programs are
# built here) LeakSanitizer also checks every process for leaks at exit.
#   scripts/soak.sh            # builds ./build first
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
tensors=${TENSORS:-200} rounds=${ROUNDS:-5000} every=${SAMPLE_SECONDS:-2}
if [[ -z ${BUILD_DIR:-} ]]; then
  scripts/build.sh --target byteps-server byteps_soak_worker >/dev/null || exit 1
else
  # A sanitized build leaves the soak worker out of its default targets.
  cmake --build "$build" --target byteps-server byteps_soak_worker >/dev/null || exit 1
fi
server="$build/tools/byteps-server" worker="$build/tests/soak/byteps_soak_worker"
# Under ASan, freed memory waits in a quarantine (256 MiB by default) before it is reused, which
# grows every process's resident memory for the first minutes whatever the code does: measured,
# 220 -> 450 MiB per worker over 5000 rounds with it, flat (19.6 MiB) without. The leak check at
# exit does not need it, so it is off unless ASAN_OPTIONS says otherwise.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:verify_asan_link_order=0:quarantine_size_mb=0:thread_local_quarantine_size_kb=0}

export DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=2 DMLC_PS_ROOT_URI=127.0.0.1 BYTEPS_LOG_LEVEL=WARNING
work=$(mktemp -d)
declare -A pid=()
cleanup() {
  for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

DMLC_ROLE=scheduler DMLC_PS_ROOT_PORT=0 "$server" --port-file "$work/port" &
pid[scheduler]=$!
for _ in $(seq 100); do [[ -s $work/port ]] && break; sleep 0.05; done
export DMLC_PS_ROOT_PORT
DMLC_PS_ROOT_PORT=$(<"$work/port")
for s in 0 1; do DMLC_ROLE=server "$server" & pid[server$s]=$!; done
for w in 0 1; do
  DMLC_ROLE=worker DMLC_WORKER_ID=$w "$worker" --tensors "$tensors" --rounds "$rounds" \
    --report-every 100 >"$work/worker$w.out" &
  pid[worker$w]=$!
done

rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
names=(scheduler server0 server1 worker0 worker1)
printf '%8s %7s' seconds round; printf ' %10s' "${names[@]}"; printf '   (resident KiB)\n'
declare -A first=() last=()
start=$(date +%s)
warm=0
while kill -0 "${pid[worker0]}" 2>/dev/null || kill -0 "${pid[worker1]}" 2>/dev/null; do
  sleep "$every"
  now=$(($(date +%s) - start))
  round=$(awk '/^round/ {r = $2} END {print r + 0}' "$work/worker0.out")
  printf '%8d %7d' "$now" "$round"
  for n in "${names[@]}"; do
    r=$(rss "${pid[$n]}")
    printf ' %10s' "$r"
    ((r > 0)) && last[$n]=$r
  done
  printf '\n'
  # The first sample after a fifth of the rounds is the warm baseline.
  if ((warm == 0 && round * 5 >= rounds)); then
    for n in "${names[@]}"; do first[$n]=${last[$n]:-0}; done
    warm=1
  fi
done

failed=0
for w in worker0 worker1; do
  wait "${pid[$w]}" || { echo "soak: $w failed"; failed=1; }
done
for n in scheduler server0 server1; do
  wait "${pid[$n]}" || { echo "soak: $n exited non-zero"; failed=1; }
done
for n in "${names[@]}"; do
  f=${first[$n]:-0} l=${last[$n]:-0}
  if ((f > 0 && l > f + f / 10 && l > f + 4096)); then
    echo "soak: $n grew from $f KiB after warm-up to $l KiB"
    failed=1
  fi
done
echo "soak: $tensors tensors x $rounds rounds in $(($(date +%s) - start)) s: $([[ $failed == 0 ]] && echo ok || echo FAILED)"
exit "$failed"
