#!/usr/bin/env bash
# The Kubernetes manifests, offline (no cluster exists here): deploy/kubernetes/render.sh
# renders a job for two sizes; deploy/kubernetes/validate/validate.mjs checks every document
# against the Kubernetes API schema (kubernetes-models, strict about unknown fields) and the
# job's consistency, and prints its ranks and counts, which must be exactly those asked for.
# Then manifests broken on purpose must be refused, and render.sh must refuse bad sizes.
#   kubernetes_check.sh SOURCE_DIR
# Needs node and the validator's npm packages (scripts/install-deps.sh installs them); without
# node it exits 77 (a skip).
set -uo pipefail
src=${1:?usage: kubernetes_check.sh SOURCE_DIR}
render=$src/deploy/kubernetes/render.sh
validator=$src/deploy/kubernetes/validate/validate.mjs
command -v node >/dev/null || { echo "SKIPPED: node not found (scripts/install-deps.sh installs nodejs and npm)"; exit 77; }
[[ -d $src/deploy/kubernetes/validate/node_modules/kubernetes-models ]] || {
  echo "FAIL: the validator's npm packages are not installed: run scripts/install-deps.sh (npm ci in deploy/kubernetes/validate)"
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# check_size NAME RENDER-ARGS... -- EXPECTED-LINES (from stdin)
check_size() {
  local name=$1
  shift
  local want got rc=0
  want=$(cat)
  "$render" "$@" >"$work/$name.yaml" || { fail "$name: render.sh $* exited $?"; return; }
  got=$(node "$validator" --byteps "$work/$name.yaml" 2>&1) || rc=$?
  echo "---- $name: render.sh $*"
  echo "$got" | sed 's/^/  /'
  ((rc == 0)) || fail "$name: the validator refused the manifests (exit $rc)"
  local line
  while IFS= read -r line; do
    grep -qxF -- "$line" <<<"$got" || fail "$name: expected the line '$line'"
  done <<<"$want"
}

check_size demo --job demo --workers 3 --servers 2 --standby 1 --token t0k3n -- train_mlp --model small <<'EOF'
scheduler: Deployment/demo-scheduler (1 replica) behind Service/demo-scheduler:9000
servers: StatefulSet/demo-server, 2 replicas = DMLC_NUM_SERVER 2, ranks 0..1 from the pod index
standby servers: StatefulSet/demo-standby, 1 replica(s)
workers: Job/demo-workers, 3 indexed completions, 3 at once = DMLC_NUM_WORKER 3, DMLC_WORKER_ID 0..2 from the completion index
worker command: ["train_mlp","--model","small"]
kubernetes-models 5.1.0: 8 document(s) valid, 0 problem(s) (strict: unknown fields are errors)
EOF
grep -qx '  BYTEPS_JOB_TOKEN: "t0k3n"' "$work/demo.yaml" || fail "demo: the Secret does not hold the token given"

check_size large --workers 16 --servers 8 --namespace training --image registry.example/byteps:1.0 \
  --server-memory 8Gi --worker-cpu 7500m <<'EOF'
scheduler: Deployment/byteps-scheduler (1 replica) behind Service/byteps-scheduler:9000
servers: StatefulSet/byteps-server, 8 replicas = DMLC_NUM_SERVER 8, ranks 0..7 from the pod index
workers: Job/byteps-workers, 16 indexed completions, 16 at once = DMLC_NUM_WORKER 16, DMLC_WORKER_ID 0..15 from the completion index
worker command: ["train_mlp"]
kubernetes-models 5.1.0: 7 document(s) valid, 0 problem(s) (strict: unknown fields are errors)
EOF
grep -c '^  namespace: training$' "$work/large.yaml" | grep -qx 7 || fail "large: not every object is in namespace training"
grep -qx '  DMLC_NUM_WORKER: "16"' "$work/large.yaml" || fail "large: DMLC_NUM_WORKER is not 16"
[[ $(grep -c '^          image: registry.example/byteps:1.0$' "$work/large.yaml") == 3 ]] || fail "large: the image is not on all 3 pod templates"
grep -qE '^  BYTEPS_JOB_TOKEN: "[0-9a-f]{32}"$' "$work/large.yaml" || fail "large: no random 32-digit token"

# Broken on purpose: each must be refused with a message naming what is wrong.
# broken NAME SED-SCRIPT EXPECTED-MESSAGE-PART
broken() {
  local name=$1 script=$2 part=$3 out rc=0
  sed "$script" "$work/demo.yaml" >"$work/broken-$name.yaml"
  out=$(node "$validator" --byteps "$work/broken-$name.yaml" 2>&1) || rc=$?
  if ((rc != 1)) || ! grep -qF -- "$part" <<<"$out"; then
    fail "broken ($name): expected exit 1 and '$part', got exit $rc: $(grep INVALID <<<"$out")"
  else
    echo "ok: refused ($name): $(grep -F -- "$part" <<<"$out" | head -1)"
  fi
}
broken "misspelled field" 's/^          livenessProbe:/          livenesProbe:/' \
  "fields the schema does not have: spec.template.spec.containers.0.livenesProbe"
broken "wrong type" 's/^              containerPort: 9000/              containerPort: nine/' \
  "containerPort must be integer"
broken "replicas differ from DMLC_NUM_SERVER" 's/^  DMLC_NUM_SERVER: "2"/  DMLC_NUM_SERVER: "3"/' \
  "the server StatefulSet has 2 replicas, DMLC_NUM_SERVER is 3"
broken "completions differ from DMLC_NUM_WORKER" 's/^  completions: 3/  completions: 4/' \
  "the worker Job runs 4 completions, 3 at once; DMLC_NUM_WORKER is 3"
broken "scheduler Service renamed" 's/^  DMLC_PS_ROOT_URI: "demo-scheduler"/  DMLC_PS_ROOT_URI: "demo-sched"/' \
  "DMLC_PS_ROOT_URI 'demo-sched' is not a Service of this job"

# render.sh refuses what cannot be a job.
refuses() {
  local part=$1 out rc=0
  shift
  out=$("$render" "$@" 2>&1 >/dev/null) || rc=$?
  if ((rc != 2)) || [[ $out != *"$part"* ]]; then
    fail "render.sh $*: expected exit 2 and '$part', got exit $rc: $out"
  else
    echo "ok: render.sh $* refused: $out"
  fi
}
refuses "--workers '0' is not valid" --workers 0
refuses "--job 'Big_Job' is not valid" --job Big_Job
refuses "--standby needs server failover" --standby 1 --failover-ms 0
refuses "--server-memory '2 GB' is not a Kubernetes quantity" --server-memory "2 GB"

if ((failures > 0)); then
  echo "kubernetes manifests: $failures check(s) failed"
  exit 1
fi
echo "ok: the manifests are valid against the Kubernetes API schema (kubernetes-models 5.1.0, strict) for both sizes, with the ranks and counts asked for"
