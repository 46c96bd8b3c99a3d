#!/usr/bin/env bash
# byteps-launch --worker-cpus: with split (the default) each worker process runs on its own
# share of the CPUs the launcher may use (byteps_plan.py cpu-shares cuts them; its unit tests
# cover the cutting) and a line says where each went; the scheduler, the servers and a lone
# worker are not bound. Every worker runs anywhere, and a line says why, with more worker
# processes than CPUs, with elastic training, or where taskset fails; with all, anywhere and
# no line. A bad mode is refused by name. Each process prints its own Cpus_allowed_list, then
# the job runs (push_pull_check, exact sums).
# Usage: worker_cpus_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK
set -uo pipefail
launch=${1:?usage: worker_cpus_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK}
check=${2:?usage: worker_cpus_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK}
work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Every process of a job says where it may run, then becomes what it was to be.
cat >"$work/where.sh" <<'EOF'
#!/usr/bin/env bash
grep '^Cpus_allowed_list:' /proc/self/status
exec "$@"
EOF
printf '#!/usr/bin/env bash\nexec %q %q "$@"\n' "$work/where.sh" \
  "$(dirname "$launch")/byteps-server" >"$work/server.sh"
chmod +x "$work/where.sh" "$work/server.sh"

read -r -a cpus <<<"$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
all_cpus=${cpus[*]}
shares() { python3 "$(dirname "$launch")/byteps_plan.py" cpu-shares --processes "$1"; }
can_bind=1
command -v taskset >/dev/null 2>&1 && taskset -c "${cpus[0]}" true 2>/dev/null || can_bind=0
echo "this machine lets us use ${#cpus[@]} CPUs: $all_cpus; taskset can bind: $can_bind"

# expanded LIST: "0-2,5" as "0 1 2 5".
expanded() {
  python3 -c '
import sys
out = []
for part in sys.argv[1].split(","):
    a, _, b = part.partition("-")
    out += range(int(a), int(b or a) + 1)
print(*out)' "$1"
}

# expect_cpus LOG NAME WANT: process NAME's line in LOG lists exactly the CPUs WANT.
expect_cpus() {
  local line got
  line=$(sed -n "s/^\[$2\] Cpus_allowed_list:[[:space:]]*//p" "$1")
  if [[ -z $line ]]; then
    fail "no Cpus_allowed_list line from [$2] in $1"
    return
  fi
  got=$(expanded "$line")
  [[ $got == "$3" ]] || fail "[$2] runs on CPUs '$got', expected '$3'"
  echo "[$2] on CPUs $got"
}

# expect_line LOG TEXT: LOG has the launcher's line TEXT, exactly.
expect_line() {
  grep -qxF -- "$2" "$1" || fail "no line '$2' in $1: $(grep '^byteps-launch:' "$1")"
}

# job NAME ARGS...: a short job of byteps-launch ARGS; its output in $work/NAME.log.
job() {
  local name=$1 status=0
  shift
  BYTEPS_LOG_LEVEL=WARNING "$launch" --servers 2 --timeout 120 --server-bin "$work/server.sh" \
    "$@" -- "$work/where.sh" "$check" --rounds 1 --max-elements 1000 >"$work/$name.log" 2>&1 ||
    status=$?
  ((status == 0)) || { fail "$name: byteps-launch $* exited $status"; tail -20 "$work/$name.log"; }
  for other in scheduler "server 0" "server 1"; do
    expect_cpus "$work/$name.log" "$other" "$all_cpus"
  done
}

unbound_line() {
  echo "byteps-launch: $1: every worker may run on any CPU (--worker-cpus all says so" \
    "without this line)"
}

# Two workers, split.
job split --workers 2
if ((${#cpus[@]} >= 2 && can_bind)); then
  mapfile -t want < <(shares 2)
  expect_cpus "$work/split.log" "worker 0" "$(expanded "${want[0]}")"
  expect_cpus "$work/split.log" "worker 1" "$(expanded "${want[1]}")"
  on() { [[ $2 == *[,-]* ]] && echo "worker $1 on CPUs $2" || echo "worker $1 on CPU $2"; }
  expect_line "$work/split.log" "byteps-launch: $(on 0 "${want[0]}"), $(on 1 "${want[1]}")$(
    ) (--worker-cpus all lets every worker run on any CPU)"
else
  expect_cpus "$work/split.log" "worker 0" "$all_cpus"
  expect_cpus "$work/split.log" "worker 1" "$all_cpus"
fi

# all: anywhere, and nothing said.
job all --workers 2 --worker-cpus all
expect_cpus "$work/all.log" "worker 0" "$all_cpus"
expect_cpus "$work/all.log" "worker 1" "$all_cpus"
! grep -q "^byteps-launch: worker 0 on\|every worker may run" "$work/all.log" ||
  fail "all: the launcher speaks of placing workers"

# One worker: nothing to split, nothing said.
job one --workers 1
expect_cpus "$work/one.log" "worker 0" "$all_cpus"
! grep -q "^byteps-launch: worker 0 on\|every worker may run" "$work/one.log" ||
  fail "one worker: the launcher speaks of placing workers"

# 2 machines x 2 local ranks: 4 worker processes, each on its own share where there are 4 CPUs
# or more, anywhere (said) where there are fewer.
job local --workers 2 --local-size 2
if ((${#cpus[@]} >= 4 && can_bind)); then
  mapfile -t want < <(shares 4)
  g=0
  for name in "worker 0.0" "worker 0.1" "worker 1.0" "worker 1.1"; do
    expect_cpus "$work/local.log" "$name" "$(expanded "${want[g]}")"
    g=$((g + 1))
  done
else
  for name in "worker 0.0" "worker 0.1" "worker 1.0" "worker 1.1"; do
    expect_cpus "$work/local.log" "$name" "$all_cpus"
  done
  ((${#cpus[@]} >= 4)) ||
    expect_line "$work/local.log" "$(unbound_line "4 worker processes, ${#cpus[@]} CPUs")"
fi

# Elastic training: workers come and go, so none is bound.
BYTEPS_MIN_NUM_WORKER=1 job elastic --workers 2
expect_cpus "$work/elastic.log" "worker 0" "$all_cpus"
expect_cpus "$work/elastic.log" "worker 1" "$all_cpus"
expect_line "$work/elastic.log" "$(unbound_line "elastic training is on (workers come and go)")"

# Where the affinity cannot be set (a taskset that fails stands for a sandbox that forbids it):
# nobody bound, said once, and the job runs.
if ((${#cpus[@]} >= 2)); then
  mkdir "$work/bin"
  printf '#!/bin/sh\necho "taskset: failed to set affinity: Operation not permitted" >&2\n%s\n' \
    'exit 1' >"$work/bin/taskset"
  chmod +x "$work/bin/taskset"
  PATH=$work/bin:$PATH job refused --workers 2
  expect_cpus "$work/refused.log" "worker 0" "$all_cpus"
  expect_cpus "$work/refused.log" "worker 1" "$all_cpus"
  mapfile -t want < <(shares 2)
  expect_line "$work/refused.log" "$(unbound_line "taskset -c ${want[0]} failed here")"
fi

status=0
out=$("$launch" --worker-cpus half -- true 2>&1) || status=$?
((status == 2)) || fail "--worker-cpus half: exit $status, expected 2"
[[ $out == *"--worker-cpus 'half' is not valid: expected split or all"* ]] ||
  fail "--worker-cpus half: '$out' does not name the option and its values"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "OK: each worker on its own share with split, anywhere where it must be, and said"
