#!/usr/bin/env bash
# The fault matrix: SIGKILL and SIGSTOP of each role (scheduler, server, worker) while the
# cluster forms, while workers push_pull, and while they are idle. Every other process must
# exit non-zero within twice BYTEPS_HEARTBEAT_TIMEOUT_MS, every worker must have failed in the
# case's phase (fault_worker says what it was doing), every other process's last word (the error
# it exits with) must name the failed node ("the scheduler", "server 0", "worker 0"; a stopped
# one as having stopped responding), and no process may be left behind.
#   fault_matrix.sh BYTEPS_SERVER FAULT_WORKER [ROLE SIGNAL PHASE]   (one case, or all 18)
set -uo pipefail

server_bin=${1:?usage: fault_matrix.sh BYTEPS_SERVER FAULT_WORKER [ROLE SIGNAL PHASE]}
worker_bin=${2:?usage: fault_matrix.sh BYTEPS_SERVER FAULT_WORKER [ROLE SIGNAL PHASE]}
shift 2

export BYTEPS_HEARTBEAT_INTERVAL_MS=200 BYTEPS_HEARTBEAT_TIMEOUT_MS=1000
export BYTEPS_CONNECT_TIMEOUT_MS=5000 BYTEPS_RENDEZVOUS_TIMEOUT_MS=30000 BYTEPS_OP_TIMEOUT_MS=30000
export BYTEPS_LOG_LEVEL=ERROR DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=2 DMLC_PS_ROOT_URI=127.0.0.1
limit_ms=$((2 * BYTEPS_HEARTBEAT_TIMEOUT_MS))

work=$(mktemp -d)
declare -A pid=()
cleanup() {
  for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }

start() {  # start NAME ROLE ID [MODE]
  local name=$1 role=$2
  if [[ $role == worker ]]; then
    DMLC_ROLE=worker DMLC_WORKER_ID=$3 "$worker_bin" "$4" >"$work/$name.out" 2>"$work/$name.err" &
  else  # servers ask for their rank, so that messages name the victim's before ranks are given
    DMLC_ROLE=$role BYTEPS_SERVER_ID=$3 "$server_bin" >"$work/$name.out" 2>"$work/$name.err" &
  fi
  pid[$name]=$!
}

