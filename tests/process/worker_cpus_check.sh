#!/usr/bin/env bash
# byteps-launch --worker-cpus: with split (the default) worker process g of P runs on CPUs
# [g*C/P, (g+1)*C/P) of the C CPUs the launcher may use, when P <= C, and anywhere otherwise;
# with all, every worker runs anywhere; the launcher says where it put them; where taskset
# fails, nobody is bound and the job runs; a bad mode is refused by name. Each worker prints its own Cpus_allowed_list, then runs a short real job.
# Usage: worker_cpus_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK
set -uo pipefail
launch=${1:?usage: worker_cpus_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK}
check=${2:?usage: worker_cpus_check.sh BYTEPS_LAUNCH PUSH_PULL_CHECK}
work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

cat >"$work/worker.sh" <<'EOF'
#!/usr/bin/env bash
grep '^Cpus_allowed_list:' /proc/self/status
exec "$@"
EOF
chmod +x "$work/worker.sh"

read -r -a cpus <<<"$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
echo "this machine lets us use ${#cpus[@]} CPUs: ${cpus[*]}"

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

# expect_cpus LOG NAME WANT: worker NAME's line in LOG lists exactly the CPUs WANT.
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

# job NAME ARGS...: a short job of byteps-launch ARGS; its output in $work/NAME.log.
job() {
  local name=$1 status=0
  shift
  BYTEPS_LOG_LEVEL=WARNING "$launch" --servers 1 --timeout 120 "$@" -- "$work/worker.sh" \
    "$check" --rounds 1 --max-elements 1000 >"$work/$name.log" 2>&1 || status=$?
  ((status == 0)) || { fail "$name: byteps-launch $* exited $status"; tail -20 "$work/$name.log"; }
}

# share G P: the CPUs worker process G of P gets with split.
share() {
  local from=$(($1 * ${#cpus[@]} / $2)) to=$((($1 + 1) * ${#cpus[@]} / $2))
  echo "${cpus[@]:from:to-from}"
}

job split --workers 2
if ((${#cpus[@]} >= 2)); then
  expect_cpus "$work/split.log" "worker 0" "$(share 0 2)"
  expect_cpus "$work/split.log" "worker 1" "$(share 1 2)"
  grep -q "^byteps-launch: worker 0 on CPUs\? [0-9,-]*, worker 1 on CPUs\? [0-9,-]* (--worker-cpus all" \
    "$work/split.log" || fail "split: no 'byteps-launch: worker 0 on CPU ...' line"
else
  expect_cpus "$work/split.log" "worker 0" "${cpus[*]}"
  expect_cpus "$work/split.log" "worker 1" "${cpus[*]}"
fi

job all --workers 2 --worker-cpus all
expect_cpus "$work/all.log" "worker 0" "${cpus[*]}"
expect_cpus "$work/all.log" "worker 1" "${cpus[*]}"
! grep -q "^byteps-launch: worker 0 on" "$work/all.log" || fail "all: the launcher says it placed workers"

# 2 machines x 2 local ranks: 4 worker processes, each a share of its own where there are
# 4 CPUs or more, and anywhere where there are fewer.
job local --workers 2 --local-size 2
g=0
for name in "worker 0.0" "worker 0.1" "worker 1.0" "worker 1.1"; do
  if ((${#cpus[@]} >= 4)); then
    expect_cpus "$work/local.log" "$name" "$(share "$g" 4)"
  else
    expect_cpus "$work/local.log" "$name" "${cpus[*]}"
  fi
  g=$((g + 1))
done

# Where the affinity cannot be set (a taskset that fails stands for a sandbox that forbids it):
# every worker unbound, said once, and the job runs.
if ((${#cpus[@]} >= 2)); then
  mkdir "$work/bin"
  printf '#!/bin/sh\necho "taskset: failed to set pid 0 affinity: Operation not permitted" >&2\nexit 1\n' \
    >"$work/bin/taskset"
  chmod +x "$work/bin/taskset"
  PATH=$work/bin:$PATH job refused --workers 2
  expect_cpus "$work/refused.log" "worker 0" "${cpus[*]}"
  expect_cpus "$work/refused.log" "worker 1" "${cpus[*]}"
  grep -q "^byteps-launch: taskset -c [0-9,-]* failed here: every worker may run on any CPU" \
    "$work/refused.log" || fail "refused: no 'taskset -c ... failed here' line"
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
echo "OK: each worker on its own share with split, anywhere with all"
