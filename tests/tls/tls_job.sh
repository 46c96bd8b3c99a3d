#!/usr/bin/env bash
# A real job over TLS: byteps-launch starts byteps-server as the scheduler and 2 servers, which
# choose TLS because BYTEPS_TLS_CERT is set, and push_pull_check (built over tls<tcp>) as 2
# workers: every dtype must come back exact. Then the same job with BYTEPS_TLS_CA pointing at
# another CA: every handshake fails, and the nodes must say so (naming the listener and
# OpenSSL's reason) and the launcher must fail, within the connect timeout, not hang.
#
#   tls_job.sh BYTEPS_LAUNCH OPENSSL PUSH_PULL_CHECK_TLS [CHECK_ARGS...]
# CHECK_ARGS go to the first job's push_pull_check (the sanitizer suites pass --max-elements).
set -euo pipefail
launch=$1 openssl=$2 check=$3
check_args=("${@:4}")
dir=$(mktemp -d "${TMPDIR:-/tmp}/tls-job.XXXXXX")
trap 'rm -rf -- "$dir"' EXIT
(
  cd "$dir"
  for ca in ca other-ca; do
    "$openssl" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
      -subj "/CN=byteps-test-$ca" -keyout "$ca.key" -out "$ca.pem"
  done
  "$openssl" req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=node \
    -keyout node.key -out node.csr
  "$openssl" x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -out node.pem
) >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log"; exit 1; }

export BYTEPS_TLS_CERT=$dir/node.pem BYTEPS_TLS_KEY=$dir/node.key BYTEPS_LOG_LEVEL=WARNING
export BYTEPS_PARTITION_BYTES=65536

echo "== a job over TLS: 2 workers x 2 servers, every dtype exact"
BYTEPS_TLS_CA=$dir/ca.pem "$launch" --workers 2 --servers 2 --timeout 240 -- "$check" --rounds 5 "${check_args[@]}"

# --grace 2: the scheduler, which refused everyone, is stopped 2 s after the first node failed
# (it would wait for nodes until its rendezvous timeout).
echo "== the same job, every node trusting another CA: refused, named, no hang"
status=0
start=$SECONDS
out=$(BYTEPS_TLS_CA=$dir/other-ca.pem BYTEPS_CONNECT_TIMEOUT_MS=10000 \
        "$launch" --workers 2 --servers 2 --timeout 120 --grace 2 -- "$check" --rounds 1 2>&1) || status=$?
echo "$out"
if ((status == 0)); then
  echo "FAILED: the job ran although no node's certificate was signed by the CA it trusts"
  exit 1
fi
expected="TLS handshake with 127.0.0.1:[0-9]+ failed: certificate verify failed \(SSL routines\): unable to get local issuer certificate"
if ! grep -Eq "$expected" <<<"$out"; then
  echo "FAILED: no node named the refused handshake (expected /$expected/)"
  exit 1
fi
if ((SECONDS - start > 60)); then
  echo "FAILED: the refused job took $((SECONDS - start)) s to fail"
  exit 1
fi
echo "OK: exit status $status after $((SECONDS - start)) s, the handshake named"
