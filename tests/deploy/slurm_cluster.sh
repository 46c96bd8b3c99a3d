#!/usr/bin/env bash
# A real Slurm (Debian's slurm-wlm, with munge) on this one machine, as a cluster of several
# nodes: a head node running slurmctld and NODES compute nodes running slurmd, each in its own
# network namespace and hostname (UTS) namespace, with its own /etc/hosts (in its own mount
# namespace) and its own spool directory, joined by a bridge in a "switch" namespace on
# 10.213.0.0/24. Every namespace is held by a process of this script (no `ip netns add`), so
# when the processes are gone the namespaces, veths and mounts are gone too, also after a SIGKILL
# (the test sandbox kills whatever still carries its BYTEPS_TEST_SANDBOX).
#
#   slurm_cluster.sh test BYTEPS_SLURM SERVER_BIN TRAIN_MLP [TRAIN_ARGS...]
#     The CTest test. Three compute nodes. Job A (sbatch -N3 --ntasks-per-node=2):
#     byteps-slurm --server-nodes 1 --mixed --interface eth0 runs the main job (train_mlp) on 2
#     worker nodes x 2 processes, with a colocated server on each and a CPU server on node2;
#     every worker must print the main job's OK lines. Job B (sbatch -N2 --ntasks-per-node=1,
#     colocated servers): worker 1's trainer is SIGKILLed mid-run; the job must fail, with
#     byteps-slurm's message naming worker 1 and its Slurm task, and srun's.
#   C. elastic training (BYTEPS_MIN_NUM_WORKER=1), 2 worker nodes and a server node: node1 is
#     killed whole mid-run (slurmd and every process of the step there); the step must go on
#     (srun --no-kill) and the job complete with the scheduler's status 0, worker 0 finishing.
#   slurm_cluster.sh shell [NODES]
#     Starts the cluster (default 2 compute nodes) and opens a shell on the head node with
#     SLURM_CONF set (sinfo, sbatch, srun work there); the cluster is removed when it exits.
#
# Needs root, unshare/nsenter, ip (iproute2) and the slurm-wlm and munge packages; without them
# it exits 77 (a skip to CTest) and says what is missing. With them, a set-up that fails (a
# namespace, the bridge) is a failure, not a skip. Every wait has a deadline.
set -uo pipefail

usage="usage: slurm_cluster.sh test BYTEPS_SLURM SERVER_BIN TRAIN_MLP [TRAIN_ARGS...] | slurm_cluster.sh shell [NODES]"
mode=${1:?$usage}
shift
case $mode in
  test)
    byteps_slurm=${1:?$usage}
    server_bin=${2:?$usage}
    train=${3:?$usage}
    shift 3
    train_args=("$@")
    num_nodes=3
    ;;
  shell) num_nodes=${1:-2} ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
[[ $num_nodes =~ ^[1-9]$ ]] || { echo "NODES must be 1 .. 9" >&2; exit 2; }

skip() {
  echo "SKIPPED: $*"
  exit 77
}
((EUID == 0)) || skip "needs root (network, UTS and mount namespaces, and Slurm's daemons)"
for tool in unshare nsenter ip munged mungekey slurmctld slurmd sbatch srun sinfo scontrol; do
  command -v "$tool" >/dev/null 2>&1 ||
    PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null 2>&1 ||
    skip "'$tool' not found (scripts/install-deps.sh installs slurm-wlm, munge and iproute2)"
done
export PATH=$PATH:/usr/sbin:/sbin

work=$(mktemp -d "${TMPDIR:-/tmp}/byteps-slurm-test.XXXXXX")
chmod 755 "$work" # munged wants every folder above its socket searchable by all
holders=()        # pids of the processes that hold the namespaces
munged_pid=
names=(head)
for ((i = 0; i < num_nodes; i++)); do names+=("node$i"); done
declare -A holder_of addr_of
addr_of[head]=10.213.0.1
for ((i = 0; i < num_nodes; i++)); do addr_of[node$i]=10.213.0.$((10 + i)); done