run_case() {  # run_case ROLE SIGNAL PHASE; prints one line; returns 0 when the case passed
  local role=$1 sig=$2 phase=$3
  pid=()
  rm -f "$work"/*
  # INFO: its "joined" lines tell when the cluster-forming case may strike.
  DMLC_ROLE=scheduler DMLC_PS_ROOT_PORT=0 BYTEPS_LOG_LEVEL=INFO "$server_bin" \
    --port-file "$work/port" >"$work/scheduler.out" 2>"$work/scheduler.err" &
  pid[scheduler]=$!
  for _ in $(seq 100); do [[ -s $work/port ]] && break; sleep 0.05; done
  [[ -s $work/port ]] || { echo "FAIL $role $sig $phase: the scheduler wrote no port"; return 1; }
  export DMLC_PS_ROOT_PORT
  DMLC_PS_ROOT_PORT=$(<"$work/port")

  local mode=idle
  [[ $phase == push_pull ]] && mode=busy
  start server0 server 0
  start server1 server 1
  start worker0 worker 0 "$mode"
  if [[ $phase == rendezvous ]]; then
    # Worker 1 never comes: the cluster is still forming when the fault hits, once the other
    # three have joined (a fixed sleep was not always enough for three sanitized processes).
    local joined=0
    for _ in $(seq 600); do
      joined=$(cat "$work"/scheduler.out "$work"/scheduler.err 2>/dev/null | grep -c " joined (")
      ((joined >= 3)) && break
      sleep 0.05
    done
    ((joined >= 3)) ||
      { echo "FAIL $role $sig $phase: $joined of server0, server1, worker0 joined within 30 s"; return 1; }
  else
    start worker1 worker 1 "$mode"
    # Both workers ready, and when busy both past their first push_pull: the fault then strikes
    # in the phase the case names, not while the cluster still forms.
    local want=ready
    [[ $mode == busy ]] && want="round 1"
    local w both=0
    for _ in $(seq 600); do
      both=1
      for w in worker0 worker1; do grep -q "^$want" "$work/$w.out" 2>/dev/null || both=0; done
      ((both)) && break
      sleep 0.05
    done
    ((both)) || { echo "FAIL $role $sig $phase: the workers did not both print '$want' within 30 s"; return 1; }
    sleep 0.3
  fi

  local victim
  case $role in scheduler) victim=scheduler ;; server) victim=server0 ;; worker) victim=worker0 ;; esac
  kill "-$sig" "${pid[$victim]}"
  local t0 verdict=ok detail=""
  t0=$(now_ms)
  for name in "${!pid[@]}"; do
    [[ $name == "$victim" ]] && continue
    while kill -0 "${pid[$name]}" 2>/dev/null && (($(now_ms) - t0 < limit_ms)); do sleep 0.02; done
    if kill -0 "${pid[$name]}" 2>/dev/null; then
      verdict=FAIL
      detail+=" $name still running after ${limit_ms} ms;"
      kill -KILL "${pid[$name]}"
    fi
    wait "${pid[$name]}"
    local code=$?
    if ((code == 0)); then
      verdict=FAIL
      detail+=" $name exited 0;"
    fi
  done
  local took=$(($(now_ms) - t0))
  kill -KILL "${pid[$victim]}" 2>/dev/null  # a stopped victim cannot exit by itself
  wait "${pid[$victim]}" 2>/dev/null
  for name in "${!pid[@]}"; do
    if kill -0 "${pid[$name]}" 2>/dev/null; then verdict=FAIL; detail+=" $name left behind;"; fi
  done
  # byteps names its shared memory /dev/shm/bps-*: ipc rings carry their creator's pid (other
  # tests running at the same time have their own), and nothing else here makes any.
  for name in "${!pid[@]}"; do
    if compgen -G "/dev/shm/bps-ipc-${pid[$name]}-*" >/dev/null; then
      verdict=FAIL
      detail+=" shared memory of $name left;"
    fi
  done
  # Each worker says it failed in this phase.
  local doing
  case $phase in rendezvous) doing=joining ;; push_pull) doing="push_pull round" ;; idle) doing=idle ;; esac
  for name in "${!pid[@]}"; do
    if [[ $name != "$victim" && $name == worker* ]] && ! grep -q "^fault_worker: $doing" "$work/$name.err"; then
      verdict=FAIL
      detail+=" $name did not fail while $doing ($(grep -o '^fault_worker: [^:]*' "$work/$name.err"));"
    fi
  done
  # Each other process's last word names the failed node, not one that fell after it: the
  # victim's role and rank (it is server 0 or worker 0; servers ask for theirs), and for a stopped
  # one that it stopped responding (heartbeats). Its error lines are printed when it does not.
  local failed_node lines last
  case $role in scheduler) failed_node="the scheduler" ;; *) failed_node="$role 0" ;; esac
  local -a blame=()
  for name in "${!pid[@]}"; do
    [[ $name == "$victim" ]] && continue
    last=$(grep -hE '^(fault_worker|byteps-server): ' "$work/$name.err" | tail -1)
    if ! grep -qE "(^|[^[:alnum:]])$failed_node([^[:alnum:]]|$)" <<<"$last" ||
      { [[ $sig == STOP ]] && ! grep -q "stopped responding" <<<"$last"; }; then
      verdict=FAIL
      if [[ -z $last ]]; then
        detail+=" $name exited with no error message;"
      else
        detail+=" $name's error does not name $failed_node$([[ $sig == STOP ]] && echo ' as stopped responding');"
      fi
      lines=$(grep -hE ' ERROR |^(fault_worker|byteps-server): ' "$work/$name.err" | cut -c1-400)
      blame+=("    $name: ${lines//$'\n'/$'\n'    $name: }")
    fi
  done
  local why
  why=$(grep -h -m1 -o "fault_worker: .*" "$work"/worker*.err 2>/dev/null | head -1 | cut -c1-150)
  printf '%-4s %-9s %-4s %-10s all others exited non-zero in %4d ms%s  %s\n' \
    "$verdict" "$role" "$sig" "$phase" "$took" "$detail" "$why"
  ((${#blame[@]} == 0)) || printf '%s\n' "${blame[@]}"
  [[ $verdict == ok ]]
}

failed=0
cases=18
if (($# == 3)); then
  cases=1
  run_case "$1" "$2" "$3" || failed=1
else
  for role in scheduler server worker; do
    for sig in KILL STOP; do
      for phase in rendezvous push_pull idle; do
        run_case "$role" "$sig" "$phase" || failed=$((failed + 1))
      done
    done
  done
fi
echo "fault matrix: $((cases - failed)) passed, $failed failed (limit ${limit_ms} ms)"
exit $((failed > 0))
