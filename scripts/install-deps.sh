#!/usr/bin/env bash
# Installs what byteps needs to build, test and run its main job, from Debian's packages only.
# Safe to run again: it installs only what is missing.
set -euo pipefail

packages=(cmake ninja-build g++ make libasio-dev libfmt-dev catch2)
# The deploy tests (tests/deploy, docs/deploy.md): a real Slurm with munge, run in network
# namespaces (iproute2).
packages+=(slurm-wlm munge iproute2)
# bps::transport::rdma over rdma-core's libibverbs and librdmacm (BYTEPS_WITH_RDMA). No device
# is needed to build it or to run its tests over the emulated verbs layer (tests/rdma).
packages+=(libibverbs-dev librdmacm-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The Kubernetes manifests' offline validator runs on node; a node that came from elsewhere
# (with its own npm) is kept, else Debian's nodejs and npm are installed.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  for p in nodejs npm; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: everything is installed (${packages[*]}, node $(node --version))"
else
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "install-deps: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The validator's npm packages (deploy/kubernetes/validate/package-lock.json), from the npm
# registry, into deploy/kubernetes/validate/node_modules; again only when the lock file changed.
validate_dir=$(cd "$(dirname "$0")/.." && pwd)/deploy/kubernetes/validate
if [[ -f $validate_dir/package-lock.json ]] &&
  ! [[ $validate_dir/node_modules/.package-lock.json -nt $validate_dir/package-lock.json ]]; then
  echo "install-deps: npm ci in deploy/kubernetes/validate (the Kubernetes manifests' validator)"
  (cd "$validate_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
