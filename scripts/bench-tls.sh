#!/usr/bin/env bash
# TLS's cost (issue 15 part 2): the same loopback job (WORKERS workers + SERVERS servers under
# byteps-launch, bps-bench as every worker) over plain TCP and over transport::tls<tcp>,
# interleaved pass by pass so that both see the same load, at 64 MiB (ITERS_BIG + 3 warm-up) and
# 4 KiB (ITERS_SMALL + 50 warm-up), float32. BYTEPS_ENABLE_IPC=0 in both, so every byte crosses
# the transport being measured (with ipc on, pushes to a server on the same host would skip it).
# Makes a CA and a node certificate with the openssl command in a temporary folder. Prints one
# line per run: transport, size, p50 and p99 in microseconds (rank 0's table).
#
# Environment: BUILD_DIR (build-bench), PASSES (3), WORKERS (2), SERVERS (2), ITERS_BIG (20),
# ITERS_SMALL (1000).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-bench}
passes=${PASSES:-3}
bench=$build/benchmarks/bps-bench
launch=$build/tools/byteps-launch
[[ -x $bench && -x $launch ]] || { echo "bench-tls: build $bench first (docs/performance.md)" >&2; exit 2; }

pki=$(mktemp -d "${TMPDIR:-/tmp}/bench-tls.XXXXXX")
trap 'rm -rf -- "$pki"' EXIT
(
  cd "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=bench-ca -keyout ca.key -out ca.pem
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=node \
    -keyout node.key -out node.csr
  openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -out node.pem
) >"$pki/openssl.log" 2>&1 || { cat "$pki/openssl.log" >&2; exit 1; }

# run TRANSPORT SIZE ITERS WARMUP: one job; prints "TRANSPORT SIZE p50 p99".
run() {
  local transport=$1 size=$2 iters=$3 warmup=$4 out
  local -a tls=()
  [[ $transport == tls ]] &&
    tls=(BYTEPS_TLS_CA="$pki/ca.pem" BYTEPS_TLS_CERT="$pki/node.pem" BYTEPS_TLS_KEY="$pki/node.key")
  out=$(env BYTEPS_ENABLE_IPC=0 BYTEPS_LOG_LEVEL=WARNING "${tls[@]}" "$launch" \
          --workers "${WORKERS:-2}" --servers "${SERVERS:-2}" -- \
          "$bench" --min-bytes "$size" --max-bytes "$size" --iters "$iters" --warmup "$warmup" 2>&1)
  # rank 0's row: size count dtype p50 p99 algbw busbw wrong ...
  awk -v t="$transport" -v s="$size" '$1 == "[worker" && $2 == "0]" && $3 ~ /^[0-9]+$/ && $5 == "float32" {
           print t, s, $6, $7, "wrong=" $10 }' <<<"$out"
}

echo "# transport size p50_us p99_us (load: $(cut -d' ' -f1-3 /proc/loadavg))"
for ((p = 1; p <= passes; ++p)); do
  for t in tcp tls; do run "$t" 64M "${ITERS_BIG:-20}" 3; done
  for t in tcp tls; do run "$t" 4K "${ITERS_SMALL:-1000}" 50; done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
