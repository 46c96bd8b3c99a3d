#!/usr/bin/env bash
# Installs what byteps needs to build, test and run its main job on Debian 12, from Debian's
# packages only. Safe to run again: it installs only what is missing.
#
#   scripts/install-deps.sh [--also GROUP]...         install what is missing (build, test,
#       node, and each GROUP named: clang for the sanitizer builds and fuzzers, ci for .ci/run)
#   scripts/install-deps.sh --print-packages [GROUP]...
#       print the packages of the groups below on one line (default: build test node, what
#       this script installs) and change nothing. deploy/Dockerfile installs its packages so:
#       this file is the one list.
set -euo pipefail

# build: configure and build the library, byteps-server and the examples (OpenSSL's libcrypto
# is required: rendezvous/auth.hpp; libssl also gives transport::tls). deploy/Dockerfile's
# build stage installs these.
build=(cmake ninja-build g++ make libasio-dev libfmt-dev libssl-dev)
# test: what scripts/test.sh's tests need beyond the build. Without any of them a test, or a
# part of one, would not run; most would vanish without a word.
#   catch2                         the unit, cluster, rdma and tls test programs
#   libibverbs-dev librdmacm-dev   bps::transport::rdma (BYTEPS_WITH_RDMA), tested over the
#                                  emulated verbs layer (tests/rdma); no device needed
#   openssl                        the command that makes the tls tests' certificates
#   python3                        tools/byteps_plan.py (the launchers' planner, its unit test),
#                                  the hostile-client test and the Conan recipe's check
#   gnuplot-nox                    byteps-trace plot in the timeline test
#   slurm-wlm munge iproute2       a real Slurm, run in network namespaces (tests/deploy)
#   procps                         pkill (tests/process/flood_job.sh); cmake depends on it too,
#                                  but a test's tool is named here, not left to another's
#                                  dependencies. The rest of what the tests call (timeout,
#                                  unshare, nsenter, hostname) is in every Debian, minbase too
#   libtorch-dev                   the libtorch plugin (BYTEPS_WITH_TORCH: byteps::torch,
#                                  examples/train_torch, tests/torch); Debian 12 ships 1.13.1,
#                                  CPU only. Optional for the build: without it the plugin is
#                                  not built and its tests are not registered
#   libopenblas0-openmp            the system BLAS libtorch calls: with Debian's reference BLAS
#                                  a transformer's forward pass took 28 times as long
#                                  (docs/performance.md, "libtorch"), and the torch tests
#                                  56 core-seconds in the suite instead of 33
test=(catch2 libibverbs-dev librdmacm-dev openssl python3 gnuplot-nox slurm-wlm munge iproute2
      procps libtorch-dev libopenblas0-openmp)
# node: the Kubernetes manifests' offline validator (tests/deploy). A node that came from
# elsewhere (with its own npm) is kept; else Debian's nodejs and npm are installed (npm brings
# ca-certificates, which npm ci needs to reach the registry).
node=(nodejs npm)
# runtime: what byteps-server and train_mlp load at run time, by Debian 12's names: the image's
# final stage (deploy/Dockerfile) installs these. build's -dev packages depend on them, so this
# script installs no more for them (tests/deploy/dependencies_check.sh checks that they do).
runtime=(libfmt9 libssl3)
# clang: not for the README's commands. The ASan+UBSan preset and the fuzz targets compile with
# clang (scripts/sanitize.sh asan, scripts/fuzz.sh): it builds the instrumented tree in half
# GCC's time (docs/performance.md); libclang-rt-dev holds its sanitizer and libFuzzer runtimes.
clang=(clang libclang-rt-dev)
# ci: what .ci/run adds beyond clang: mmdebstrap for the bare Debian 12 root (bare-debian.sh).
ci=(mmdebstrap)

if [[ ${1:-} == --print-packages ]]; then
  shift
  (($# > 0)) || set -- build test node
  out=()
  for group in "$@"; do
    case $group in
      build) out+=("${build[@]}") ;;
      test) out+=("${test[@]}") ;;
      node) out+=("${node[@]}") ;;
      runtime) out+=("${runtime[@]}") ;;
      clang) out+=("${clang[@]}") ;;
      ci) out+=("${ci[@]}") ;;
      *)
        echo "install-deps: unknown group '$group': expected build, test, node, runtime, clang or ci" >&2
        exit 2
        ;;
    esac
  done
  echo "${out[*]}"
  exit 0
fi

packages=("${build[@]}" "${test[@]}")
while (($# > 0)); do
  if [[ $1 != --also ]]; then
    echo "install-deps: unknown argument '$1'; usage: install-deps.sh [--also clang|ci]..." \
      "or install-deps.sh --print-packages [GROUP]..." >&2
    exit 2
  fi
  case "${2:-}" in
    clang) packages+=("${clang[@]}") ;;
    ci) packages+=("${ci[@]}") ;;
    *)
      echo "install-deps: --also '${2:-}' is not a group: expected clang or ci" >&2
      exit 2
      ;;
  esac
  shift 2
done

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  for p in "${node[@]}"; do
    installed "$p" || missing+=("$p")
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
