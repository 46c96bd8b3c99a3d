#!/usr/bin/env bash
# Copies what scripts/gpu-device-check.sh runs out of a CUDA build into STAGE (a build tree's
# layout, well under the 64 MiB a GPU machine is sent), with the shared libraries that a machine
# without Debian's packages may lack. NCCL stays behind (200+ MiB): the GPU machine's own is used.
#
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBYTEPS_WITH_CUDA=ON \
#         -DBYTEPS_BUILD_BENCHMARKS=ON
#   ninja -C build-gpu bps-gpu-bench bps-bench byteps-server byteps-trace byteps_nccl_push_pull_check \
#         train_mlp_cuda train_mlp byteps_nccl_unit_tests byteps_nccl_fake_device_tests \
#         byteps_order_board_tests
#   scripts/gpu-stage.sh build-gpu .gpu-stage
set -euo pipefail
build=${1:?usage: gpu-stage.sh BUILD_DIR STAGE}
stage=${2:?usage: gpu-stage.sh BUILD_DIR STAGE}
rm -rf "$stage"
mkdir -p "$stage/lib"
files=(tools/byteps-launch tools/byteps_plan.py tools/byteps-server tools/byteps-trace
       tests/gpu/byteps_order_board_tests tests/gpu/byteps_nccl_unit_tests
       tests/gpu/byteps_nccl_fake_device_tests tests/gpu/byteps_nccl_push_pull_check
       examples/train_mlp_cuda examples/train_mlp benchmarks/bps-gpu-bench benchmarks/bps-bench
       benchmarks/gpu-sweep.sh)
for f in "${files[@]}"; do
  [[ -e $build/$f ]] || { echo "gpu-stage.sh: $build/$f is missing (see the commands above)" >&2; exit 2; }
  mkdir -p "$stage/$(dirname "$f")"
  cp -L "$build/$f" "$stage/$f"
done
# Every library the programs load, but the C library's own, the driver's and NCCL.
for f in "${files[@]}"; do
  { ldd "$build/$f" 2>/dev/null || true; } | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
du -sh "$stage"
