#!/usr/bin/env bash
# Every GPU check of issue 14 in one run, for a GPU machine that did not build the project:
#
#   scripts/gpu-stage.sh build-gpu .gpu-stage    # here: the programs and the libraries they need
#   scripts/gpu-device-check.sh .gpu-stage OUT   # there: the checks, each bounded, log in OUT
#
# STAGE has a build tree's layout (tools/, tests/gpu/, examples/, benchmarks/) and lib/ with the
# shared libraries the GPU machine may lack (fmt, rdma-core, the CUDA runtime). NCCL is the GPU
# machine's own: the first libnccl.so.2 found under /usr/local/cuda*, /usr/lib*, or a Python
# package nvidia.nccl. Every step runs even when an earlier one failed; the script exits 1 if any
# failed, and the summary at the end lists them. GPU_CHECK_ONLY=REGEX runs only the steps whose
# name matches (grep -E), for a short lease on a device.
set -uo pipefail

stage=${1:?usage: gpu-device-check.sh STAGE OUT}
out=${2:?usage: gpu-device-check.sh STAGE OUT}
stage=$(cd "$stage" && pwd)
mkdir -p "$out"
log=$out/device.log
exec > >(tee -a "$log") 2>&1

failed=()
step() {  # step NAME TIMEOUT_S CMD...: runs CMD, records a failure (77 is a skip)
  local name=$1 limit=$2
  shift 2
  if [[ -n ${GPU_CHECK_ONLY:-} ]] && ! grep -qE "$GPU_CHECK_ONLY" <<<"$name"; then
    echo "==== $name: left out (GPU_CHECK_ONLY)"
    return 0
  fi
  echo
  echo "==== $name"
  local t0=$SECONDS rc=0
  timeout -k 10 "$limit" "$@" || rc=$?
  echo "==== $name: exit $rc after $((SECONDS - t0)) s"
  if ((rc == 77)); then echo "     (skipped)"; elif ((rc != 0)); then failed+=("$name (exit $rc)"); fi
}

nccl_dir=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu; do
  [[ -e $d/libnccl.so.2 ]] && { nccl_dir=$d; break; }
done
if [[ -z $nccl_dir ]]; then
  for py in python3 /opt/torch/.venv/bin/python3; do
    d=$("$py" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null) || continue
    [[ -e $d/libnccl.so.2 ]] && { nccl_dir=$d; break; }
  done
fi
export LD_LIBRARY_PATH="$stage/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TMPDIR=${TMPDIR:-/tmp} NCCL_DEBUG=${NCCL_DEBUG:-WARN}

echo "==== machine"
date -u
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
nvidia-smi topo -m 2>/dev/null | head -5 || true
nproc
echo "NCCL: ${nccl_dir:-not found}"
strings "$nccl_dir/libnccl.so.2" 2>/dev/null | grep -m1 '^NCCL version' || true
for b in tools/byteps-server tests/gpu/byteps_nccl_push_pull_check examples/train_mlp_cuda \
         benchmarks/bps-gpu-bench; do
  missing=$(ldd "$stage/$b" | grep 'not found' || true)
  [[ -n $missing ]] && { echo "$b lacks: $missing"; failed+=("libraries of $b"); }
done

cd "$stage"
launch=tools/byteps-launch

step "gpu-unit: order board" 60 tests/gpu/byteps_order_board_tests
step "gpu-unit: nccl policy pieces" 60 tests/gpu/byteps_nccl_unit_tests
step "gpu-fake: pipeline on the CPU model" 120 tests/gpu/byteps_nccl_fake_device_tests
step "gpu: probe" 30 tests/gpu/byteps_nccl_push_pull_check --probe
step "gpu: nccl push_pull, 2 machines x 1 GPU process, every dtype, exact sums" 150 \
  env BYTEPS_PARTITION_BYTES=65536 BYTEPS_LOG_LEVEL=WARNING \
  tests/gpu/byteps_nccl_push_pull_check --launch "$launch" --workers 2 --servers 2 --local-size 1
step "gpu: nccl push_pull, 2 machines x 2 GPU processes (needs 2 GPUs: expect a skip)" 30 \
  env BYTEPS_PARTITION_BYTES=65536 BYTEPS_LOG_LEVEL=WARNING \
  tests/gpu/byteps_nccl_push_pull_check --launch "$launch" --workers 2 --servers 2 --local-size 2
step "gpu: train_mlp_cuda on 2 workers x 2 servers" 150 \
  "$launch" --workers 2 --servers 2 --timeout 140 -- examples/train_mlp_cuda
step "cpu: train_mlp --model small on 2 workers x 2 servers (the main job, for the loss)" 90 \
  "$launch" --workers 2 --servers 2 --timeout 80 -- examples/train_mlp --model small
step "figures: benchmarks/gpu-sweep.sh" 240 benchmarks/gpu-sweep.sh "$stage"
step "figures: benchmarks/gpu-sweep.sh --workers 1 (no two workers share the GPU)" 240 \
  benchmarks/gpu-sweep.sh "$stage" --workers 1 --trace-sizes "1M 64M"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [[ -n $sanitizer ]]; then
  step "gpu: nccl push_pull under compute-sanitizer (memcheck), 2 machines x 1 GPU process" 170 \
    env BYTEPS_PARTITION_BYTES=65536 BYTEPS_LOG_LEVEL=WARNING \
    "$launch" --workers 2 --servers 2 --timeout 160 -- \
    "$sanitizer" --tool memcheck --error-exitcode 1 tests/gpu/byteps_nccl_push_pull_check
else
  echo "compute-sanitizer not found: the memcheck run is left out"
fi

echo
echo "==== summary"
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "every step passed (or skipped where it says so)"
