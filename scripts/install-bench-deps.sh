#!/usr/bin/env bash
# Installs what the benchmarks under benchmarks/ need, from Debian's packages only, on top of
# scripts/install-deps.sh (the library's own build dependencies):
#   libbenchmark-dev           Google Benchmark, for benchmarks/micro.cpp
#   libgloo-dev                Gloo (TCP transport, ring all-reduce), for benchmarks/gloo_allreduce.cpp
#   libopenmpi-dev openmpi-bin Open MPI and mpirun, for benchmarks/mpi_allreduce.cpp
#   iperf3                     the plain TCP transfer that checks the emulated links' shaping
#   iproute2 ethtool           ip netns / tc (tbf) / veth + bridge for benchmarks/emulate.sh
#   gnuplot-nox                benchmarks/plot.sh (busbw against size, PNG)
#   python3-torch              PyTorch with gloo, for DistributedDataParallel in
#                              benchmarks/torch-vs-ddp.sh (benchmarks/torch_ddp.py)
#   (OpenBLAS, which the torch trainers need to measure the exchange rather than matrix
#   products, comes with install-deps.sh.)
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

packages=(libbenchmark-dev libgloo-dev libopenmpi-dev openmpi-bin iperf3 iproute2 ethtool gnuplot-nox
          python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-bench-deps: everything is installed (${packages[*]})"
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  command -v sudo >/dev/null || { echo "install-bench-deps: run as root or install sudo" >&2; exit 1; }
  sudo=(sudo)
fi
echo "install-bench-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
# iperf3 asks (debconf) whether to start a daemon: answer no, never start one.
echo "iperf3 iperf3/start_daemon boolean false" | "${sudo[@]}" debconf-set-selections 2>/dev/null || true
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
