#!/usr/bin/env bash
# A stranger cannot fail a job by flooding its listeners (issue 34): flood_client.py holds more
# silent connections than BYTEPS_MAX_PENDING_CONNECTIONS to the scheduler, both servers and a
# standby, from the nodes' own address (127.0.0.1), and opens a new one as soon as one closes,
# from before the cluster forms until the job ends: while the nodes join, while the workers
# train, and while the standby replaces server 0, SIGKILLed mid-run (the workers then connect
# to the standby under the flood). The job must still end with exact sums (push_pull_check) and
# every process but the killed server must exit 0. Each listener must have closed flood
# connections for newcomers ("connections have not said hello yet"), so the flood did fill
# every limit. It prints how often a node had to try a listener again: a connection closed
# before its challenge, or a hello lost in a connection closed before the listener read it.
# Usage: flood_job.sh BYTEPS_SERVER PUSH_PULL_CHECK FLOOD_CLIENT [PUSH_PULL_CHECK ARGS...]
set -uo pipefail
server_bin=$1
check=$2
flood=$3
shift 3
check_args=("$@")
source "$(dirname "$0")/by_hand_job.sh"  # dir, pids (killed on exit), free_port, expect_exit_0
sched_port=$(free_port)
server0_port=$(free_port)
server1_port=$(free_port)
standby_port=$(free_port)
limit=8
per_port=$((3 * limit))
export DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=2 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$sched_port
export BYTEPS_JOB_TOKEN=flood-suite-token BYTEPS_HELLO_TIMEOUT_MS=1500
export BYTEPS_MAX_PENDING_CONNECTIONS=$limit BYTEPS_CONNECT_TIMEOUT_MS=20000 BYTEPS_RENDEZVOUS_TIMEOUT_MS=40000
export BYTEPS_FAILOVER_TIMEOUT_MS=20000 BYTEPS_PARTITION_BYTES=65536 BYTEPS_LOG_LEVEL=WARNING
start=$SECONDS

# The flood first: every port is flooded from the moment its node listens.
python3 "$flood" 150 "$per_port" 127.0.0.1 "$sched_port" "$server0_port" "$server1_port" \
  "$standby_port" >"$dir/flood.log" 2>&1 &
pids+=($!); flood_pid=$!
sleep 0.5
DMLC_ROLE=scheduler timeout 120 "$server_bin" >"$dir/scheduler.log" 2>&1 &
pids+=($!); sched_pid=$!
for s in 0 1; do
  port_var="server${s}_port"
  DMLC_ROLE=server BYTEPS_SERVER_ID=$s BYTEPS_SERVER_PORT=${!port_var} timeout 120 "$server_bin" \
    >"$dir/server$s.log" 2>&1 &
  pids+=($!); eval "server${s}_pid=$!"
done
DMLC_ROLE=server BYTEPS_SERVER_STANDBY=1 BYTEPS_SERVER_PORT=$standby_port timeout 120 "$server_bin" \
  >"$dir/standby.log" 2>&1 &
pids+=($!); standby_pid=$!
for w in 0 1; do
  DMLC_ROLE=worker DMLC_WORKER_ID=$w timeout 120 "$check" "${check_args[@]}" >"$dir/worker$w.log" 2>&1 &
  pids+=($!); eval "worker${w}_pid=$!"
done

# Once both workers joined (each prints its job id), they train: kill server 0 then.
failures=0
for _ in $(seq 1200); do
  grep -q "job " "$dir/worker0.log" && grep -q "job " "$dir/worker1.log" && break
  kill -0 "$worker0_pid" 2>/dev/null && kill -0 "$worker1_pid" 2>/dev/null || break
  sleep 0.05
done
if grep -q "job " "$dir/worker0.log" && grep -q "job " "$dir/worker1.log"; then
  echo "PASS the cluster formed under the flood after $((SECONDS - start)) s"
  sleep 0.2
  pkill -KILL -P "$server0_pid"  # byteps-server itself, under its timeout
  kill -KILL "$server0_pid"
  echo "killed server 0 (pid $server0_pid) at $((SECONDS - start)) s"
else
  echo "FAIL the cluster did not form under the flood"; failures=$((failures + 1))
fi

expect_exit_0 worker0 worker1 server1 standby sched
wait "$server0_pid" 2>/dev/null
kill -TERM "$flood_pid" 2>/dev/null
wait "$flood_pid"
cat "$dir/flood.log"
for w in 0 1; do
  if grep -q "elements equal the reference sums" "$dir/worker$w.log"; then
    echo "PASS worker $w: exact sums"
  else
    echo "FAIL worker $w: no exact sums"; failures=$((failures + 1))
  fi
  if grep -q "server 0 replaced by" "$dir/worker$w.log"; then
    echo "PASS worker $w: $(grep -o "server 0 replaced by.*" "$dir/worker$w.log" | head -1)"
  else
    echo "FAIL worker $w: server 0 was not replaced by the standby"; failures=$((failures + 1))
  fi
done
# Every listener was flooded past its limit: it closed the connection that waited longest.
for f in scheduler server0 server1 standby; do
  n=$(grep -c "connections have not said hello yet (BYTEPS_MAX_PENDING_CONNECTIONS=$limit)" "$dir/$f.log")
  if ((n > 0)); then
    echo "PASS the $f's limit was full: it closed $n flood connection(s) for newcomers"
  else
    echo "FAIL the $f's limit was never full: the flood did not reach it"; failures=$((failures + 1))
  fi
done
retries=$(cat "$dir"/worker*.log "$dir"/server*.log "$dir"/standby.log | grep -cE "trying again in|saying it again")
echo "nodes that tried a listener again: $retries time(s)"
cat "$dir"/worker*.log "$dir"/server*.log "$dir"/standby.log | grep -E "trying again in|saying it again" | head -20
echo "took $((SECONDS - start)) s"
if ((failures)); then
  for f in scheduler server0 server1 standby worker0 worker1; do
    echo "--- $f (last 30 lines)"; tail -30 "$dir/$f.log"
  done
  exit 1
fi
echo "flood job: the flood filled every listener's limit, the job's sums exact, every process exited 0"
