#!/usr/bin/env bash
# Renders the Kubernetes manifests of one byteps job (templates/*.yaml) for a given size and
# prints them as one YAML stream: a ConfigMap and a Secret, the scheduler (Deployment + Service),
# the servers (StatefulSet + headless Service), standby servers if asked, and the workers
# (an indexed Job). Apply the result with `kubectl apply -f`. See docs/deploy.md. The plan (the
# counts, and each role's variables) comes from tools/byteps_plan.py, as byteps-launch's and
# byteps-slurm's do; this script checks the Kubernetes options and fills in the templates.
set -euo pipefail

prog_name=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  cat <<EOF
Usage: $prog_name [OPTIONS] [-- WORKER COMMAND [ARGS...]]

Prints the manifests of one byteps job. The worker command defaults to the example trainer,
train_mlp, of the image built by deploy/Dockerfile.

  --workers N          worker pods (DMLC_NUM_WORKER; the Job's completions) (default 2)
  --servers N          server pods (DMLC_NUM_SERVER; the StatefulSet's replicas) (default 2)
  --standby N          standby server pods (default 0)
  --job NAME           the job's name: a prefix of every object's name (default byteps)
  --namespace NS       the namespace (default default)
  --image IMAGE        the container image with byteps-server and the trainer (default byteps:latest)
  --token TOKEN        BYTEPS_JOB_TOKEN (default: 32 random hex digits)
  --failover-ms MS     BYTEPS_FAILOVER_TIMEOUT_MS (default 60000; 0 turns server failover off)
  --server-cpu Q       CPU request of each server (default 2)
  --server-memory Q    memory request and limit of each server (default 2Gi)
  --worker-cpu Q       CPU request of each worker (default 2)
  --worker-memory Q    memory request and limit of each worker (default 4Gi)
  --help               print this help
EOF
}

die() {
  echo "$prog_name: error: $*" >&2
  exit 2
}

workers=2 servers=2 standbys=0 job=byteps namespace=default image=byteps:latest token=
failover_ms=60000 server_cpu=2 server_memory=2Gi worker_cpu=2 worker_memory=4Gi
while (($# > 0)); do
  case $1 in
    --help | -h) usage; exit 0 ;;
    --) shift; break ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}"; continue ;;
    --workers | --servers | --standby | --job | --namespace | --image | --token | --failover-ms | \
      --server-cpu | --server-memory | --worker-cpu | --worker-memory)
      (($# >= 2)) || die "$1 needs a value"
      case $1 in
        --workers) workers=$2 ;;
        --servers) servers=$2 ;;
        --standby) standbys=$2 ;;
        --job) job=$2 ;;
        --namespace) namespace=$2 ;;
        --image) image=$2 ;;
        --token) token=$2 ;;
        --failover-ms) failover_ms=$2 ;;
        --server-cpu) server_cpu=$2 ;;
        --server-memory) server_memory=$2 ;;
        --worker-cpu) worker_cpu=$2 ;;
        --worker-memory) worker_memory=$2 ;;
      esac
      shift 2
      ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
command=("$@")
((${#command[@]} > 0)) || command=(train_mlp)

planner=$here/../../tools/byteps_plan.py
command -v python3 >/dev/null || die "python3 not found on PATH (tools/byteps_plan.py needs it)"
# The plan's values, each as a line "@NAME@" followed by its lines (byteps_plan.py kubernetes).
values=$(python3 "$planner" --prog "$prog_name" kubernetes --job "$job" --workers "$workers" \
  --servers "$servers" --standby "$standbys" --failover-ms "$failover_ms") || exit $?
declare -A planned=()
key=
while IFS= read -r line; do
  if [[ $line =~ ^@([A-Z_]+)@$ ]]; then
    key=${BASH_REMATCH[1]}
    planned[$key]=
  else
    planned[$key]+=${planned[$key]:+$'\n'}$line
  fi
done <<<"$values"
workers=${planned[WORKERS]} servers=${planned[SERVERS]} standbys=${planned[STANDBYS]}
# Object names get suffixes of up to 10 characters; a Service name is a DNS-1035 label (63).
[[ $job =~ ^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$ ]] ||
  die "--job '$job' is not valid: lower-case letters, digits and '-', starting with a letter, at most 40 characters"
[[ $namespace =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || die "--namespace '$namespace' is not a valid namespace name"
[[ $image =~ ^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$ ]] || die "--image '$image' is not a valid image reference"
for q in "--server-cpu:$server_cpu" "--worker-cpu:$worker_cpu" "--server-memory:$server_memory" "--worker-memory:$worker_memory"; do
  [[ ${q#*:} =~ ^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$ ]] || die "${q%%:*} '${q#*:}' is not a Kubernetes quantity"
done
if [[ -z $token ]]; then
  token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
fi
[[ $token =~ ^[A-Za-z0-9._~+/=-]+$ ]] ||
  die "--token may hold letters, digits and . _ ~ + / = - only (make the Secret with kubectl for others)"

# The worker command as a YAML flow sequence of JSON strings.
json_string() {
  local s=$1
  [[ $s != *[[:cntrl:]]* ]] || die "the worker command may not hold control characters"
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}
worker_command="["
for ((i = 0; i < ${#command[@]}; i++)); do
  ((i > 0)) && worker_command+=", "
  worker_command+=$(json_string "${command[$i]}")
done
worker_command+="]"

shopt -u patsub_replacement 2>/dev/null || true # '&' in a value stays '&'
render() {
  local t
  t=$(<"$here/templates/$1")
  t=${t//@JOB@/$job}
  t=${t//@NAMESPACE@/$namespace}
  t=${t//@IMAGE@/$image}
  for key in "${!planned[@]}"; do t=${t//@$key@/${planned[$key]}}; done
  t=${t//@TOKEN@/$token}
  t=${t//@SERVER_CPU@/$server_cpu}
  t=${t//@SERVER_MEMORY@/$server_memory}
  t=${t//@WORKER_CPU@/$worker_cpu}
  t=${t//@WORKER_MEMORY@/$worker_memory}
  t=${t//@WORKER_COMMAND@/$worker_command}
  [[ $t != *@[A-Z_]*@* ]] || die "templates/$1 has a placeholder render.sh does not know: $(grep -o '@[A-Z_]*@' <<<"$t" | head -1)"
  printf '%s\n' "$t"
}

echo "# byteps job '$job': $workers workers, $servers servers, $standbys standby; rendered by deploy/kubernetes/render.sh"
render config.yaml
echo "---"
render scheduler.yaml
echo "---"
render servers.yaml
if ((standbys > 0)); then
  echo "---"
  render standby.yaml
fi
echo "---"
render workers.yaml
