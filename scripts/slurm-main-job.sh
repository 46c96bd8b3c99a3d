#!/usr/bin/env bash
# The main job on a real Slurm, by hand: installs the dependencies (slurm-wlm and munge among
# them), builds byteps-server and train_mlp, then runs tests/deploy/slurm_cluster.sh: a Slurm
# of 3 nodes in network namespaces on this machine, the main job through sbatch and
# byteps-slurm, and a job whose worker is killed. Needs root. Arguments go to train_mlp
# (default: --model small). docs/deploy.md has the details.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh --target byteps-server train_mlp >/dev/null
build_dir=${BUILD_DIR:-build}
(($# > 0)) || set -- --model small
exec tests/deploy/slurm_cluster.sh test "$build_dir/tools/byteps-slurm" "$build_dir/tools/byteps-server" \
  "$build_dir/examples/train_mlp" "$@"