# Every process in one of our namespaces: the daemons, slurmstepd and every task.
processes_in_our_namespaces() {
  local h ns pid
  declare -A ours=()
  for h in "${holders[@]}"; do
    ns=$(readlink "/proc/$h/ns/net" 2>/dev/null) && ours[$ns]=1
  done
  ((${#ours[@]} > 0)) || return 0
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    ns=$(readlink "/proc/$pid/ns/net" 2>/dev/null) || continue
    [[ -n ${ours[$ns]:-} ]] && echo "$pid"
  done
}

# shellcheck disable=SC2317 # runs from the trap
cleanup() {
  local rc=$? pids deadline
  trap - EXIT INT TERM HUP
  pids=$(processes_in_our_namespaces)
  # shellcheck disable=SC2086
  [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
  [[ -n $munged_pid ]] && kill -TERM "$munged_pid" 2>/dev/null
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)); do
    pids=$(processes_in_our_namespaces)
    [[ -z $pids ]] && ! { [[ -n $munged_pid ]] && kill -0 "$munged_pid" 2>/dev/null; } && break
    # shellcheck disable=SC2086
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
    sleep 0.1
  done
  [[ -n $munged_pid ]] && kill -KILL "$munged_pid" 2>/dev/null
  for h in "${holders[@]}"; do wait "$h" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf -- "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

fail() {
  echo "FAIL: $*"
  local f
  for f in "$work"/log/*.log "$work"/job-*.out; do
    [[ -f $f ]] || continue
    echo "---- last lines of $(basename "$f")"
    tail -30 "$f"
  done
  exit 1
}

# ---- namespaces ---------------------------------------------------------------------------
printf '127.0.0.1 localhost\n' >"$work/hosts"
for n in "${names[@]}"; do printf '%s %s\n' "${addr_of[$n]}" "$n" >>"$work/hosts"; done
mkdir -p "$work/ready" "$work/log"

# hold NAME [unshare flags]: a process that keeps NAME's namespaces; prints its pid.
hold() {
  local name=$1
  shift
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
  unshare "$@" sh -c '
    if [ "$1" != switch ]; then
      hostname "$1" && mount --bind "$2/hosts" /etc/hosts || exit 1
    fi
    : >"$2/ready/$1"
    exec sleep 100000' sh "$name" "$work" </dev/null >>"$work/log/namespaces.log" 2>&1 &
  echo $!
}
switch=$(hold switch --net)
holders+=("$switch")
for n in "${names[@]}"; do
  holder_of[$n]=$(hold "$n" --net --uts --mount --propagation private)
  holders+=("${holder_of[$n]}")
done
deadline=$((SECONDS + 20))
for n in switch "${names[@]}"; do
  until [[ -e $work/ready/$n ]]; do
    ((SECONDS < deadline)) || fail "the namespaces of $n were not ready in 20 s (unshare, hostname or mount failed)"
    for h in "${holders[@]}"; do
      kill -0 "$h" 2>/dev/null || fail "a namespace holder died: $(tail -1 "$work/log/namespaces.log")"
    done
    sleep 0.05
  done
done

# on NAME COMMAND...: runs COMMAND in node NAME's namespaces (network, hostname, mount).
on() {
  local name=$1
  shift
  nsenter -t "${holder_of[$name]}" --net --uts --mount --wd="$PWD" "$@"
}
in_switch() { nsenter -t "$switch" --net "$@"; }

in_switch ip link add br0 type bridge || fail "cannot make a bridge in the switch's network namespace"
in_switch ip link set br0 up
i=0
for n in "${names[@]}"; do
  in_switch ip link add "v$i" type veth peer name eth0 netns "${holder_of[$n]}" ||
    fail "cannot make the veth pair of $n"
  in_switch ip link set "v$i" master br0 up
  on "$n" ip addr add "${addr_of[$n]}/24" dev eth0
  on "$n" ip link set eth0 up
  on "$n" ip link set lo up
  i=$((i + 1))
done

# ---- munge and Slurm ----------------------------------------------------------------------
mkdir -p "$work/munge-key" "$work/munge-run" "$work/state"
chmod 700 "$work/munge-key"
chmod 755 "$work/munge-run"
mungekey --create --keyfile="$work/munge-key/munge.key" >/dev/null 2>&1 || fail "mungekey failed"
# A private munged: its own key and socket; the daemons and commands find it through AuthInfo.
munged --foreground --force --socket="$work/munge-run/socket" --key-file="$work/munge-key/munge.key" \
  --pid-file="$work/munge-run/munged.pid" --log-file="$work/log/munged.log" \
  --seed-file="$work/munge-key/seed" </dev/null >/dev/null 2>&1 &
munged_pid=$!
deadline=$((SECONDS + 10))
until [[ -S $work/munge-run/socket ]]; do
  kill -0 "$munged_pid" 2>/dev/null || fail "munged exited: $(tail -3 "$work/log/munged.log")"
  ((SECONDS < deadline)) || fail "munged made no socket in 10 s"
  sleep 0.05
done

conf=$work/slurm.conf
{
  cat <<EOF
ClusterName=byteps
SlurmctldHost=head(${addr_of[head]})
AuthType=auth/munge
AuthInfo=socket=$work/munge-run/socket
CredType=cred/munge
SlurmUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/spool/%n/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
# A node whose slurmd is gone is DOWN after 10 s (job C), not the default 300 s.
SlurmdTimeout=10
EOF
  for ((i = 0; i < num_nodes; i++)); do
    echo "NodeName=node$i NodeAddr=${addr_of[node$i]} CPUs=8 State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=30 State=UP"
} >"$conf"
export SLURM_CONF=$conf

on head slurmctld -D -f "$conf" </dev/null >"$work/log/slurmctld.out.log" 2>&1 &
for ((i = 0; i < num_nodes; i++)); do
  mkdir -p "$work/spool/node$i"
  on "node$i" slurmd -D -N "node$i" -f "$conf" </dev/null >"$work/log/slurmd-node$i.out.log" 2>&1 &
done

# Wait (at most 60 s) for every node to be idle.
deadline=$((SECONDS + 60))
while :; do
  state=$(on head sinfo -h -N -o '%N %T' 2>/dev/null | sort)
  idle=$(grep -c ' idle$' <<<"$state")
  ((idle == num_nodes)) && break
  ((SECONDS < deadline)) || fail "the Slurm nodes were not idle within 60 s: ${state//$'\n'/, }"
  sleep 0.2
done
echo "slurm: slurmctld on head (${addr_of[head]}), slurmd on $(for ((i = 0; i < num_nodes; i++)); do
  printf '%s ' "node$i (${addr_of[node$i]})"
done)- all idle after $SECONDS s"
on head sinfo -N -o '%N %T %c' | sed 's/^/slurm: sinfo: /'

if [[ $mode == shell ]]; then
  echo "A shell on the head node: sinfo, sbatch, srun and scontrol use SLURM_CONF=$conf."
  echo "Every node sees this machine's file system; the cluster's own files are in $work."
  echo "Leave the shell to stop the cluster."
  on head env PS1='slurm-head$ ' bash --norc -i
  exit 0
fi

# ---- the jobs ----------------------------------------------------------------------------
# job_state ID: "STATE EXITCODE" of a job (scontrol keeps finished jobs for MinJobAge, 300 s).
job_state() {
  on head scontrol -o show job "$1" 2>/dev/null |
    sed -n 's/.*JobState=\([A-Z_]*\).*ExitCode=\([0-9:]*\).*/\1 \2/p'
}
# wait_job ID SECONDS: waits for the job to end; sets result to its final "STATE EXITCODE".
# (Not run in a command substitution, so that a signal to this script acts at once.)
wait_job() {
  local id=$1 limit=$2 s
  local end=$((SECONDS + limit))
  while :; do
    s=$(job_state "$id")
    case ${s%% *} in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        result=$s
        return 0
        ;;
    esac
    if ((SECONDS >= end)); then
      on head scancel "$id" 2>/dev/null
      result="still ${s:-unknown}"
      return 1
    fi
    sleep 0.2
  done
}
# submit JOB_SCRIPT SBATCH_ARGS...: prints the job id. The job's TMPDIR (byteps-slurm's host
# file) is in the work folder, which the cleanup removes even when it had to SIGKILL the job.
mkdir -p "$work/tmp"
submit() {
  local script=$1
  shift
  on head env TMPDIR="$work/tmp" sbatch --parsable -o "$work/job-%j.out" "$@" "$script" | cut -d';' -f1
}

cat >"$work/job-a.sh" <<EOF
#!/bin/bash
# The main job: 2 worker nodes x 2 processes, a colocated server on each, a CPU server on the
# third node; mixed mode; byteps on eth0.
export BYTEPS_LOG_LEVEL=INFO
exec $(printf '%q' "$byteps_slurm") --server-bin $(printf '%q' "$server_bin") --server-nodes 1 --mixed --interface eth0 \\
  -- $(printf '%q ' "$train" "${train_args[@]}")
EOF
t0=$SECONDS
job_a=$(submit "$work/job-a.sh" -N 3 --ntasks-per-node=2 -J byteps-main) || fail "sbatch refused job A"
[[ $job_a =~ ^[0-9]+$ ]] || fail "sbatch printed no job id for job A: '$job_a'"
wait_job "$job_a" 180 || fail "job A did not end within 180 s ($result)"
out_a=$work/job-$job_a.out
echo "---- job A ($job_a): sbatch -N 3 --ntasks-per-node=2, byteps-slurm --server-nodes 1 --mixed --interface eth0: $result after $((SECONDS - t0)) s"
grep -E '^byteps-slurm|cluster formed|\[worker 0.0\] (training|epoch [0-9]+/[0-9]+ )|OK |FAILED' "$out_a" |
  grep -vE 'epoch ([2-9]|1[0-9])/' | sed 's/^/job A: /'
[[ $result == "COMPLETED 0:0" ]] || fail "job A ended $result, expected COMPLETED 0:0"
for w in 0.0 0.1 1.0 1.1; do
  grep -qF "[worker $w] OK parameters equal rank 0's bit for bit" "$out_a" ||
    fail "worker $w did not print 'OK parameters equal rank 0's bit for bit'"
  grep -qE "^\[worker $w\] OK max relative difference to the single-process reference [0-9.e+-]+ \(limit 1e-05\)$" "$out_a" ||
    fail "worker $w did not print 'OK max relative difference ... (limit 1e-05)'"
  grep -qE "^\[worker $w\] OK loss fell from " "$out_a" || fail "worker $w did not print 'OK loss fell'"
done
! grep -q 'FAILED' "$out_a" || fail "job A printed FAILED"
grep -qF "scheduler: cluster formed: 4 worker processes on 2 machines, 3 servers" "$out_a" ||
  fail "the scheduler did not report 4 worker processes on 2 machines and 3 servers"
grep -qF "byteps-slurm:   node2: server 2 (rank 2)" "$out_a" || fail "the CPU server was not placed on node2"
grep -qF "byteps-slurm: all 8 processes exited 0" "$out_a" || fail "byteps-slurm did not report 8 processes exiting 0"
# Where each process ran, as each task saw it (its hostname is its Slurm node's), and the
# variables byteps-slurm gave it.
for line in "task 0 on node0: scheduler: DMLC_ROLE=scheduler" \
  "task 1 on node0: server 0: DMLC_ROLE=server BYTEPS_SERVER_ID=0 DMLC_NODE_HOST=10.213.0.10" \
  "task 3 on node0: worker 0.1: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=1 BYTEPS_LOCAL_SIZE=2" \
  "task 4 on node1: server 1: DMLC_ROLE=server BYTEPS_SERVER_ID=1 DMLC_NODE_HOST=10.213.0.11" \
  "task 5 on node1: worker 1.0: DMLC_ROLE=worker DMLC_WORKER_ID=1 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=2" \
  "task 7 on node2: server 2: DMLC_ROLE=server BYTEPS_SERVER_ID=2 DMLC_NODE_HOST=10.213.0.12"; do
  grep -qxF "byteps-slurm: $line" "$out_a" || fail "job A: no line 'byteps-slurm: $line'"
done

# Job B: worker 1's trainer is killed mid-run.
cat >"$work/job-b.sh" <<EOF
#!/bin/bash
export BYTEPS_LOG_LEVEL=WARNING
exec $(printf '%q' "$byteps_slurm") --server-bin $(printf '%q' "$server_bin") \\
  -- $(printf '%q ' "$train") --model small --epochs 100000
EOF
t0=$SECONDS
job_b=$(submit "$work/job-b.sh" -N 2 --ntasks-per-node=1 -J byteps-kill) || fail "sbatch refused job B"
[[ $job_b =~ ^[0-9]+$ ]] || fail "sbatch printed no job id for job B: '$job_b'"
out_b=$work/job-$job_b.out
victim=
deadline=$((SECONDS + 120))
until [[ -n $victim ]]; do
  ((SECONDS < deadline)) || fail "job B never reached epoch 3 with worker 1 running (120 s)"
  if [[ -f $out_b ]] && grep -q '^\[worker 0\] epoch 3/' "$out_b"; then
    for p in $(processes_in_our_namespaces); do
      [[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$(readlink -f "$train")" ]] || continue
      envs=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
      grep -qx "SLURM_JOB_ID=$job_b" <<<"$envs" && grep -qx 'DMLC_ROLE=worker' <<<"$envs" &&
        grep -qx 'DMLC_WORKER_ID=1' <<<"$envs" && victim=$p && victim_task=$(sed -n 's/^SLURM_PROCID=//p' <<<"$envs")
    done
  fi
  s=$(job_state "$job_b")
  [[ -z $victim && ${s%% *} != RUNNING && ${s%% *} != PENDING && -n $s ]] && fail "job B ended before the kill: $s"
  sleep 0.1
done
kill -KILL "$victim"
wait_job "$job_b" 120 || fail "job B did not end within 120 s of the kill ($result)"
echo "---- job B ($job_b): sbatch -N 2 --ntasks-per-node=1, byteps-slurm (colocated servers); worker 1's trainer (pid $victim, Slurm task $victim_task) SIGKILLed: $result after $((SECONDS - t0)) s"
grep -E '^byteps-slurm|^srun: error|killed|\[(scheduler|server [0-9]|worker [0-9])\].*(ERROR|error)' "$out_b" |
  head -20 | sed 's/^/job B: /'
[[ $result == FAILED\ * ]] || fail "job B ended $result, expected FAILED"
grep -qF "byteps-slurm: worker 1 (Slurm task $victim_task on node1) exited with code 137 (killed by SIGKILL); the job step ends" "$out_b" ||
  fail "byteps-slurm did not name worker 1 (Slurm task $victim_task on node1) as killed by SIGKILL"
grep -qE "^srun: error: node1: task $victim_task: Exited with exit code 137$" "$out_b" ||
  fail "srun did not report task $victim_task on node1 exiting with code 137"
grep -qF "byteps-slurm: the job step failed with exit code 137" "$out_b" ||
  fail "byteps-slurm did not end with the failed task's exit code 137"

# Job C: elastic training (BYTEPS_MIN_NUM_WORKER=1): node1, a worker node, is killed whole
# mid-run: every process in its namespaces, slurmd and the step's processes included. The step
# goes on (byteps-slurm runs srun --no-kill --kill-on-bad-exit=0; the allocation is sbatch
# --no-kill, so Slurm keeps the job when it finds node1 DOWN), the scheduler removes worker 1,
# and worker 0 finishes; the job's status is the scheduler's.
cat >"$work/job-c.sh" <<EOF
#!/bin/bash
export BYTEPS_LOG_LEVEL=INFO BYTEPS_MIN_NUM_WORKER=1
exec $(printf '%q' "$byteps_slurm") --server-bin $(printf '%q' "$server_bin") --server-nodes 1 \\
  -- $(printf '%q ' "$train") --model small --epochs 40
EOF
t0=$SECONDS
job_c=$(submit "$work/job-c.sh" -N 3 --ntasks-per-node=1 --no-kill -J byteps-elastic) || fail "sbatch refused job C"
[[ $job_c =~ ^[0-9]+$ ]] || fail "sbatch printed no job id for job C: '$job_c'"
out_c=$work/job-$job_c.out
deadline=$((SECONDS + 120))
until [[ -f $out_c ]] && grep -q '^\[worker 0\] epoch 3/' "$out_c"; do
  ((SECONDS < deadline)) || fail "job C never reached epoch 3 (120 s)"
  s=$(job_state "$job_c")
  [[ ${s%% *} != RUNNING && ${s%% *} != PENDING && -n $s ]] && fail "job C ended before the kill: $s"
  sleep 0.1
done
node1_ns=$(readlink "/proc/${holder_of[node1]}/ns/net") || fail "node1's namespace is gone"
killed=0
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  [[ $p == "${holder_of[node1]}" ]] && continue
  [[ $(readlink "/proc/$p/ns/net" 2>/dev/null) == "$node1_ns" ]] || continue
  kill -KILL "$p" 2>/dev/null && killed=$((killed + 1))
done
((killed > 0)) || fail "job C: nothing ran on node1 to kill"
wait_job "$job_c" 150 || fail "job C did not end within 150 s of killing node1 ($result)"
echo "---- job C ($job_c): sbatch -N 3 --ntasks-per-node=1, byteps-slurm --server-nodes 1, BYTEPS_MIN_NUM_WORKER=1; node1 killed whole ($killed processes): $result after $((SECONDS - t0)) s"
grep -E '^byteps-slurm: (the job step|all|worker)|^srun: error|removed from the job|\[worker 0\] (OK|FAILED|SKIPPED)' "$out_c" |
  head -20 | sed 's/^/job C: /'
[[ $result == "COMPLETED 0:0" ]] || fail "job C ended $result, expected COMPLETED 0:0 (the scheduler finished the job)"
grep -qE "^byteps-slurm: the job step ended with exit code [0-9]+; elastic training is on, and the scheduler exited 0$" "$out_c" ||
  fail "byteps-slurm did not take the scheduler's exit status 0 over the step's"
grep -qE "\[scheduler\].*worker 1 .*removed from the job; 1 worker machines go on" "$out_c" ||
  fail "the scheduler did not report removing worker 1"
grep -qF "[worker 0] OK loss fell" "$out_c" || fail "worker 0 did not report 'OK loss fell'"
grep -qF "[worker 0] OK parameters equal rank 0's bit for bit" "$out_c" ||
  fail "worker 0 did not finish its checks"
! grep -q 'FAILED' "$out_c" || fail "job C printed FAILED"
echo "ok: a real Slurm of $num_nodes nodes ran the main job (every worker bit-identical to rank 0 and within 1e-05 of the single-process reference), failed the step of a job whose worker was killed, naming it, and, with elastic training, finished a job whose worker node was killed whole"
