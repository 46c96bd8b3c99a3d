#!/usr/bin/env bash
# Installs what byteps needs to build, test and run its main job, from Debian's packages only.
# Safe to run again: it installs only what is missing.
set -euo pipefail

# libibverbs-dev and librdmacm-dev: bps::transport::rdma over rdma-core (BYTEPS_WITH_RDMA); rdma-core:
# the ibv_devices and rping tools, for the real-device suite where a device exists.
packages=(cmake ninja-build g++ make libasio-dev libfmt-dev catch2 libibverbs-dev librdmacm-dev rdma-core)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: everything is installed (${packages[*]})"
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
