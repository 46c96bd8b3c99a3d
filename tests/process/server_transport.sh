#!/usr/bin/env bash
# byteps-server picks its transport at run time: --transport tcp|rdma or DMLC_ENABLE_RDMA.
#   server_transport.sh BYTEPS_SERVER HAVE_RDMA(ON|OFF)
# Checks --help shows the choice; a bad --transport or DMLC_ENABLE_RDMA exits 2 naming it; with
# rdma-core, --transport rdma takes the RDMA path (a device name that no machine has fails at
# start with the transport's own error, exit 1, device or not); without it, exit 2 saying the
# build lacks RDMA. No traffic is sent: every run ends before it connects anywhere.
set -uo pipefail
server=${1:?usage: server_transport.sh BYTEPS_SERVER HAVE_RDMA}
have_rdma=${2:?usage: server_transport.sh BYTEPS_SERVER HAVE_RDMA}
for v in $(env | grep -oE '^(DMLC|BYTEPS)_[A-Z_]+'); do unset "$v"; done
export BYTEPS_LOG_LEVEL=ERROR BYTEPS_CONNECT_TIMEOUT_MS=2000 BYTEPS_RENDEZVOUS_TIMEOUT_MS=2000
failures=0
expect() {  # expect NAME WANT_RC WANT_TEXT -- COMMAND...
  local name=$1 want_rc=$2 want_text=$3
  shift 4
  local out rc
  out=$(timeout 30 "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $want_rc || $out != *"$want_text"* ]]; then
    echo "FAILED: $name: exit $rc (want $want_rc), output:"
    echo "$out"
    echo "(want it to contain: $want_text)"
    failures=$((failures + 1))
  else
    echo "ok: $name (exit $rc)"
  fi
}
job=(--role scheduler --num-workers 1 --num-servers 1 --root-uri 127.0.0.1 --root-port 0)

if [[ $have_rdma == ON ]]; then
  help_text="tcp (default) or rdma (verbs; the same on every node)"
else
  help_text="tcp (this build has no rdma: built without rdma-core)"
fi
expect "--help shows the transport choice" 0 "--transport            DMLC_ENABLE_RDMA               $help_text" -- "$server" --help
expect "--transport udp is refused" 2 "byteps-server: --transport 'udp' is not valid: expected tcp or rdma" -- "$server" --transport udp "${job[@]}"
expect "DMLC_ENABLE_RDMA=zmq is refused" 2 "byteps-server: DMLC_ENABLE_RDMA='zmq' is not valid: expected ibverbs or 1 (the RDMA transport), or 0 or unset (TCP)" -- env DMLC_ENABLE_RDMA=zmq "$server" "${job[@]}"
if [[ $have_rdma == ON ]]; then
  # Whatever devices this machine has, none is called this: the RDMA transport says so.
  for how in "--transport rdma" "env:DMLC_ENABLE_RDMA=ibverbs" "env:DMLC_ENABLE_RDMA=1"; do
    if [[ $how == env:* ]]; then
      cmd=(env "${how#env:}" BYTEPS_RDMA_DEVICE=no_such_rdma_dev "$server" "${job[@]}")
    else
      cmd=(env BYTEPS_RDMA_DEVICE=no_such_rdma_dev "$server" $how "${job[@]}")
    fi
    out=$(timeout 30 "${cmd[@]}" 2>&1); rc=$?
    if [[ $rc -eq 1 && ( $out == *"byteps-server: rdma: no RDMA device found (ibv_get_device_list is empty)"* || $out == *"byteps-server: rdma: no device named 'no_such_rdma_dev'"* ) ]]; then
      echo "ok: $how takes the RDMA transport (exit 1: $out)"
    else
      echo "FAILED: $how: exit $rc (want 1 and the RDMA transport's start error), output:"
      echo "$out"
      failures=$((failures + 1))
    fi
  done
  # --transport tcp overrides DMLC_ENABLE_RDMA: the scheduler starts on TCP and times out
  # waiting for its nodes (exit 1, the rendezvous timeout), not on RDMA.
  expect "--transport tcp wins over DMLC_ENABLE_RDMA" 1 "byteps-server: rendezvous timed out after 2000 ms: 0 of 1 workers" -- env DMLC_ENABLE_RDMA=ibverbs "$server" --transport tcp "${job[@]}"
else
  expect "--transport rdma without rdma-core" 2 "byteps-server: DMLC_ENABLE_RDMA (or --transport rdma) asks for the RDMA transport, but this byteps-server was built without it" -- "$server" --transport rdma "${job[@]}"
  expect "DMLC_ENABLE_RDMA=ibverbs without rdma-core" 2 "was built without it (BYTEPS_WITH_RDMA=OFF" -- env DMLC_ENABLE_RDMA=ibverbs "$server" "${job[@]}"
fi
[[ $failures -eq 0 ]] || { echo "$failures check(s) failed"; exit 1; }
echo "every check passed"
