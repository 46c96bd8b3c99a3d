#!/usr/bin/env bash
# The main job: installs the dependencies, builds, then starts a local cluster on loopback (a
# scheduler, 2 summation servers, 2 workers) that trains examples/train_mlp data-parallel: its
# large model by default (2.1 M parameters, 8.5 MB of gradients a step; under a minute on 2 cores).
# Arguments go to train_mlp (see build/examples/train_mlp --help), e.g. scripts/main-job.sh --epochs 10
# or scripts/main-job.sh --model small (the 7 K-parameter model the tests train).
# WORKERS (machines), SERVERS and LOCAL_SIZE (worker processes per machine, meeting in shared
# memory) change the cluster's shape, e.g. LOCAL_SIZE=2 scripts/main-job.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh --target byteps-server train_mlp >/dev/null
build_dir=${BUILD_DIR:-build}
exec "$build_dir/tools/byteps-launch" --workers "${WORKERS:-2}" --servers "${SERVERS:-2}" \
  --local-size "${LOCAL_SIZE:-1}" \
  -- "$build_dir/examples/train_mlp" "$@"
