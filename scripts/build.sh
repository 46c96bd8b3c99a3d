#!/usr/bin/env bash
# Configures and builds byteps (tools, examples, tests) into ./build. Used by the other scripts.
# BUILD_DIR and CMAKE_ARGS (extra arguments for the configure step) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${BUILD_JOBS:-$(nproc)}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON ${CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs" "$@"
