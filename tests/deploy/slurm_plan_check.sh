#!/usr/bin/env bash
# byteps-slurm's plan without a Slurm: with Slurm's variables as an allocation sets them,
# `byteps-slurm --dry-run` prints every task's node, name and variables and the srun command.
# Each layout's plan is compared line by line with the expected one; then the errors.
#   slurm_plan_check.sh BYTEPS_SLURM
set -uo pipefail
slurm=${1:?usage: slurm_plan_check.sh BYTEPS_SLURM}
failures=0
cases=0

# expect NAME ENV-ASSIGNMENTS... -- ARGS... <<< EXPECTED: the dry run's stdout (without the
# srun command line) must equal EXPECTED.
expect() {
  local name=$1
  shift
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local want got
  want=$(cat)
  got=$(env -i PATH="$PATH" "${envs[@]}" "$slurm" --dry-run "$@" -- /bin/prog arg 2>/dev/null | grep -v '^command: ')
  cases=$((cases + 1))
  if [[ $got != "$want" ]]; then
    echo "FAIL: $name"
    diff <(echo "$want") <(echo "$got") | sed 's/^/  /'
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

# expect_error NAME MESSAGE-PART ENV-ASSIGNMENTS... -- ARGS...: exit 2, MESSAGE-PART on stderr.
expect_error() {
  local name=$1 part=$2
  shift 2
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local err rc=0
  err=$(env -i PATH="$PATH" "${envs[@]}" "$slurm" --dry-run "$@" 2>&1 >/dev/null) || rc=$?
  cases=$((cases + 1))
  if ((rc != 2)) || [[ $err != *"$part"* ]]; then
    echo "FAIL: $name: exit $rc, stderr: $err (expected exit 2 and '$part')"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

alloc=(SLURM_JOB_ID=7 SLURM_JOB_NUM_NODES=2 SLURM_JOB_NODELIST='node[1-2]' SLURM_TASKS_PER_NODE='2(x2)')

expect "colocated (default): 2 nodes x 2 tasks, a server on each node" "${alloc[@]}" -- --root-uri 10.0.0.1 <<'EOF'
every task: DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=2 DMLC_PS_ROOT_URI=10.0.0.1 DMLC_PS_ROOT_PORT=20007
task 0 on node1: scheduler: DMLC_ROLE=scheduler
task 1 on node1: server 0: DMLC_ROLE=server BYTEPS_SERVER_ID=0
task 2 on node1: worker 0.0: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=2
task 3 on node1: worker 0.1: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=1 BYTEPS_LOCAL_SIZE=2
task 4 on node2: server 1: DMLC_ROLE=server BYTEPS_SERVER_ID=1
task 5 on node2: worker 1.0: DMLC_ROLE=worker DMLC_WORKER_ID=1 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=2
task 6 on node2: worker 1.1: DMLC_ROLE=worker DMLC_WORKER_ID=1 BYTEPS_LOCAL_RANK=1 BYTEPS_LOCAL_SIZE=2
EOF

expect "separate CPU servers: 4 nodes, the last 2 run 2 servers each; DMLC_PS_ROOT_PORT kept" \
  SLURM_JOB_ID=8 SLURM_JOB_NODELIST='gpu[07-08],cpu[1,3]' SLURM_NTASKS_PER_NODE=1 DMLC_PS_ROOT_PORT=9000 \
  -- --root-uri 10.0.0.1 --server-nodes 2 --servers-per-node 2 <<'EOF'
every task: DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=4 DMLC_PS_ROOT_URI=10.0.0.1 DMLC_PS_ROOT_PORT=9000
task 0 on gpu07: scheduler: DMLC_ROLE=scheduler
task 1 on gpu07: worker 0: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=1
task 2 on gpu08: worker 1: DMLC_ROLE=worker DMLC_WORKER_ID=1 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=1
task 3 on cpu1: server 0: DMLC_ROLE=server BYTEPS_SERVER_ID=0
task 4 on cpu1: server 1: DMLC_ROLE=server BYTEPS_SERVER_ID=1
task 5 on cpu3: server 2: DMLC_ROLE=server BYTEPS_SERVER_ID=2
task 6 on cpu3: server 3: DMLC_ROLE=server BYTEPS_SERVER_ID=3
EOF

expect "mixed mode: colocated ranks 0..n-1, CPU servers after them; --interface sets DMLC_NODE_HOST" \
  SLURM_JOB_ID=20009 SLURM_JOB_NODELIST='r[1-2]-n[01-02]' SLURM_TASKS_PER_NODE='3,1,1,2' \
  -- --root-uri 10.0.0.1 --server-nodes 1 --mixed --interface ib0 --port 29500 <<'EOF'
every task: DMLC_NUM_WORKER=3 DMLC_NUM_SERVER=4 DMLC_PS_ROOT_URI=10.0.0.1 DMLC_PS_ROOT_PORT=29500 BYTEPS_ENABLE_MIXED_MODE=1
task 0 on r1-n01: scheduler: DMLC_ROLE=scheduler
task 1 on r1-n01: server 0: DMLC_ROLE=server BYTEPS_SERVER_ID=0 DMLC_NODE_HOST=<IPv4 of ib0>
task 2 on r1-n01: worker 0.0: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=3
task 3 on r1-n01: worker 0.1: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=1 BYTEPS_LOCAL_SIZE=3
task 4 on r1-n01: worker 0.2: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=2 BYTEPS_LOCAL_SIZE=3
task 5 on r1-n02: server 1: DMLC_ROLE=server BYTEPS_SERVER_ID=1 DMLC_NODE_HOST=<IPv4 of ib0>
task 6 on r1-n02: worker 1.0: DMLC_ROLE=worker DMLC_WORKER_ID=1 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=1
task 7 on r2-n01: server 2: DMLC_ROLE=server BYTEPS_SERVER_ID=2 DMLC_NODE_HOST=<IPv4 of ib0>
task 8 on r2-n01: worker 2.0: DMLC_ROLE=worker DMLC_WORKER_ID=2 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=1
task 9 on r2-n02: server 3: DMLC_ROLE=server BYTEPS_SERVER_ID=3 DMLC_NODE_HOST=<IPv4 of ib0>
EOF

expect "standbys: placed on the server nodes in turn; failover switched on" \
  SLURM_JOB_ID=3 SLURM_JOB_NODELIST='a,b,c' SLURM_TASKS_PER_NODE='1(x3)' \
  -- --root-uri 10.0.0.1 --server-nodes 1 --standby-servers 2 --workers-per-node 2 <<'EOF'
every task: DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=1 DMLC_PS_ROOT_URI=10.0.0.1 DMLC_PS_ROOT_PORT=20003 BYTEPS_FAILOVER_TIMEOUT_MS=30000
task 0 on a: scheduler: DMLC_ROLE=scheduler
task 1 on a: worker 0.0: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=2
task 2 on a: worker 0.1: DMLC_ROLE=worker DMLC_WORKER_ID=0 BYTEPS_LOCAL_RANK=1 BYTEPS_LOCAL_SIZE=2
task 3 on b: worker 1.0: DMLC_ROLE=worker DMLC_WORKER_ID=1 BYTEPS_LOCAL_RANK=0 BYTEPS_LOCAL_SIZE=2
task 4 on b: worker 1.1: DMLC_ROLE=worker DMLC_WORKER_ID=1 BYTEPS_LOCAL_RANK=1 BYTEPS_LOCAL_SIZE=2
task 5 on c: server 0: DMLC_ROLE=server BYTEPS_SERVER_ID=0
task 6 on c: standby 0: DMLC_ROLE=server BYTEPS_SERVER_STANDBY=1
task 7 on c: standby 1: DMLC_ROLE=server BYTEPS_SERVER_STANDBY=1
EOF

# The srun command: one step, arbitrary distribution from SLURM_HOSTFILE, killed on a bad exit.
cases=$((cases + 1))
cmd=$(env -i PATH="$PATH" "${alloc[@]}" "$slurm" --dry-run --root-uri 10.0.0.1 --server-bin /opt/bps/byteps-server --srun-arg=--cpu-bind=none -- /bin/prog arg 2>/dev/null | sed -n 's/^command: //p')
want="srun --nodes=2 --ntasks=7 --distribution=arbitrary --overcommit --kill-on-bad-exit=1 --export=ALL --cpu-bind=none "
if [[ $cmd == "$want"*"/byteps-slurm --task --plan scheduler\\ server:0:0\\ worker:0:0:2\\ worker:0:1:2\\ server:1:1\\ worker:1:0:2\\ worker:1:1:2 --server-bin /opt/bps/byteps-server -- /bin/prog arg" ]]; then
  echo "ok: the srun command"
else
  echo "FAIL: the srun command: $cmd"
  failures=$((failures + 1))
fi

expect_error "outside an allocation" "run byteps-slurm inside an sbatch script or an salloc" -- --root-uri 10.0.0.1 -- /bin/prog
expect_error "--mixed without server nodes" "--mixed needs --server-nodes >= 1" "${alloc[@]}" -- --root-uri 10.0.0.1 --mixed -- /bin/prog
expect_error "no worker node left" "--server-nodes 2 leaves no worker node: the allocation has 2 node(s)" "${alloc[@]}" -- --root-uri 10.0.0.1 --server-nodes 2 -- /bin/prog
expect_error "task counts that do not match the nodes" "SLURM_TASKS_PER_NODE '2,1,1' gives 3 counts for 2 nodes" \
  SLURM_JOB_ID=7 SLURM_JOB_NODELIST='node[1-2]' SLURM_TASKS_PER_NODE='2,1,1' -- --root-uri 10.0.0.1 -- /bin/prog
expect_error "a first node that resolves only to loopback" "the first node 'localhost' resolves to no IPv4 address other than loopback" \
  SLURM_JOB_ID=7 SLURM_JOB_NODELIST='localhost' SLURM_TASKS_PER_NODE='1' -- -- /bin/prog
expect_error "no program" "no program given" "${alloc[@]}" -- --root-uri 10.0.0.1
expect_error "an unknown option" "unknown option '--nodes'" "${alloc[@]}" -- --nodes 3 -- /bin/prog

echo "byteps-slurm plans: $((cases - failures)) of $cases cases as expected"
((failures == 0))
