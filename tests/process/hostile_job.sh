#!/usr/bin/env bash
# A job under attack (issue 15): a scheduler, a server and two workers with BYTEPS_JOB_TOKEN,
# started by hand on fixed ports; while the scheduler waits for the workers, hostile_client.py
# attacks both listeners (random bytes, an HTTP request, a huge length prefix, half a frame, a
# frame before hello, a replayed hello, a wrong token, a slow writer, a flood of silent
# connections). Then the workers run push_pull_check: exact sums, every process exits 0, and the
# listeners' logs name each attack with the attacker's address.
# Usage: hostile_job.sh BYTEPS_SERVER PUSH_PULL_CHECK HOSTILE_CLIENT
set -uo pipefail
server_bin=$1
check=$2
attacker=$3
source "$(dirname "$0")/by_hand_job.sh"  # dir, pids (killed on exit), free_port, expect_exit_0
sched_port=$(free_port)
server_port=$(free_port)
export DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$sched_port
export BYTEPS_JOB_TOKEN=hostile-suite-token BYTEPS_HELLO_TIMEOUT_MS=1500
export BYTEPS_MAX_PENDING_CONNECTIONS=8 BYTEPS_PARTITION_BYTES=65536 BYTEPS_LOG_LEVEL=WARNING
DMLC_ROLE=scheduler timeout 120 "$server_bin" >"$dir/scheduler.log" 2>&1 &
pids+=($!); sched_pid=$!
DMLC_ROLE=server BYTEPS_SERVER_PORT=$server_port timeout 120 "$server_bin" >"$dir/server.log" 2>&1 &
pids+=($!); server_pid=$!
for _ in $(seq 100); do  # both listen
  (exec 3<>/dev/tcp/127.0.0.1/$server_port) 2>/dev/null && break
  sleep 0.1
done
failures=0
python3 "$attacker" 127.0.0.1 "$sched_port" "$server_port" "$BYTEPS_JOB_TOKEN" 1500 20 || failures=$((failures + 1))
for w in 0 1; do
  DMLC_ROLE=worker DMLC_WORKER_ID=$w timeout 120 "$check" --rounds 5 >"$dir/worker$w.log" 2>&1 &
  pids+=($!); eval "worker${w}_pid=$!"
done
expect_exit_0 worker0 worker1 server sched
for w in 0 1; do
  if grep -q "elements equal the reference sums" "$dir/worker$w.log"; then
    echo "PASS worker $w: exact sums"
  else
    echo "FAIL worker $w: no exact sums"; cat "$dir/worker$w.log"; failures=$((failures + 1))
  fi
done
# Each attack, logged at WARNING by the listener it hit, naming the attacker's address.
expect() {
  local file=$1 what=$2 pattern=$3
  if grep -E "WARNING.*127\.0\.0\.1:[0-9]+.*$pattern" "$dir/$file.log" >/dev/null; then
    echo "PASS logged by the $file: $what"
  else
    echo "FAIL not logged by the $file: $what (/$pattern/)"; failures=$((failures + 1))
  fi
}
for f in scheduler server; do
  expect $f "random bytes" "bad magic"
  expect $f "an HTTP request" "bad magic 0x20544547 \('GET '"
done
expect scheduler "a huge length prefix" "hello frame declares 4611686018427387904 payload bytes"
expect server "a huge length prefix" "hello frame declares 4611686018427387904 payload bytes"
expect scheduler "half a frame" "closed before its hello: .*in the middle of a hello frame \(50 of its 100"
expect server "half a frame" "closed before its hello: .*after 30 of a frame header's 64 bytes"
expect scheduler "a frame before hello" "it sent a barrier frame .*before its hello"
expect server "a frame before hello" "it sent a declare frame .*before its peer_hello"
expect server "a replayed hello" "does not prove this job's BYTEPS_JOB_TOKEN for this link"
if (($(grep -c "does not prove this job's BYTEPS_JOB_TOKEN for this link" "$dir/server.log") >= 2)); then
  echo "PASS logged by the server: a wrong token (a second refused proof)"
else
  echo "FAIL not logged by the server: a wrong token"; failures=$((failures + 1))
fi
expect scheduler "a slow writer" "no hello within 1500 ms"
expect server "a flood: connections past the limit" "connections have not said hello yet \(BYTEPS_MAX_PENDING_CONNECTIONS=8\)"
expect server "a flood: silent connections" "no hello within 1500 ms"
# A stranger is never called a worker or a server.
if grep -E "the (worker|server) at 127" "$dir/scheduler.log" >/dev/null; then
  echo "FAIL the scheduler called a stranger a node:"; grep -E "the (worker|server) at 127" "$dir/scheduler.log"
  failures=$((failures + 1))
fi
if ((failures)); then
  echo "--- scheduler"; cat "$dir/scheduler.log"; echo "--- server"; cat "$dir/server.log"
  exit 1
fi
echo "hostile job: every attack refused and logged; the job's sums exact"
